"""Runs read back from a tracking store: what resume, reproduce, export, compare and sweep need.

mlflow is imported lazily, inside the functions that talk to the store.
"""
from __future__ import annotations

import functools
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import unquote, urlparse

import yaml

from runner.config.frozen import IDENTITY_TAGS
from runner.errors import RunnerError, did_you_mean, error_at, list_names
from runner.tracking.uri import mlflow_client, resolve_tracking_uri

# mlflow is imported where a store is read, for start-up (~2 s).

RUN_ID_LENGTH = 32
F = TypeVar("F", bound=Callable[..., Any])


def _answering(fn: F) -> F:
    """A store that does not answer (server down, database locked) is one RunnerError, not a traceback."""
    @functools.wraps(fn)
    def wrapper(uri: str, *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(uri, *args, **kwargs)
        except RunnerError:
            raise
        except Exception as e:  # noqa: BLE001 - what a store raises when down varies by store
            from mlflow.exceptions import MlflowException

            if isinstance(e, MlflowException) and e.get_http_status_code() < 500:
                raise RunnerError(f"{uri} refused the request: {str(e).splitlines()[0]}", where="--uri") from None
            first = (str(e).strip().splitlines() or [type(e).__name__])[0]
            raise RunnerError(f"cannot read the tracking store at {uri}: {first[:300]}", where="--uri") from None
    return wrapper  # type: ignore[return-value]


@dataclass(frozen=True)
class RunRecord:
    """One run as the store holds it (metric values are fetched separately, by key)."""
    run_id: str
    name: str
    experiment: str
    status: str
    start_ms: int
    end_ms: int | None
    params: dict[str, str]
    tags: dict[str, str]
    metric_keys: tuple[str, ...]
    uri: str
    latest: dict[str, float] = field(default_factory=dict)  # each metric's last logged value

    @property
    def short(self) -> str:
        return self.run_id[:8]

    @property
    def duration_s(self) -> float | None:
        return None if not self.end_ms else (self.end_ms - self.start_ms) / 1000


def store_uri(value: str | None) -> str:
    """A command's --uri: a store URI, a folder (a file store), an .db file (sqlite), or unset (the store
    runner launch logs to: $MLFLOW_TRACKING_URI, else ./mlflow.db)."""
    if value and "://" not in value and (value.endswith(".db") or Path(value).expanduser().is_file()):
        return f"sqlite:///{Path(value).expanduser().resolve()}"
    return resolve_tracking_uri(value, at=error_at("--uri", file="command line") if value else None)


def _local_store_path(uri: str) -> Path | None:
    """The file or folder behind a sqlite:// or file:// URI (None for servers and databases)."""
    if uri.startswith("sqlite:///"):
        return Path(unquote(uri[len("sqlite:///"):]))
    if uri.startswith("file:"):
        return Path(unquote(urlparse(uri).path))
    return None


@functools.lru_cache(maxsize=8)
def client(uri: str) -> Any:
    """An MlflowClient for a store that exists; reading never creates an empty store by mistake."""
    local = _local_store_path(uri)
    if local is not None and not local.exists():
        raise RunnerError(f"no tracking store at {local}: {uri} does not exist. Name the store the run was "
                          "logged to with --uri (a path or URI), or set $MLFLOW_TRACKING_URI.", where="--uri")
    return mlflow_client(uri)


def _record(c: Any, run: Any, uri: str, experiments: dict[str, str]) -> RunRecord:
    exp_id = run.info.experiment_id
    if exp_id not in experiments:
        experiments[exp_id] = c.get_experiment(exp_id).name
    return RunRecord(run_id=run.info.run_id, name=run.info.run_name or run.info.run_id[:8],
                     experiment=experiments[exp_id], status=run.info.status, start_ms=run.info.start_time or 0,
                     end_ms=run.info.end_time, params=dict(run.data.params), tags=dict(run.data.tags),
                     metric_keys=tuple(sorted(run.data.metrics)), uri=uri, latest=dict(run.data.metrics))


@_answering
def get_run(uri: str, run_id: str) -> RunRecord:
    """The run `run_id` (or the one run whose id starts with it) in the store at `uri`."""
    from mlflow.exceptions import MlflowException

    c = client(uri)
    try:
        run = c.get_run(run_id)
    except MlflowException:
        run = _by_prefix(c, uri, run_id)
    return _record(c, run, uri, {})


def _by_prefix(c: Any, uri: str, prefix: str) -> Any:
    experiments = c.search_experiments(max_results=1000)
    ids = [e.experiment_id for e in experiments]
    found = []
    if 0 < len(prefix) < RUN_ID_LENGTH and ids:
        token = None
        while True:  # page through: MLflow's filter language has no prefix match on run ids
            page = c.search_runs(ids, max_results=1000, page_token=token)
            found += [r for r in page if r.info.run_id.startswith(prefix)]
            token = page.token
            if not token:
                break
    if len(found) == 1:
        return found[0]
    if len(found) > 1:
        raise RunnerError(f"'{prefix}' is the start of {len(found)} run ids in {uri} "
                          f"({list_names([r.info.run_id for r in found], 5)}); give more of it.", where="RUN_ID")
    names = list_names([e.name for e in experiments], 8) or "none"
    raise RunnerError(f"run '{prefix}' is not in {uri} (its experiments: {names}). Name the store it was logged to "
                      "with --uri, or list runs with: runner compare --experiment NAME --uri URI.", where="RUN_ID")


@_answering
def find_runs(uri: str, *, experiment: str | None = None, parent: str | None = None,
              tags: dict[str, str] | None = None, limit: int = 50) -> list[RunRecord]:
    """Runs of an experiment (or the children of a parent run), with these tag values, oldest first:
    the newest `limit` of them."""
    c = client(uri)
    tags = dict(tags or {})
    if parent is not None:
        parent_run = get_run(uri, parent)
        experiment = parent_run.experiment
        tags["mlflow.parentRunId"] = parent_run.run_id
    exp = c.get_experiment_by_name(experiment)
    if exp is None:
        names = [e.name for e in c.search_experiments(max_results=1000)]
        raise RunnerError(f"no experiment '{experiment}' in {uri}.{did_you_mean(experiment, names)} "
                          f"Experiments there: {list_names(names, 12) or 'none'}.", where="--experiment")
    query = " and ".join(f"tags.`{k}` = '{v}'" for k, v in tags.items())
    runs = c.search_runs([exp.experiment_id], query, max_results=limit, order_by=["attributes.start_time DESC"])
    experiments = {exp.experiment_id: exp.name}
    return [_record(c, r, uri, experiments) for r in reversed(list(runs))]


@_answering
def metric_history(uri: str, run_id: str, key: str) -> list[tuple[int, float]]:
    """(step, value) of one metric, in step order."""
    return sorted((m.step, m.value) for m in client(uri).get_metric_history(run_id, key))


@_answering
def read_artifact(uri: str, run_id: str, path: str) -> str | None:
    """The text of one artifact file, or None when the run has no such file."""
    from mlflow.exceptions import MlflowException

    with tempfile.TemporaryDirectory(prefix="runner-artifact-") as tmp:
        try:
            local = client(uri).download_artifacts(run_id, path, tmp)
        except (MlflowException, OSError):
            return None
        file = Path(local)
        return file.read_text() if file.is_file() else None


@dataclass(frozen=True)
class StoredRun:
    """A run as a store holds it. metrics: key -> [(step, value)] in step order."""
    run_id: str
    status: str
    params: dict[str, str]
    tags: dict[str, str]
    metrics: dict[str, list[tuple[int, float]]]
    artifacts: tuple[str, ...]


def open_store_run(uri: str, run_id: str) -> StoredRun:
    """Read a run back from a store: params, tags, full metric histories, artifact file paths."""
    client = mlflow_client(uri)
    run = client.get_run(run_id)
    history = {k: sorted((m.step, m.value) for m in client.get_metric_history(run_id, k)) for k in run.data.metrics}

    def files(path: str | None) -> Iterator[str]:
        for info in client.list_artifacts(run_id, path):
            yield from files(info.path) if info.is_dir else [info.path]

    return StoredRun(run_id=run_id, status=run.info.status, params=dict(run.data.params),
                     tags=dict(run.data.tags), metrics=history, artifacts=tuple(sorted(files(None))))


@_answering
def run_page(uri: str, run_id: str) -> str:
    """The MLflow UI's address of a run, relative to the UI's root: `#/experiments/ID/runs/RUN_ID`."""
    run = client(uri).get_run(run_id)
    return f"#/experiments/{run.info.experiment_id}/runs/{run_id}"


@_answering
def landing_experiment(uri: str, name: str | None = None) -> str | None:
    """The id of experiment `name`, else of the experiment with the newest run; None for a local store that
    does not exist yet or holds no runs."""
    local = _local_store_path(uri)
    if local is not None and not local.exists() and name is None:
        return None
    c = client(uri)
    experiments = c.search_experiments(max_results=1000)
    if name is not None:
        found = [e for e in experiments if e.name == name]
        if not found:
            names = [e.name for e in experiments]
            raise RunnerError(f"no experiment '{name}' in {uri}.{did_you_mean(name, names)} "
                              f"Experiments there: {list_names(names, 12) or 'none'}.", where="--experiment")
        return found[0].experiment_id
    newest = c.search_runs([e.experiment_id for e in experiments], max_results=1,
                           order_by=["attributes.start_time DESC"]) if experiments else []
    return newest[0].info.experiment_id if newest else None


def logged_config(run: RunRecord) -> dict[str, Any]:
    """The run's experiment.yaml as a dict, without the tags that name the run's place (parent, origin)."""
    text = read_artifact(run.uri, run.run_id, "experiment.yaml")
    if text is None:
        raise RunnerError(f"run {run.run_id} has no experiment.yaml artifact: it was not started by runner launch, "
                          "or its artifacts never reached the store (see runner tracking pending).", where="RUN_ID")
    config = yaml.safe_load(text) or {}
    tags = (config.get("tracking") or {}).get("tags") or {}
    for key in IDENTITY_TAGS:
        tags.pop(key, None)
    return config
