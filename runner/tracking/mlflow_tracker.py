"""An MLflow tracker that never stalls or fails training.

It queues everything in memory and a background thread delivers it in batches; while the store
does not answer, training goes on and the queue waits. Whatever is still undelivered at `finish()`
goes to an offline bundle directory that `runner tracking sync` replays later.
"""
from __future__ import annotations

import atexit
import getpass
import itertools
import json
import logging
import os
import re
import shutil
import socket
import sys
import tempfile
import threading
import time
import uuid
from collections import deque
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from runner.errors import RunnerError
from runner.tracking.base import DataInput, FinishResult, NullTracker, Tracker, shown_path, sync_command
from runner.tracking.uri import (
    BATCH_METRICS,
    BATCH_PARAMS,
    MAX_TAG_VAL_LENGTH,
    OFFLINE_DIR,
    STATUSES,
    flatten,
    mlflow_client,
    store_env,
    truncate,
)

if TYPE_CHECKING:
    from runner.config.sections import TrackingConfig
from runner.tracking.datasets import mlflow_dataset_input
from runner.tracking.uri import resolve_tracking_uri

# mlflow is imported where it is used, for start-up: `runner validate` reads this module and checks the
# tracking section without it (~2 s).

log = logging.getLogger("runner.tracking")


class _Outage(Exception):
    """The store did not answer (or answered with a server-side error): keep the data, retry later."""


def _rejected(e: BaseException) -> bool:
    """The store answered and refused (bad key, deleted run): sending it again will not help."""
    from mlflow.exceptions import MlflowException
    if not isinstance(e, MlflowException):
        return False
    code = e.get_http_status_code()
    return 400 <= code < 500 and code not in (401, 403, 408, 429)


def short_reason(e: BaseException) -> str:
    text = str(e)
    m = re.search(r"\[Errno -?\d+\][^'\")]*", text)
    return m[0].strip() if m else truncate(" ".join(text.split()), 240)


def now_ms() -> int:
    return int(time.time() * 1000)


