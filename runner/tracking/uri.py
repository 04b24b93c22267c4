"""Where runs are tracked: the store URI (checked, with the valid forms in the error), params flattened."""
from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from runner.config.sections import TrackingConfig
from runner.errors import ConfigError, closest

# mlflow is imported where a client is made, for start-up: a URI is checked without it (~2 s).

STATUSES = ("FINISHED", "FAILED", "KILLED")
OFFLINE_DIR = Path("mlflow-offline")
SYNCED_MARKER = "synced.json"
MAX_PARAM_VAL_LENGTH = 6000   # mlflow.utils.validation.MAX_PARAM_VAL_LENGTH
MAX_TAG_VAL_LENGTH = 8000     # mlflow.utils.validation.MAX_TAG_VAL_LENGTH
BATCH_METRICS, BATCH_PARAMS = 1000, 100  # log_batch's limits per request (entities, params/tags)


_VALID_FORMS = ("http(s)://host[:port][/path] (a tracking server), sqlite:///path/to/mlflow.db (sqlite:////abs/"
                "path.db for an absolute path), file:///path/to/dir or a plain directory path (a file store), "
                "postgresql://, mysql:// or mssql:// database URLs, or databricks[://profile]")
_URI_FORMS = [re.compile(p) for p in (
    r"https?://(\[[0-9a-fA-F:.]+\]|[^/\s:@\[\]]+)(:\d{1,5})?(/\S*)?", r"sqlite:///\S+", r"file:///\S*",
    r"(postgresql|mysql|mssql)(\+\w+)?://\S+", r"databricks(-uc)?(://\S*)?")]
_SCHEMES = ("http", "https", "sqlite", "file", "databricks", "postgresql", "mysql", "mssql")


def _suggest(value: str) -> str | None:
    """A likely intended URI for a malformed one."""
    if "://" in value:
        scheme, rest = value.split("://", 1)
        match = closest(scheme.lower(), _SCHEMES)
        if match in ("sqlite", "file") and rest and not rest.startswith("/"):
            return f"{match}:///{rest}"
        return f"{match}://{rest}" if match and match != scheme and rest else None
    m = re.match(r"(https?|sqlite|file)(:/?|//)(?!/)(.+)", value)
    if m:
        return f"{m[1]}:///{m[3]}" if m[1] in ("sqlite", "file") else f"{m[1]}://{m[3]}"
    return None


def resolve_tracking_uri(uri: str | None, at: dict | None = None) -> str:
    """tracking.uri, else $MLFLOW_TRACKING_URI, else ./mlflow.db (MLflow 3's default store), checked.

    `at` (file=..., line=...) locates tracking.uri for the error message. A plain directory
    becomes a file:// URI.
    """
    label: dict[str, Any] = {"where": "tracking.uri", **(at or {})}
    if not uri:
        uri = os.environ.get("MLFLOW_TRACKING_URI") or None
        label = {"where": "$MLFLOW_TRACKING_URI"}
    if not uri:
        return f"sqlite:///{Path.cwd().resolve() / 'mlflow.db'}"
    uri = uri.strip()
    if any(p.fullmatch(uri) for p in _URI_FORMS):
        return uri
    looks_like_url = ":" in uri or re.match(r"({})/".format("|".join(_SCHEMES)), uri, re.IGNORECASE)
    if uri and not looks_like_url:
        return Path(uri).expanduser().resolve().as_uri()
    hint = _suggest(uri)
    raise ConfigError(f"'{uri}' is not a tracking store URI. Use {_VALID_FORMS}."
                      + (f" Did you mean '{hint}'?" if hint else ""), **label)


def _is_file_store(uri: str) -> bool:
    return uri.startswith("file:")


def store_env(uri: str) -> None:
    """Environment MLflow needs for this store. MLflow 3.17 refuses file stores unless opted in."""
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")  # fetched checkpoints: runner says so
    if _is_file_store(uri):
        os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")


def server_command(uri: str, host: str, port: int, workers: int = 1) -> list[str]:
    """argv serving the MLflow UI (and REST API) on a local store. One worker serves one person's browser
    (its requests run in a thread pool) and starts in a quarter of the time of MLflow's default four."""
    return [sys.executable, "-m", "mlflow", "ui", "--backend-store-uri", uri, "--host", host, "--port", str(port),
            "--workers", str(workers)]


def mlflow_client(uri: str) -> Any:
    """The one place an MlflowClient is made: the store's environment set, MLflow's URL printing off."""
    store_env(uri)
    # runner's own summary says where the run is; MLflow would also print "View run" links on stdout
    os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")  # reading an artifact back draws a bar
    from mlflow import MlflowClient
    return MlflowClient(tracking_uri=uri)


def truncate(value: str, limit: int) -> str:
    return value if len(value) <= limit else value[: limit - 3] + "..."


def _plain(value: Any) -> Any:
    """Mappings and sequences (OmegaConf's too) as dicts and lists, for JSON."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, Sequence) and not isinstance(value, (str, bytes)):
        return [_plain(v) for v in value]
    return value


def flatten(d: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """{"optimizer": {"lr": 0.1}} -> {"optimizer.lr": "0.1"}; lists as JSON; values cut to MLflow's limit."""
    out: dict[str, str] = {}
    for key, value in d.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            out.update(flatten(value, name + "."))
        elif isinstance(value, (Sequence, Mapping)) and not isinstance(value, (str, bytes)):
            out[name] = truncate(json.dumps(_plain(value), default=str), MAX_PARAM_VAL_LENGTH)
        else:
            out[name] = truncate(str(value), MAX_PARAM_VAL_LENGTH)
    return out


def logged_to(tracking: TrackingConfig, at: dict | None = None) -> str | None:
    """The store an experiment's runs log to (tracking.uri resolved); None with tracking off. `at`: tracking.uri's
    place, for errors."""
    return resolve_tracking_uri(tracking.uri, at) if tracking.enabled else None
