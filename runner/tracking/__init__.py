"""Experiment tracking in MLflow: the only package that imports mlflow (lazily, so importing it is cheap).

- uri: which store (tracking.uri, $MLFLOW_TRACKING_URI, ./mlflow.db), checked; params flattened
- base: the Tracker protocol, the null tracker, how a run ended, a data split as a dataset input
- datasets: data splits as MLflow dataset inputs (digest: the data fingerprint)
- mlflow_tracker: batches metrics in a background thread; survives the store going away
- offline: runs kept on disk while the store was away, replayed by `runner tracking sync`
- store: reading runs back (resume, reproduce, export, compare, sweep)
- parent: the parent run that groups bench's and sweep's child runs
"""
from runner.tracking.base import DataInput, FinishResult, NullTracker, Tracker, sync_command
from runner.tracking.datasets import data_input
from runner.tracking.mlflow_tracker import MlflowTracker, create_tracker
from runner.tracking.offline import Bundle, list_bundles, load_bundle, sync_offline
from runner.tracking.parent import parent_run
from runner.tracking.store import StoredRun, open_store_run
from runner.tracking.uri import OFFLINE_DIR, flatten, resolve_tracking_uri, server_command, store_env

__all__ = ["Bundle", "DataInput", "data_input", "FinishResult", "MlflowTracker", "NullTracker", "OFFLINE_DIR", "StoredRun", "Tracker",
           "create_tracker", "flatten", "list_bundles", "load_bundle", "open_store_run", "parent_run",
           "resolve_tracking_uri", "server_command", "store_env", "sync_command", "sync_offline"]
