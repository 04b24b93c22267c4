"""A run's checkpoints in its artifact store: where they are (checkpoints/index.json), fetching one back, and the
LoggedModel that points at the best one.

Layout of a run's artifacts:
    checkpoints/index.json      {"last": "checkpoints/step-0000120.pt", "best": ..., "metric": ..., "kept": [...]}
    checkpoints/step-NNNNNNN.pt the checkpoints kept (trainer.checkpoint_keep latest, and the best)
Each checkpoint holds the model and optimizer states, the resolved experiment and the label map.
"""
from __future__ import annotations

import json
import logging
import os
import tempfile
from pathlib import Path
from typing import Any

from runner.errors import DataError, RunnerError, display_path
from runner.files import user_cache, write_text_atomic
from runner.tracking.store import client, find_runs, get_run, logged_config, read_artifact, store_uri
from runner.weights import checkpoint
from runner.weights.checkpoint import LAST
from runner.weights.kept import INDEX as LOCAL_INDEX

log = logging.getLogger("runner.tracking")

INDEX = "checkpoints/index.json"
WHICH = ("best", "last")


def cache_dir() -> Path:
    """Where fetched checkpoints are kept: runner's user cache (runner.files.user_cache), weights/<run id>/."""
    return user_cache("weights")


def read_index(uri: str, run_id: str) -> dict[str, Any] | None:
    """The run's checkpoints/index.json, or None when it logged no checkpoint."""
    text = read_artifact(uri, run_id, INDEX)
    return json.loads(text) if text else None


def fetch_run_weights(run_id: str, tracking_uri: str | None = None, which: str = "best",
                      dest: Path | None = None) -> Path:
    """The run's best (or last) checkpoint as a local file, downloaded from its store once and cached.

    `run_id` may be a unique start of the id; `tracking_uri` defaults to the store runner launch logs to.
    "best" is the last checkpoint when the run named no trainer.checkpoint_best. Raises DataError when the
    run logged no checkpoint, RunnerError when the store does not answer or lacks the run."""
    if which not in WHICH:
        raise ValueError(f"which must be one of {WHICH}, not {which!r}")
    uri = store_uri(tracking_uri)
    record = get_run(uri, run_id)
    index = read_index(uri, record.run_id)
    if index is None:
        raise DataError(f"run {record.run_id} at {uri} logged no checkpoint (no {INDEX} among its artifacts).",
                        where="RUN_ID")
    name = index.get(which) or index["last"]
    target = (dest or cache_dir() / record.run_id) / Path(name).name
    if target.is_file() and target.stat().st_size == index.get("sizes", {}).get(name, -1):
        return target
    return download(uri, record.run_id, name, target)


def download(uri: str, run_id: str, name: str, target: Path) -> Path:
    """The run's artifact `name` written as the file `target`, atomically: a process reading it never sees half a
    file. Raises RunnerError when the store does not hand it over."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".fetch-", dir=target.parent) as tmp:
        try:
            local = client(uri).download_artifacts(run_id, name, tmp)
        except Exception as e:  # noqa: BLE001 - what a store raises varies by store
            raise RunnerError(f"cannot download {name} of run {run_id} from {uri}: "
                              f"{str(e).strip().splitlines()[0][:300]}", where="RUN_ID") from None
        os.replace(local, target)
    log.info("fetched %s of run %s from %s into %s", name, run_id, uri, target)
    return target


def restore_last_checkpoint(uri: str, run_id: str, directory: Path) -> tuple[Path, int]:
    """The last logged checkpoint of run `run_id` (its whole id) as DIRECTORY/last.pt, with the store's index beside
    it as index.json (unless one is there), so that a run resumed on another machine goes on keeping its stored
    checkpoints and its best. Returns the file and the checkpoint's step. Raises DataError when the run logged no
    checkpoint."""
    index = read_index(uri, run_id)
    if index is None:
        raise DataError(f"run {run_id} logged no checkpoint to {uri} (no {INDEX} among its artifacts).",
                        where="RUN_ID")
    download(uri, run_id, index["last"], directory / LAST)
    if not (directory / LOCAL_INDEX).is_file():
        write_text_atomic(directory / LOCAL_INDEX, json.dumps(index, indent=1) + "\n", option="RUN_ID")
    return directory / LAST, int(index.get("steps", {}).get(index["last"], -1))


def latest_finished_run(uri: str, experiment: str) -> str:
    """The id of the newest FINISHED run of `experiment` in the store at `uri` that logged a checkpoint."""
    runs = [r for r in find_runs(uri, experiment=experiment, limit=50) if r.status == "FINISHED"]
    for run in reversed(runs):
        if read_index(uri, run.run_id) is not None:
            return run.run_id
    raise DataError(f"experiment '{experiment}' in {uri} has no finished run with a logged checkpoint; run "
                    f"`runner launch` on it first, or name a run id or a file.")


def run_checkpoint(record, store: str) -> Path:
    """The checkpoint of a tracked run: its best (else last) one from the run's artifact store, or, for a run that
    logged none there, the one its runner.checkpoint tag names, else its run folder under the logged
    trainer.checkpoint_dir on this machine."""
    try:
        return fetch_run_weights(record.run_id, tracking_uri=store, which="best")
    except DataError:  # logged no checkpoint to the store (trainer.checkpoint_log: false, or an older run)
        pass
    tagged = record.tags.get("runner.checkpoint")
    if tagged and Path(tagged).is_file():
        return Path(tagged)
    config = logged_config(record)
    folder = checkpoint.run_dir((config.get("trainer") or {}).get("checkpoint_dir", "checkpoints"),
                                str(config.get("name") or ""), record.run_id)
    if (folder / checkpoint.LAST).is_file():
        return folder / checkpoint.LAST
    raise DataError(f"run {record.run_id} has no checkpoint in its artifact store or on this machine (tag "
                    f"runner.checkpoint: {tagged or 'not set'}; nothing in {display_path(folder)}/); evaluate it "
                    "where it ran, or pass its checkpoint file: runner evaluate FILE.", where="RUN_ID")
