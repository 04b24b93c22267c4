"""--resume: the checkpoint it names (a file, a run folder, a run id here or in the store, the latest), checked.

An experiment keeps its runs' checkpoints in trainer.checkpoint_dir/NAME/RUN_ID/ (`checkpoint_dir` and `experiment`
below); `uri` is the tracking store its runs log to (None with tracking off).
"""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from runner import console
from runner.errors import DataError, RunnerError
from runner.tracking.store import get_run
from runner.weights import checkpoint
from runner.weights.store import restore_last_checkpoint

AUTO_RESUME = "auto"  # --resume auto: the latest checkpoint if there is one, else a fresh start (a requeued job)
RUN_ID = re.compile(r"[0-9a-f]{6,32}")  # an MLflow run id, or the start of one


def load_resume(resume: str, checkpoint_dir: str, experiment: str, uri: str | None,
                settings: dict[str, Any]) -> dict:
    """The checkpoint --resume names, refused if the experiment's `settings` (checkpoint.fixed_settings) do not fit
    it."""
    path = resolve_resume(resume, checkpoint_dir, experiment, uri)
    state = checkpoint.load(path)
    checkpoint.check_resumable(state, path, settings)
    return state


def auto_resume(checkpoint_dir: str, experiment: str) -> str | None:
    """The experiment's latest checkpoint under trainer.checkpoint_dir, said; None (a fresh start) when it has none."""
    found = checkpoint.find_latest(checkpoint_dir, experiment)
    if found is None:
        return None
    if "RANK" not in os.environ or os.environ.get("RANK") == "0":
        console.note(f"--resume auto: continuing from {found}")
    return str(found)


def resolve_resume(resume: str, checkpoint_dir: str, experiment: str, uri: str | None) -> Path:
    """--resume PATH | RUN_ID | last -> a checkpoint file."""
    path = Path(resume)
    if path.is_file():
        return path
    if path.is_dir() and (path / checkpoint.LAST).is_file():
        return path / checkpoint.LAST
    if resume == "last":
        found = checkpoint.find_latest(checkpoint_dir, experiment)
        if found is None:
            raise DataError(f"--resume: no checkpoint of experiment '{experiment}' under {checkpoint_dir}/.")
        return found
    candidate = checkpoint.run_dir(checkpoint_dir, experiment, resume) / checkpoint.LAST
    if candidate.is_file():
        return candidate
    found = fetch_checkpoint(resume, uri, checkpoint_dir, experiment, missing_ok=True) \
        if uri and RUN_ID.fullmatch(resume) else None
    if found is not None:
        return found
    stored = f", or logged to {uri}" if uri is not None else ""
    raise DataError(f"--resume {resume}: not a checkpoint file, a run folder, a run id with a checkpoint under "
                    f"{checkpoint_dir}/{experiment}/{stored}, or 'last'.")


def fetch_checkpoint(run_id: str, uri: str, checkpoint_dir: str, experiment: str, *,
                     missing_ok: bool = False) -> Path | None:
    """Run `run_id`'s last checkpoint in the store at `uri`, downloaded to where the experiment keeps the run's
    checkpoints (with the store's checkpoint index), for a resume on a machine that does not have it. Where the
    store lacks the run or the run logged no checkpoint: None with `missing_ok`, else RunnerError / DataError. A
    download that fails raises either way."""
    try:
        run_id = get_run(uri, run_id).run_id
    except RunnerError:
        if missing_ok:
            return None
        raise
    folder = checkpoint.run_dir(checkpoint_dir, experiment, run_id)
    if (folder / checkpoint.LAST).is_file():  # fetched already (each process of a launch resolves --resume)
        return folder / checkpoint.LAST
    try:
        path, step = restore_last_checkpoint(uri, run_id, folder)
    except DataError:
        if missing_ok:
            return None
        raise
    console.note(f"run {run_id}'s checkpoint is not on this machine: fetched its last logged one (step {step}) "
                 f"from {uri} into {folder}.")
    return path
