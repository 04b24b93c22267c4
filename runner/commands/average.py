"""`runner average`: the mean of a run's kept checkpoints (timm's avg_checkpoints.py), evaluated and logged as a
new MLflow run linked to the original."""
from __future__ import annotations

import argparse
from pathlib import Path


def register(sub) -> None:
    p = sub.add_parser("average", help="average a run's kept checkpoints (the last K, or the best K by an epoch "
                                       "metric), evaluate the average, log it as a run linked to the original")
    p.add_argument("run_id", metavar="RUN_ID", help="the run whose checkpoints are averaged (a unique start of its "
                                                    "id will do)")
    p.add_argument("overrides", nargs="*", metavar="key=value",
                   help="changes to the run's experiment the average is evaluated with, e.g. data.root=/data/imagenet "
                        "data.eval_split=val_320")
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--last", type=_count, metavar="K", help="average the K latest checkpoints the run kept")
    which.add_argument("--best", type=_count, metavar="K",
                       help="average the K best checkpoints the run kept, by --metric")
    p.add_argument("--metric", help="with --best: an epoch metric the checkpoints recorded, e.g. eval/top1, "
                                    "eval_ema/top1, eval/loss (default: the run's trainer.checkpoint_best metric, "
                                    "else eval/top1)")
    p.add_argument("--mode", choices=("max", "min"),
                   help="with --best: max (higher is better) or min (default: the run's trainer.checkpoint_best mode "
                        "for its metric, else min for a loss and max for the rest)")
    p.add_argument("--no-ema", dest="ema", action="store_false",
                   help="average the trained weights; by default the EMA weights (trainer.ema) are averaged when the "
                        "checkpoints hold them, as timm's avg_checkpoints.py does")
    p.add_argument("--uri", help="tracking store holding the run (default: $MLFLOW_TRACKING_URI, else ./mlflow.db); "
                                 "the average is logged there, in the run's experiment")
    p.add_argument("--out", default="averaged", help="folder for <run id>/<rule>/step-N.pt (the averaged checkpoint) "
                                                     "and <run id>/experiments/ (default ./averaged)")
    p.set_defaults(handler=run)


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def run(args) -> int:
    from runner.errors import RunnerError
    from runner.evaluate.average import average_command
    from runner.weights.average import Rule

    if args.last is not None and (args.metric or args.mode):
        raise RunnerError("--metric and --mode choose among the checkpoints for --best; --last takes the latest.",
                          file="command line")
    rule = Rule("last", args.last) if args.last is not None else Rule("best", args.best, args.metric, args.mode)
    return average_command(args.run_id, rule, ema=args.ema, overrides=list(args.overrides), uri=args.uri,
                           out=Path(args.out))