class MlflowTracker:
    """Logs to an MLflow store through MlflowClient without ever blocking or failing the training loop.

    Metrics, params, tags and artifacts are queued; a daemon thread sends them with log_batch every
    `flush_s` seconds or `flush_at` queued metrics. While the store is down the queue (at most
    `max_buffered` metrics; the oldest are kept) waits and retries back off up to 5 s. `finish()`
    writes what is still undelivered to `offline_dir/<run_id>/` for `runner tracking sync`.
    """

    def __init__(self, uri: str, experiment: str, run_name: str | None = None,
                 tags: Mapping[str, Any] | None = None, resume_run_id: str | None = None, *,
                 flush_s: float = 2.0, flush_at: int = 500, max_buffered: int = 1_000_000,
                 offline_dir: str | Path = OFFLINE_DIR):
        self.uri, self.experiment, self.run_name = uri, experiment, run_name
        self.run_id: str | None = None            # what start() returned: the store's id, or a local one
        self._remote_id: str | None = resume_run_id  # the id in the store, once the run exists there
        self._resume = resume_run_id is not None
        self._local_id: str | None = None
        self._opened = False
        self._flush_s, self._flush_at, self._max_buffered = flush_s, flush_at, max_buffered
        self._offline_dir = Path(offline_dir).resolve()
        self._tags: dict[str, str] = {k: truncate(str(v), MAX_TAG_VAL_LENGTH) for k, v in (tags or {}).items()}
        self._params: dict[str, str] = {}
        self._metrics: deque[tuple[str, float, int, int]] = deque()
        self._artifacts: deque[tuple[Path, str | None]] = deque()
        self._inputs: deque[DataInput] = deque()
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._closing = self._abandon = self._terminated = self._down = False
        self._status, self._start_ms, self._end_ms = "RUNNING", 0, 0
        self._dropped, self._warned = 0, set()
        self._tmp: Path | None = None  # copies of queued artifacts, made on first use
        self._seq = itertools.count()
        self._thread: threading.Thread | None = None
        self._result: FinishResult | None = None
        store_env(uri)
        # The sender retries on its own schedule; MLflow's defaults (7 retries with exponential
        # backoff, 120 s timeout) would hold one request for minutes while the server is down.
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "20")
        self.mlflow_client = mlflow_client(uri)

    # -- called by the training process ----------------------------------------------------------

    def start(self, params: Mapping[str, Any]) -> str:
        """Create (or resume) the run and queue its params; returns its id, a local one when offline."""
        self._start_ms = now_ms()
        self._params.update(flatten(params))
        self._tags.update({"mlflow.user": getpass.getuser(), "mlflow.source.type": "LOCAL",
                           "mlflow.source.name": " ".join(sys.argv)[:MAX_TAG_VAL_LENGTH],
                           "runner.host": socket.gethostname()})
        try:
            self._open_run()
            self.run_id = self._remote_id
        except _Outage as e:
            self.run_id = self._remote_id or f"local-{uuid.uuid4().hex}"
            self._went_down(e)
        self._thread = threading.Thread(target=self._send_loop, name="mlflow-sender", daemon=True)
        self._thread.start()
        atexit.register(self._at_exit)
        self._wake.set()
        return self.run_id

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        """Queue metrics for `step`; returns at once and never raises. Pass Python floats: float() of a
        CUDA tensor would synchronise the device."""
        try:
            ts = now_ms()
            items = [(str(k), float(v), ts, int(step)) for k, v in metrics.items()]
        except (TypeError, ValueError) as e:
            self._warn_once("value", "metrics at step %s not logged: %s", step, e)
            return
        with self._lock:
            if self._closing:
                return
            room = self._max_buffered - len(self._metrics)
            if room < len(items):
                self._dropped += len(items) - max(room, 0)
                items = items[:max(room, 0)]
                self._warn_once("full", "%d metrics are waiting for MLflow at %s; newer ones are dropped "
                                "until it answers.", len(self._metrics), self.uri)
            self._metrics.extend(items)
            if len(self._metrics) >= self._flush_at and not self._down:
                self._wake.set()

    def log_artifact(self, path: str | Path, artifact_path: str | None = None) -> None:
        """Queue a copy of a file or directory (taken now; the original may change or go)."""
        src = Path(path)
        try:
            dest = self._spool(src.name)
            (shutil.copytree if src.is_dir() else shutil.copy2)(src, dest)
        except OSError as e:
            log.warning("artifact %s not logged: %s", path, e)
            return
        with self._lock:
            self._artifacts.append((dest, artifact_path))

    def log_text(self, text: str, file_name: str) -> None:
        """Queue `text` as the artifact `file_name` (e.g. "config/experiment.yaml")."""
        name = PurePosixPath(file_name)
        try:
            dest = self._spool(name.name)
            dest.write_text(text)
        except OSError as e:
            log.warning("text artifact %s not logged: %s", file_name, e)
            return
        with self._lock:
            self._artifacts.append((dest, str(name.parent) if str(name.parent) != "." else None))

    def delete_artifact(self, artifact_path: str) -> None:
        """Queue the removal of a logged artifact file (a checkpoint no longer kept). One still waiting to be sent
        is taken off the queue instead, so an outage never sends what is already superseded."""
        with self._lock:
            for i, (path, folder) in enumerate(self._artifacts):
                if i and path is not None and _artifact_name(path, folder) == artifact_path:
                    del self._artifacts[i]
                    shutil.rmtree(path.parent, ignore_errors=True)
                    return
            self._artifacts.append((None, artifact_path))

    def log_input(self, data: DataInput) -> None:
        """Queue a data split as one of the run's dataset inputs."""
        with self._lock:
            self._inputs.append(data)

    def _spool(self, name: str) -> Path:
        """A fresh path for a queued artifact's copy (its own directory, so names never clash)."""
        if self._tmp is None:
            self._tmp = Path(tempfile.mkdtemp(prefix="runner-mlflow-"))
        folder = self._tmp / str(next(self._seq))
        folder.mkdir()
        return folder / name

    def set_tags(self, tags: Mapping[str, Any]) -> None:
        with self._lock:
            self._tags.update({str(k): truncate(str(v), MAX_TAG_VAL_LENGTH) for k, v in tags.items()})

    def finish(self, status: str = "FINISHED", timeout_s: float = 30.0) -> FinishResult:
        """Deliver everything and end the run; if the store still does not answer after `timeout_s`,
        write an offline bundle instead. Never loses the run."""
        if status not in STATUSES:
            raise ValueError(f"status must be one of {', '.join(STATUSES)}, not {status!r}")
        if self._result is not None:
            return self._result
        if self._thread is None:
            self._result = FinishResult(run_id=None, status=status, delivered=True)
            return self._result
        with self._lock:
            self._status, self._end_ms, self._closing = status, now_ms(), True
        self._wake.set()
        self._thread.join(timeout_s)
        if self._terminated:
            self._result = FinishResult(run_id=self._remote_id, status=status, delivered=True,
                                        dropped=self._dropped, uri=self.uri)
        else:
            with self._lock:
                self._abandon = True
            self._wake.set()
            bundle = self._write_bundle()
            command = sync_command(bundle, self.uri)
            log.warning("MLflow at %s did not answer; run %s is saved in %s. Deliver it later with: %s",
                        self.uri, self.run_id, shown_path(bundle), command)
            self._result = FinishResult(run_id=self.run_id, status=status, delivered=False, bundle=bundle,
                                        sync_command=command, dropped=self._dropped, uri=self.uri)
        if self._dropped:
            log.warning("%d tracking entries were dropped (rejected by MLflow or over the buffer).", self._dropped)
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
        return self._result

    def _at_exit(self) -> None:
        if self._result is None:  # the process is ending without finish(): an uncaught exception
            log.warning("run %s was not finished; marking it FAILED.", self.run_id)
            self.finish("FAILED", timeout_s=10)

    # -- the sender thread -----------------------------------------------------------------------

    def _call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        # The store answering ends an outage at once, not when the backlog is flushed: an outage that
        # begins mid-flush is then a new one, and is reported.
        try:
            result = fn(*args, **kwargs)
        except RunnerError:
            raise
        except Exception as e:  # what MLflow raises when the store is down varies by store
            if _rejected(e):
                self._came_back()
                raise
            raise _Outage(short_reason(e)) from e
        self._came_back()
        return result

    def _open_run(self) -> None:
        """Create the run, or mark a resumed one RUNNING. Raises _Outage, or RunnerError if refused."""
        from mlflow.exceptions import MlflowException
        c = self.mlflow_client
        try:
            if self._resume and self._remote_id.startswith("local-"):  # a run that began offline
                self._local_id = self._remote_id
                self._remote_id = self._call(_find_local_run, c, self.experiment, self._local_id)
                self._resume = self._remote_id is not None
            if self._resume:
                self._call(c.update_run, self._remote_id, status="RUNNING")
            else:
                exp_id = self._call(ensure_experiment, c, self.experiment, self.uri)
                local_id = self._local_id or self.run_id
                tags = {"runner.local_run_id": local_id} if local_id else None
                run = self._call(c.create_run, exp_id, start_time=self._start_ms, tags=tags, run_name=self.run_name)
                self._remote_id = run.info.run_id
        except MlflowException as e:
            raise RunnerError(f"MLflow at {self.uri} refused to start the run: {short_reason(e)}",
                              where="tracking") from e
        self._opened = True

    def _send_loop(self) -> None:
        backoff, last = 0.5, 0.0
        while True:
            wait = backoff if self._down else max(0.0, last + self._flush_s - time.monotonic())
            self._wake.wait(wait)
            self._wake.clear()
            if self._abandon:
                return
            try:
                if not self._opened:
                    self._open_run()
                self._flush()
            except Exception as e:  # down, refusing to create the run, or a bug here: keep the data and retry
                self._went_down(e)
                backoff = min(backoff * 2, 5.0)
                continue
            backoff, last = 0.5, time.monotonic()
            if self._terminated:
                return

    def _flush(self) -> None:
        while (batch := self._take()) and not self._abandon:
            params, tags, metrics = batch
            self._deliver([self._ent.Param(k, v) for k, v in params] + [self._ent.RunTag(k, v) for k, v in tags]
                          + [self._ent.Metric(*m) for m in metrics])
            self._commit(params, tags, len(metrics))
        self._flush_inputs()
        while self._artifacts and not self._abandon:
            path, artifact_path = self._artifacts[0]
            try:
                if path is None:
                    self._call(delete_run_artifact, self.mlflow_client, self.uri, self._remote_id, artifact_path)
                    with self._lock:
                        self._artifacts.popleft()
                    continue
                self._call(self.mlflow_client.log_artifact, self._remote_id, str(path), artifact_path)
            except _Outage:
                raise
            except Exception as e:
                self._drop(1, e)
            with self._lock:
                self._artifacts.popleft()
            shutil.rmtree(path.parent, ignore_errors=True)
        with self._lock:
            done = self._closing and not (self._metrics or self._params or self._tags or self._artifacts
                                          or self._inputs)
        if done and not self._abandon:
            self._call(self.mlflow_client.set_terminated, self._remote_id, self._status, self._end_ms)
            self._terminated = True

    def _flush_inputs(self) -> None:
        with self._lock:
            inputs = list(self._inputs)
        if not inputs or self._abandon:
            return
        try:
            self._call(self.mlflow_client.log_inputs, self._remote_id,
                       datasets=[mlflow_dataset_input(x) for x in inputs])
        except _Outage:
            raise
        except Exception as e:
            self._drop(len(inputs), e)
        with self._lock:
            for _ in inputs:
                self._inputs.popleft()

    @property
    def _ent(self) -> Any:
        import mlflow.entities
        return mlflow.entities

    def _take(self) -> tuple[list, list, list] | None:
        with self._lock:
            params = list(itertools.islice(self._params.items(), BATCH_PARAMS))
            tags = list(itertools.islice(self._tags.items(), BATCH_PARAMS))
            metrics = list(itertools.islice(self._metrics, BATCH_METRICS - len(params) - len(tags)))
        return (params, tags, metrics) if params or tags or metrics else None

    def _commit(self, params: list, tags: list, n_metrics: int) -> None:
        with self._lock:
            for _ in range(n_metrics):
                self._metrics.popleft()
            for queue, sent in ((self._params, params), (self._tags, tags)):
                for k, v in sent:
                    if queue.get(k) == v:  # unless set again while in flight
                        del queue[k]

    def _deliver(self, entities: list) -> None:
        """log_batch; when refused, halve the batch to find and drop only the refused entries."""
        e = self._ent
        try:
            self._call(self.mlflow_client.log_batch, self._remote_id, synchronous=True,
                       metrics=[x for x in entities if isinstance(x, e.Metric)],
                       params=[x for x in entities if isinstance(x, e.Param)],
                       tags=[x for x in entities if isinstance(x, e.RunTag)])
        except _Outage:
            raise
        except Exception as err:
            if len(entities) == 1:
                return self._drop(1, err)
            mid = len(entities) // 2
            self._deliver(entities[:mid])
            self._deliver(entities[mid:])

    def _drop(self, n: int, e: BaseException) -> None:
        self._dropped += n
        self._warn_once("rejected", "MLflow at %s refused an entry, dropped: %s", self.uri, short_reason(e))

    def _warn_once(self, kind: str, msg: str, *args: Any) -> None:
        if kind not in self._warned:
            self._warned.add(kind)
            log.warning(msg, *args)

    def _went_down(self, e: BaseException) -> None:
        if not self._down:
            self._down = True
            log.warning("MLflow at %s does not answer (%s); training goes on and tracking data waits in "
                        "memory until it does.", self.uri, e)

    def _came_back(self) -> None:
        if self._down:
            self._down = False
            log.warning("MLflow at %s answers again; sending the tracking data it missed.", self.uri)

    # -- offline bundle --------------------------------------------------------------------------

    def _write_bundle(self) -> Path:
        """Everything undelivered, as files: run.json, metrics.jsonl, artifacts/."""
        with self._lock:
            params, tags = dict(self._params), dict(self._tags)
            metrics, artifacts = list(self._metrics), list(self._artifacts)
            inputs = [x.to_json() for x in self._inputs]
        bundle = _free_path(self._offline_dir / str(self.run_id))
        (bundle / "artifacts").mkdir(parents=True)
        meta = {"format": 1, "run_id": self._remote_id if self._opened or self._resume else None,
                "local_run_id": self.run_id, "uri": self.uri, "experiment": self.experiment,
                "run_name": self.run_name, "start_time": self._start_ms, "end_time": self._end_ms,
                "status": self._status, "params": params, "tags": tags, "metrics": len(metrics),
                "inputs": inputs}
        meta["deleted_artifacts"] = [folder for path, folder in artifacts if path is None]
        (bundle / "run.json").write_text(json.dumps(meta, indent=1))
        with open(bundle / "metrics.jsonl", "w") as f:
            f.writelines(json.dumps(m) + "\n" for m in metrics)
        for path, artifact_path in artifacts:
            if path is None:
                continue
            dest = bundle / "artifacts" / (artifact_path or "") / path.name
            dest.parent.mkdir(parents=True, exist_ok=True)
            try:
                (shutil.copytree if path.is_dir() else shutil.copy2)(path, dest, **(
                    {"dirs_exist_ok": True} if path.is_dir() else {}))
            except FileNotFoundError:
                pass  # delivered by the sender while we were copying
        return bundle


