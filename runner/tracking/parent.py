"""The parent run that groups a command's child runs (bench measurements, sweep runs) in MLflow."""
from __future__ import annotations

from typing import Any

from runner.tracking.mlflow_tracker import MlflowTracker
from runner.tracking.uri import resolve_tracking_uri


def parent_run(v, *, run_name: str, tags: dict[str, str], params: dict[str, Any]) -> MlflowTracker | None:
    """A started MLflow run in the experiment's store, under which child runs set mlflow.parentRunId;
    None when the experiment has tracking off."""
    if not v.config.tracking.enabled:
        return None
    uri = resolve_tracking_uri(v.config.tracking.uri, v.loaded.at("tracking.uri"))
    tracker = MlflowTracker(uri, v.config.tracking.experiment, run_name=run_name, tags=tags)
    tracker.start(params)
    return tracker
