"""`runner compile`: the pipeline as DALI Python source."""
from __future__ import annotations

from runner import console
from runner.commands.args import add_experiment, cpu_note, experiment_and_overrides
from runner.errors import ConfigError, display_path
from runner.plan import HYBRID, pipeline_args
from runner.validate import Validated


def register(sub) -> None:
    p = sub.add_parser("compile", help="print a pipeline as DALI Python (@pipeline_def of fn.* calls)")
    add_experiment(p)
    p.add_argument("--pipeline", choices=["train", "eval", HYBRID], default="train",
                   help=f"{HYBRID}: the copy of a hybrid train pipeline (pipelines.train.hybrid)")
    p.add_argument("-o", "--output", help="write to this file instead of stdout")
    p.set_defaults(handler=run)


def run(args) -> int:
    from runner.validate import validate

    from runner.files import check_writable, write_text_atomic

    path, overrides = experiment_and_overrides(args)
    if args.output:
        check_writable(args.output)
    v = validate(path, overrides)
    cpu_note(v.graphs)
    source = compiled_source(v, args.pipeline)
    if args.output:
        write_text_atomic(args.output, source)
        console.err.print(f"wrote {args.output}")
    else:
        print(source)
    return 0


def compiled_source(v: Validated, role: str) -> str:
    from runner.dsl.emit import emit_source

    if v.config.data.loader != "dali":
        raise ConfigError(f"data.loader is '{v.config.data.loader}': this experiment has no DALI pipeline to "
                          "compile. Set data.loader=dali.", **v.loaded.where("data.loader"))
    if role not in v.graphs:
        raise ConfigError(f"the experiment has no {role} pipeline (pipelines.{role} is not set).",
                          file=v.loaded.path, where=f"pipelines.{role}")
    origin = display_path(v.loaded.path) + (f" with {' '.join(v.loaded.overrides)}" if v.loaded.overrides else "")
    return emit_source(v.graphs[role], pipeline_args(v.loaded, role, v.target), origin=origin)
