"""`runner preview`: a PNG grid of the images a pipeline feeds the model, captioned with their class names."""
from __future__ import annotations

from runner import console
from runner.commands.args import add_experiment, experiment_and_overrides
from runner.config.sections import HYBRID
from runner.errors import ConfigError, RunnerError, did_you_mean
from runner.run.notes import label_notes, run_notes

PIPELINES = ("train", "eval", HYBRID)  # what --pipeline draws


def register(sub) -> None:
    p = sub.add_parser("preview", help="write a PNG grid of what a pipeline feeds the model, labelled by class")
    add_experiment(p)
    p.add_argument("--pipeline", default="train", metavar="|".join(PIPELINES),
                   help="train (the batches training takes), eval, or train.hybrid (a hybrid's copy alone)")
    p.add_argument("-n", type=int, default=16, metavar="N", help="images to draw (default 16)")
    p.add_argument("-o", "--output", help="PNG file to write (default: EXPERIMENT_NAME-PIPELINE.png here)")
    p.add_argument("--epoch", type=int, default=1, metavar="N",
                   help="the train batches of epoch N (from 1, as training counts): its side on a resolution "
                        "schedule, its order with data.repeats (default 1)")
    p.set_defaults(handler=run)


def check_arguments(args) -> None:
    """--pipeline and -n, before any work."""
    if args.pipeline not in PIPELINES:
        raise RunnerError(f"'{args.pipeline}' is not a pipeline; choose {', '.join(PIPELINES[:-1])} or "
                          f"{PIPELINES[-1]}." + did_you_mean(args.pipeline, PIPELINES), file="command line",
                          where="--pipeline")
    if args.n < 1:
        raise RunnerError(f"{args.n} images: draw at least one (-n 16 draws sixteen).", file="command line",
                          where="-n")
    if args.epoch < 1:
        raise RunnerError(f"epoch {args.epoch}: epochs count from 1, as training prints them (--epoch 1 is the "
                          "first).", file="command line", where="--epoch")


def check_pipeline(v, pipeline: str) -> None:
    """The --pipeline the experiment has: a ConfigError naming the ones it does have otherwise."""
    cfg = v.config
    if pipeline == HYBRID and (cfg.data.loader != "dali" or cfg.pipelines.train.hybrid is None):
        why = ("pipelines.train.hybrid is not set" if cfg.data.loader == "dali"
               else f"data.loader is '{cfg.data.loader}', and a hybrid copy is a DALI pipeline")
        raise ConfigError(f"the train pipeline has no hybrid copy ({why}), so --pipeline {HYBRID} has nothing "
                          "to show; choose train or eval, or set pipelines.train.hybrid (docs/pipelines.md, "
                          "\"Hybrid\").",
                          **v.loaded.at("pipelines.train"))
    if pipeline == "eval" and cfg.data.loader == "dali" and cfg.pipelines.eval is None:
        raise ConfigError("the experiment has no eval pipeline (pipelines.eval is not set), so --pipeline eval "
                          "has nothing to show; choose train.", file=v.loaded.path, where="pipelines.eval")


def run(args) -> int:
    from runner.files import check_writable, write_bytes_atomic
    from runner.preview.draw import preview_png
    from runner.run.data import checked_with_data, ensure_data
    from runner.run.validate import validate

    path, overrides = experiment_and_overrides(args)
    check_arguments(args)
    if args.output:
        check_writable(args.output)
    v = validate(path, overrides)
    check_pipeline(v, args.pipeline)
    output = check_writable(args.output or f"{v.config.name}-{args.pipeline}.png")
    run_notes(v.notes, v.graphs)
    label_notes(v.label_notes)
    ensure_data(v)
    v = checked_with_data(v)
    from runner.preview.batches import epoch_side

    side = epoch_side(v.grids, args.pipeline, args.epoch)
    if side is not None:
        console.out.print(side, markup=False, highlight=False)
    png, drawn = preview_png(v, args.pipeline, args.n, args.epoch)
    write_bytes_atomic(output, png)
    short = f" (its epoch on rank 0 has {drawn})" if drawn < args.n else ""
    console.err.print(f"wrote {output}: {drawn} {args.pipeline} images{short}", markup=False, highlight=False)
    return 0

