"""`runner launch`: train and evaluate an experiment, tracked in MLflow."""
from __future__ import annotations

import os

from runner import console
from runner.commands.args import add_experiment, cpu_note, experiment_and_overrides


def register(sub) -> None:
    p = sub.add_parser("launch", help="train and evaluate an experiment (DDP through torchrun), tracked in MLflow")
    add_experiment(p)
    p.add_argument("--resume", nargs="?", const="last", metavar="CHECKPOINT|RUN_ID",
                   help="continue from a checkpoint: a file, a run id, or (no value) this experiment's latest")
    p.set_defaults(handler=run)


def run(args) -> int:
    from runner.dist import under_torchrun
    from runner.launch import WORKER_ENV, launch
    from runner.validate import validate

    path, overrides = experiment_and_overrides(args)
    v = validate(path, overrides)
    if not (under_torchrun() and (WORKER_ENV in os.environ or int(os.environ.get("RANK", 0)) > 0)):
        cpu_note(v.graphs)  # said once: by the parent, or by rank 0 of a user's own torchrun
    return launch(v, path, overrides, resume=args.resume)


def _pct(x) -> str:
    return "" if x is None else f"{100 * x:.1f}%"


def print_summary(v, result, finished) -> None:
    """The final table: what was trained, how fast, how well, and where it was recorded."""
    m = result.metrics
    rows = [
        ["status", result.status],
        ["run id", result.run_id],
        ["epochs / steps", f"{result.epochs} / {result.steps}"],
        ["wall time", f"{result.seconds:.1f} s"],
        ["images/s (last epoch)", f"{m.get('epoch/images_per_s', 0):,.0f}"],
        ["data wait (last epoch)", _pct(m.get("epoch/data_wait_share"))],
    ]
    if "epoch/gpu_util_pct" in m:
        rows.append(["GPU utilization (last epoch)", f"{m['epoch/gpu_util_pct']:.0f}%"])
    if "eval/top1" in m:
        rows += [["eval top-1", _pct(m["eval/top1"])], ["eval top-5", _pct(m["eval/top5"])],
                 ["eval loss", f"{m['eval/loss']:.4f}"]]
    if result.checkpoint:
        rows.append(["checkpoint", str(result.checkpoint)])
    if finished.message:  # empty when tracking is off
        rows.append(["tracking", finished.message])
    console.out.print(console.table(f"{v.config.name or v.loaded.path.stem}: summary", ["", ""], rows,
                                    justify_numbers=False))