def ensure_experiment(client: Any, name: str, uri: str) -> str:
    """The id of experiment `name`, created if missing."""
    from mlflow.exceptions import MlflowException
    exp = client.get_experiment_by_name(name)
    if exp is None:
        try:
            return client.create_experiment(name)
        except MlflowException:
            exp = client.get_experiment_by_name(name)  # another process created it meanwhile
            if exp is None:
                raise
    if exp.lifecycle_stage == "deleted":
        raise RunnerError(f"experiment '{name}' is deleted in {uri}; restore it (mlflow experiments restore) "
                          "or set tracking.experiment to another name.", where="tracking.experiment")
    return exp.experiment_id


def _find_local_run(client: Any, experiment: str, local_id: str) -> str | None:
    """The store's run for a run that began offline (created later by the tracker, or by a sync)."""
    exp = client.get_experiment_by_name(experiment)
    for tag in ("runner.local_run_id", "runner.offline_bundle") if exp else ():
        runs = client.search_runs([exp.experiment_id], f"tags.`{tag}` = '{local_id}'", max_results=1)
        if runs:
            return runs[0].info.run_id
    return None


def _artifact_name(path: Path, folder: str | None) -> str:
    return f"{folder}/{path.name}" if folder else path.name


def delete_run_artifact(client: Any, uri: str, run_id: str, artifact_path: str) -> None:
    """Remove one artifact file of a run (stores that cannot delete keep it: logged once, not an outage)."""
    from mlflow.store.artifact.artifact_repository_registry import get_artifact_repository

    folder = artifact_path.rpartition("/")[0] or None
    if artifact_path not in {a.path for a in client.list_artifacts(run_id, folder)}:
        return  # never delivered, or removed already
    repo = get_artifact_repository(client.get_run(run_id).info.artifact_uri, tracking_uri=uri)
    try:
        repo.delete_artifacts(artifact_path)
    except NotImplementedError:
        log.info("the artifact store of %s cannot delete files; %s stays.", uri, artifact_path)


def _free_path(path: Path) -> Path:
    for i in itertools.count():
        candidate = path if i == 0 else path.with_name(f"{path.name}.{i}")
        if not candidate.exists():
            return candidate
    raise AssertionError("unreachable")


def create_tracker(cfg: TrackingConfig, *, rank: int, resume_run_id: str | None = None,
                   at: dict | None = None) -> Tracker:
    """The tracker for this process: MLflow on rank 0 when enabled, a NullTracker otherwise.

    The URI is checked on every rank, so a bad one fails everywhere before any work starts.
    """
    if not cfg.enabled:
        return NullTracker()
    uri = resolve_tracking_uri(cfg.uri, at=at)
    if rank != 0:
        return NullTracker()

    return MlflowTracker(uri, cfg.experiment, run_name=cfg.run_name, tags=cfg.tags, resume_run_id=resume_run_id)
