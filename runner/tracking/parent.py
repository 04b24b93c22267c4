"""The parent run that groups a command's child runs (bench measurements, sweep runs) in MLflow."""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from runner.config.sections import TrackingConfig
from runner.errors import RunnerError
from runner.tracking.mlflow_tracker import MlflowTracker, ensure_experiment, short_reason
from runner.tracking.uri import MAX_TAG_VAL_LENGTH, flatten, mlflow_client, resolve_tracking_uri, truncate

# mlflow is imported where a parent run is written, for start-up (~2 s).


def parent_run(tracking: TrackingConfig, at: dict, *, run_name: str, tags: dict[str, str],
               params: dict[str, Any]) -> MlflowTracker | None:
    """A started MLflow run in the experiment's store (`at`: tracking.uri's place), under which child runs set
    mlflow.parentRunId; None when the experiment has tracking off."""
    if not tracking.enabled:
        return None
    uri = resolve_tracking_uri(tracking.uri, at)
    tracker = MlflowTracker(uri, tracking.experiment, run_name=run_name, tags=tags)
    tracker.start(params)
    return tracker


def create_sweep_run(uri: str, experiment: str, *, run_name: str, tags: dict[str, str],
                     params: dict[str, Any]) -> str:
    """A sweep's parent run, created before its children are frozen (each names it): synchronously, so a store
    that does not answer stops the sweep before anything starts (RunnerError)."""
    from mlflow.entities import Param, RunTag


    client = mlflow_client(uri)
    try:
        run = client.create_run(ensure_experiment(client, experiment, uri), run_name=run_name, tags=tags)
        client.log_batch(run.info.run_id, params=[Param(k, v) for k, v in flatten(params).items()],
                         tags=[RunTag("mlflow.runName", run_name)], synchronous=True)
    except RunnerError:
        raise
    except Exception as e:  # noqa: BLE001 - what a store raises when down varies by store
        raise RunnerError(f"the tracking store at {uri} did not take the sweep's parent run: {short_reason(e)} "
                          "Start it (runner tracking server), point tracking.uri at one that answers, or sweep "
                          "without tracking (tracking.enabled=false).", where="tracking.uri") from None
    return run.info.run_id


def log_sweep_results(uri: str, run_id: str, *, files: list[Path], note: str, metrics: dict[str, float],
                      tags: dict[str, str], status: str | None = None) -> None:
    """The sweep's results as they land, on its parent run: the grouped table as the run's description (MLflow's
    run page shows it) and as files, the children's counts as metrics, and its status once every child ended.
    Raises what the store raises: callers decide whether a store that is away matters."""
    from mlflow.entities import Metric, RunTag


    client = mlflow_client(uri)
    now = int(time.time() * 1000)
    step = int(metrics.get("sweep/ended", 0))
    client.log_batch(run_id, metrics=[Metric(k, float(v), now, step) for k, v in metrics.items()],
                     tags=[RunTag("mlflow.note.content", truncate(note, MAX_TAG_VAL_LENGTH)),
                           *(RunTag(k, v) for k, v in tags.items())], synchronous=True)
    for file in files:
        client.log_artifact(run_id, str(file))
    if status is not None:
        client.set_terminated(run_id, status)
    elif client.get_run(run_id).info.status != "RUNNING":
        client.update_run(run_id, status="RUNNING")


def supersede(uri: str, run_ids: list[str], by: str) -> None:
    """Earlier attempts of a sweep child that restarts from scratch (they left no checkpoint): KILLED, and tagged
    with the run that replaces them."""
    client = mlflow_client(uri)
    for run_id in run_ids:
        client.set_tag(run_id, "runner.sweep.superseded_by", by)
        if client.get_run(run_id).info.status == "RUNNING":
            client.set_terminated(run_id, "KILLED")


def set_run_tags(uri: str, run_id: str, tags: dict[str, str], status: str | None = None) -> None:
    """Tags on a run (and its status: RUNNING again for a resumed sweep), synchronously."""
    from mlflow.entities import RunTag


    client = mlflow_client(uri)
    if tags:
        client.log_batch(run_id, tags=[RunTag(k, v) for k, v in tags.items()], synchronous=True)
    if status == "RUNNING":
        client.update_run(run_id, status="RUNNING")
    elif status is not None:
        client.set_terminated(run_id, status)
