"""`runner evaluate`: score a run's (or a checkpoint's) weights on any split, loader or pipeline, as a new
MLflow run linked to the original."""
from __future__ import annotations

from pathlib import Path

from runner.errors import RunnerError


def register(sub) -> None:
    p = sub.add_parser("evaluate", help="evaluate a run's or a checkpoint's weights (any split, loader or eval "
                                        "pipeline; DDP through torchrun), logged as a run linked to the original")
    p.add_argument("source", metavar="RUN_ID|CHECKPOINT", help="a tracked run (a unique start of its id will do), or "
                                                              "a checkpoint file runner launch wrote")
    p.add_argument("overrides", nargs="*", metavar="[EXPERIMENT] key=value",
                   help="the experiment to evaluate with (default: the one the run logged, or the checkpoint "
                        "holds), then overrides, e.g. data.eval_split=val_320 data.loader=torchvision")
    p.add_argument("--uri", help="tracking store holding the run (default: $MLFLOW_TRACKING_URI, else ./mlflow.db); "
                                 "the evaluation is logged there too unless tracking.uri is overridden")
    p.add_argument("--out", default="evaluated", help="folder for <run id>/experiments/ (and pipelines/): the "
                                                      "experiment written from the run or checkpoint (default "
                                                      "./evaluated)")
    p.set_defaults(handler=run)


def run(args) -> int:
    from runner.commands.args import split_overrides
    from runner.evaluate.command import evaluate_command

    files, overrides = split_overrides(args.overrides)
    if len(files) > 1:
        raise RunnerError(f"expected at most one experiment file after {args.source}, then key=value overrides; got "
                          f"{', '.join(files)}.", file="command line")
    return evaluate_command(args.source, files[0] if files else None, overrides, args.uri, Path(args.out))
