"""`runner compile`: the pipeline as DALI Python source."""
from __future__ import annotations

from runner import console
from runner.commands.args import add_experiment, experiment_and_overrides
from runner.config.sections import HYBRID
from runner.run.notes import label_notes, run_notes


def register(sub) -> None:
    p = sub.add_parser("compile", help="print a pipeline as DALI Python (@pipeline_def of fn.* calls)")
    add_experiment(p)
    p.add_argument("--pipeline", choices=["train", "eval", HYBRID], default="train",
                   help=f"{HYBRID}: the copy of a hybrid train pipeline (pipelines.train.hybrid)")
    p.add_argument("-o", "--output", help="write to this file instead of stdout")
    p.set_defaults(handler=run)


def run(args) -> int:
    from runner.files import check_writable, write_text_atomic
    from runner.loaders.dali_plan import compiled_source
    from runner.run.validate import validate

    path, overrides = experiment_and_overrides(args)
    if args.output:
        check_writable(args.output)
    v = validate(path, overrides)
    run_notes(v.notes, v.graphs)
    label_notes(v.label_notes)
    source = compiled_source(v, args.pipeline)
    if args.output:
        write_text_atomic(args.output, source)
        console.err.print(f"wrote {args.output}")
    else:
        print(source)
    return 0
