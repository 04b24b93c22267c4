"""Offline bundles: runs kept on disk while the store was away, and their replay (`runner tracking sync`)."""
from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runner.errors import RunnerError
from runner.tracking.datasets import data_input_from_json, mlflow_dataset_input
from runner.tracking.mlflow_tracker import delete_run_artifact, ensure_experiment, now_ms, short_reason
from runner.tracking.uri import BATCH_METRICS, BATCH_PARAMS, OFFLINE_DIR, SYNCED_MARKER, mlflow_client

# mlflow is imported where a bundle is replayed, for start-up (~2 s).


@dataclass(frozen=True)
class Bundle:
    """An offline bundle on disk (the metadata from its run.json)."""
    path: Path
    meta: dict[str, Any]
    synced: bool


def load_bundle(path: str | Path) -> Bundle:
    path = Path(path)
    try:
        meta = json.loads((path / "run.json").read_text())
    except (OSError, ValueError) as e:
        raise RunnerError(f"{path}: not an offline tracking bundle (no readable run.json: {e}).") from e
    return Bundle(path=path, meta=meta, synced=(path / SYNCED_MARKER).exists())


def list_bundles(root: str | Path = OFFLINE_DIR) -> list[Bundle]:
    """The bundles under `root` not yet synced, oldest first."""
    root = Path(root)
    found = [load_bundle(p) for p in sorted(root.iterdir()) if (p / "run.json").is_file()] if root.is_dir() else []
    return sorted((b for b in found if not b.synced), key=lambda b: b.meta.get("start_time", 0))


def _chunks(items: list, n: int) -> Iterator[list]:
    for i in range(0, len(items), n):
        yield items[i:i + n]


def _existing_run(client: Any, run_id: str | None) -> str | None:
    from mlflow.exceptions import MlflowException
    if not run_id or run_id.startswith("local-"):
        return None
    try:
        return client.get_run(run_id).info.run_id
    except MlflowException as e:
        if e.get_http_status_code() == 404:
            return None
        raise


def _replay(client: Any, bundle: Bundle, uri: str) -> str:
    from mlflow.entities import Metric, Param, RunTag
    meta = bundle.meta
    run_id = _existing_run(client, meta.get("run_id"))
    if run_id is None:
        exp_id = ensure_experiment(client, meta["experiment"], bundle.meta["uri"])
        run_id = client.create_run(exp_id, start_time=meta["start_time"], run_name=meta["run_name"],
                                   tags={"runner.offline_bundle": bundle.path.name}).info.run_id
    for chunk in _chunks([Param(k, v) for k, v in meta["params"].items()], BATCH_PARAMS):
        client.log_batch(run_id, params=chunk, synchronous=True)
    for chunk in _chunks([RunTag(k, v) for k, v in meta["tags"].items()], BATCH_PARAMS):
        client.log_batch(run_id, tags=chunk, synchronous=True)
    inputs = [data_input_from_json(d) for d in meta.get("inputs", [])]
    if inputs:
        client.log_inputs(run_id, datasets=[mlflow_dataset_input(x) for x in inputs])
    with open(bundle.path / "metrics.jsonl") as f:
        metrics = [Metric(*json.loads(line)) for line in f if line.strip()]
    for chunk in _chunks(metrics, BATCH_METRICS):
        client.log_batch(run_id, metrics=chunk, synchronous=True)
    root = bundle.path / "artifacts"
    for file in sorted(p for p in root.rglob("*") if p.is_file()):
        parent = file.parent.relative_to(root).as_posix()
        client.log_artifact(run_id, str(file), None if parent == "." else parent)
    for gone in meta.get("deleted_artifacts", []):  # checkpoints the run stopped keeping during the outage
        delete_run_artifact(client, uri, run_id, gone)
    client.set_terminated(run_id, meta["status"], meta["end_time"] or None)
    return run_id


def sync_offline(bundle_dir: str | Path, uri: str | None = None) -> str:
    """Replay an offline bundle into a store (default: the one it was meant for); returns the run id.

    Continues the bundle's run where it exists in that store, creates it otherwise, then marks
    the bundle synced.
    """
    bundle = load_bundle(bundle_dir)
    if bundle.synced:
        done = json.loads((bundle.path / SYNCED_MARKER).read_text())
        raise RunnerError(f"{bundle.path}: already synced (run {done['run_id']} at {done['uri']}).")
    uri = uri or bundle.meta["uri"]
    try:
        run_id = _replay(mlflow_client(uri), bundle, uri)
    except RunnerError:
        raise
    except Exception as e:
        raise RunnerError(f"{bundle.path}: could not sync to {uri}: {short_reason(e)} Nothing is lost: the bundle "
                          "stays; run the command again when the store answers.") from e
    (bundle.path / SYNCED_MARKER).write_text(json.dumps({"run_id": run_id, "uri": uri, "time": now_ms()}))
    return run_id
