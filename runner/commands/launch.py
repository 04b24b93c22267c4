"""`runner launch`: train and evaluate an experiment, tracked in MLflow."""
from __future__ import annotations

import os

from runner.commands.args import add_experiment, experiment_and_overrides
from runner.run.notes import label_notes, run_notes


def register(sub) -> None:
    p = sub.add_parser("launch", help="train and evaluate an experiment (DDP through torchrun), tracked in MLflow")
    add_experiment(p)
    p.add_argument("--resume", nargs="?", const="last", metavar="CHECKPOINT|RUN_ID|auto",
                   help="continue from a checkpoint: a file, a run id (its checkpoint fetched from the tracking store "
                        "when it is not here), or (no value) this experiment's latest; auto: the latest if there is "
                        "one, else a fresh start (for a job that may be requeued)")
    p.set_defaults(handler=run)


def run(args) -> int:
    from runner.dist import under_torchrun
    from runner.run.processes import WORKER_ENV
    from runner.run.validate import validate
    from runner.sweep.child import sweep_child
    from runner.train.launch import launch

    path, overrides = experiment_and_overrides(args)
    v = validate(path, overrides)
    if not (under_torchrun() and (WORKER_ENV in os.environ or int(os.environ.get("RANK", 0)) > 0)):
        run_notes(v.notes, v.graphs)  # said once: by the parent, or by rank 0 of a user's own torchrun
        label_notes(v.label_notes)
    return launch(v, path, overrides, resume=args.resume, observer=sweep_child(v.config.tracking.tags))
