"""`runner resume RUN_ID`: continue a stopped run from its last checkpoint, in the same MLflow run."""
from __future__ import annotations

import shlex
from pathlib import Path

from runner import console


def register(sub) -> None:
    p = sub.add_parser("resume", help="continue a stopped (KILLED/FAILED) run from its last checkpoint")
    p.add_argument("run_id")
    p.add_argument("--uri", help="tracking store (default: the one `runner launch` uses)")
    p.set_defaults(handler=run)


def run(args) -> int:
    from runner.errors import DataError, error_at
    from runner.run.validate import validate
    from runner.sweep.child import sweep_child
    from runner.tracking import open_store_run, resolve_tracking_uri
    from runner.train.launch import launch

    uri = resolve_tracking_uri(args.uri, error_at("--uri", file="command line") if args.uri else None)
    stored = open_store_run(uri, args.run_id)
    experiment = stored.tags.get("runner.experiment_file", "")
    overrides = shlex.split(stored.tags.get("runner.overrides", ""))
    if not Path(experiment).is_file():
        raise DataError(f"the experiment file of run {args.run_id} ({experiment or 'unknown'}) is not here; run "
                        "`runner export RUN_ID` to get it, then `runner launch FILE --resume CHECKPOINT`.",
                        file="command line")
    v = validate(experiment, overrides)
    written = stored.tags.get("runner.checkpoint")
    checkpoint = Path(written) if written and Path(written).is_file() else fetched_checkpoint(v.config.trainer, v.config.name, stored, uri)
    console.note(f"resuming run {args.run_id}: {experiment} {' '.join(overrides)} from {checkpoint}")
    return launch(v, experiment, overrides, resume=str(checkpoint), observer=sweep_child(v.config.tracking.tags))


def fetched_checkpoint(trainer, experiment: str, stored, uri: str) -> Path:
    """The run's last.pt where the experiment keeps the run's checkpoints (trainer.checkpoint_dir/EXPERIMENT/), else
    its last checkpoint in the store, downloaded there (run.resume.fetch_checkpoint)."""
    from runner.errors import DataError
    from runner.run.resume import fetch_checkpoint

    try:
        return fetch_checkpoint(stored.run_id, uri, trainer.checkpoint_dir, experiment)
    except DataError:
        raise DataError(f"run {stored.run_id} has no checkpoint on this machine (tag runner.checkpoint: "
                        f"{stored.tags.get('runner.checkpoint') or 'not set'}) and logged none to {uri} "
                        "(trainer.checkpoint_log); resume it where it ran, or pass a checkpoint file to "
                        "`runner launch EXPERIMENT --resume FILE`.", file="command line") from None
