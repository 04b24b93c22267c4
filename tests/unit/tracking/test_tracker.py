"""The tracker against a real sqlite store in a temp dir: what arrives, batching, statuses, resume, refused
entries, and the tracking URI's checks. tests/e2e/test_tracking.py takes a real `mlflow server` down."""
from __future__ import annotations

import logging
import shutil
import time
from argparse import Namespace
from pathlib import Path

import pytest
from mlflow import MlflowClient

from runner.config.sections import TrackingConfig
from runner.errors import ConfigError
from runner.tracking import (
    MlflowTracker,
    NullTracker,
    create_tracker,
    flatten,
    load_bundle,
    open_store_run,
    resolve_tracking_uri,
    sync_offline,
)
from tests.fixtures.tracking import EXPERIMENT, steps, wait_for
from tests.helpers import free_port


@pytest.fixture(scope="module")
def store(module_tmp, template_db) -> str:
    """One sqlite store for the module, its artifacts in the temp dir too."""
    root = module_tmp
    shutil.copy(template_db, root / "mlflow.db")
    uri = f"sqlite:///{root / 'mlflow.db'}"
    MlflowClient(uri).create_experiment(EXPERIMENT, artifact_location=str(root / "artifacts"))
    return uri


def test_params_metrics_tags_artifacts_arrive(store, tmp_path):
    (tmp_path / "plot.txt").write_text("loss curve")
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / "weights.bin").write_bytes(b"\0" * 10)
    t = MlflowTracker(store, EXPERIMENT, run_name="full", tags={"team": "vision"}, flush_s=0.2)
    run_id = t.start({"optimizer": {"name": "sgd", "lr": 0.1, "betas": [0.9, 0.99]}, "seed": 0})
    for step in range(1200):
        t.log_metrics({"train/loss": 1.0 / (step + 1), "train/acc": step / 1200}, step)
    t.log_artifact(tmp_path / "plot.txt")
    (tmp_path / "plot.txt").write_text("changed after logging")  # the copy was taken at log time
    t.log_artifact(tmp_path / "ckpt", artifact_path="checkpoints")
    t.log_text("optimizer: {lr: 0.1}\n", "config/experiment.yaml")
    t.set_tags({"gpu.model": "none"})
    result = t.finish(timeout_s=30)

    assert (result.run_id, result.status, result.delivered, result.bundle) == (run_id, "FINISHED", True, None)
    assert result.message == f"run {run_id} at {store} (runner ui to browse)"
    run = open_store_run(store, run_id)
    assert run.status == "FINISHED"
    assert run.params == {"optimizer.name": "sgd", "optimizer.lr": "0.1", "optimizer.betas": "[0.9, 0.99]",
                          "seed": "0"}
    assert steps(store, run_id, "train/loss") == list(range(1200))
    assert steps(store, run_id, "train/acc") == list(range(1200))
    assert run.metrics["train/loss"][-1] == (1199, pytest.approx(1 / 1200))
    assert run.tags["team"] == "vision" and run.tags["gpu.model"] == "none" and run.tags["mlflow.runName"] == "full"
    assert run.artifacts == ("checkpoints/ckpt/weights.bin", "config/experiment.yaml", "plot.txt")
    local = Path(MlflowClient(store).download_artifacts(run_id, "plot.txt", str(tmp_path / "dl")))
    assert local.read_text() == "loss curve"


def test_metrics_wait_for_a_batch(store):
    t = MlflowTracker(store, EXPERIMENT, flush_s=60, flush_at=500)
    run_id = t.start({"lr": 0.1})
    wait_for(lambda: MlflowClient(store).get_run(run_id).data.params, what="params, sent at once")
    time.sleep(0.3)  # let that first flush end
    for step in range(100):
        t.log_metrics({"m": float(step)}, step)
    time.sleep(0.5)
    assert steps(store, run_id, "m") == []  # below flush_at and before flush_s: still queued
    for step in range(100, 500):
        t.log_metrics({"m": float(step)}, step)
    wait_for(lambda: len(steps(store, run_id, "m")) == 500, what="one batch of 500")
    t.finish()


@pytest.mark.parametrize("status", ["FINISHED", "FAILED", "KILLED"])
def test_finish_sets_status(store, status):
    t = MlflowTracker(store, EXPERIMENT)
    run_id = t.start({"x": 1})
    t.log_metrics({"loss": 1.0}, 0)
    assert t.finish(status).status == status
    assert MlflowClient(store).get_run(run_id).info.status == status
    assert t.finish(status) is t.finish("FINISHED")  # finishing twice returns the first result


def test_finish_rejects_unknown_status(store):
    with pytest.raises(ValueError, match="status must be one of FINISHED, FAILED, KILLED, not 'DONE'"):
        MlflowTracker(store, EXPERIMENT).finish("DONE")


def test_resume_continues_the_run(store):
    first = MlflowTracker(store, EXPERIMENT)
    run_id = first.start({"lr": 0.1})
    first.log_metrics({"loss": 1.0}, 0)
    first.finish("KILLED")
    second = MlflowTracker(store, EXPERIMENT, resume_run_id=run_id)
    assert second.start({"lr": 0.1}) == run_id
    second.log_metrics({"loss": 0.5}, 1)
    second.finish()
    assert steps(store, run_id, "loss") == [0, 1]
    assert MlflowClient(store).get_run(run_id).info.status == "FINISHED"


def test_refused_entries_are_dropped_with_one_warning_and_the_rest_arrive(store, caplog):
    t = MlflowTracker(store, EXPERIMENT)
    run_id = t.start({})
    with caplog.at_level(logging.WARNING, logger="runner.tracking"):
        for step in range(3):
            t.log_metrics({"ok": 1.0, "not ok!": 2.0}, step)
        result = t.finish()
    assert result.delivered and result.dropped == 3
    assert steps(store, run_id, "ok") == [0, 1, 2]
    refused = [r.getMessage() for r in caplog.records if "refused an entry" in r.getMessage()]
    assert len(refused) == 1 and "Invalid value \"not ok!\"" in refused[0]


def test_log_metrics_does_not_block_and_does_not_raise(store):
    t = MlflowTracker(store, EXPERIMENT)
    t.start({})
    begin = time.perf_counter()
    for step in range(20000):
        t.log_metrics({"loss": 0.1}, step)
    t.log_metrics({"loss": "not a number"}, 0)
    assert time.perf_counter() - begin < 1.0
    assert t.finish(timeout_s=60).delivered


BAD_URIS = [
    ("htp://x", "'htp://x' is not a tracking store URI. Use {forms}. Did you mean 'http://x'?"),
    ("http//host", "'http//host' is not a tracking store URI. Use {forms}. Did you mean 'http://host'?"),
    ("sqlite:/x.db", "'sqlite:/x.db' is not a tracking store URI. Use {forms}. Did you mean 'sqlite:///x.db'?"),
    ("http://", "'http://' is not a tracking store URI. Use {forms}."),
    ("sqlite://runs.db", "'sqlite://runs.db' is not a tracking store URI. Use {forms}. Did you mean "
                         "'sqlite:///runs.db'?"),
]


FORMS = ("http(s)://host[:port][/path] (a tracking server), sqlite:///path/to/mlflow.db (sqlite:////abs/path.db "
         "for an absolute path), file:///path/to/dir or a plain directory path (a file store), postgresql://, "
         "mysql:// or mssql:// database URLs, or databricks[://profile]")


@pytest.mark.parametrize("uri,message", BAD_URIS)
def test_bad_uri_names_the_key_the_value_and_the_valid_forms(uri, message):
    with pytest.raises(ConfigError) as e:
        resolve_tracking_uri(uri, {"file": "experiments/rn50.yaml", "line": 31, "where": "tracking.uri"})
    assert str(e.value) == "experiments/rn50.yaml:31: tracking.uri: " + message.format(forms=FORMS)


def test_bad_uri_from_the_environment_names_the_variable(monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "htp://x")
    with pytest.raises(ConfigError, match=r"^\$MLFLOW_TRACKING_URI: 'htp://x' is not a tracking store URI"):
        resolve_tracking_uri(None)


@pytest.mark.parametrize("uri", ["http://localhost:5000", "https://mlflow.example.com/prefix", "http://[::1]:5000",
                                 "sqlite:///mlflow.db", "sqlite:////abs/mlflow.db", "file:///tmp/mlruns",
                                 "databricks", "databricks://profile", "postgresql+psycopg2://u:p@db:5432/mlflow"])
def test_valid_uris_pass_unchanged(uri):
    assert resolve_tracking_uri(uri) == uri


def test_uri_defaults_plain_paths_and_environment(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    assert resolve_tracking_uri(None) == f"sqlite:///{tmp_path.resolve()}/mlflow.db"
    assert resolve_tracking_uri("mlruns") == (tmp_path / "mlruns").resolve().as_uri()
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://tracking:5000")
    assert resolve_tracking_uri(None) == "http://tracking:5000"
    assert resolve_tracking_uri("sqlite:///other.db") == "sqlite:///other.db"  # the config wins


def test_flatten_reads_omegaconf_nodes_like_dicts_and_lists():
    from omegaconf import OmegaConf
    cfg = OmegaConf.create({"data": {"mean": [0.485, 0.456], "splits": [{"name": "train"}]}, "seed": 1})
    assert flatten(cfg) == {"data.mean": "[0.485, 0.456]", "data.splits": '[{"name": "train"}]', "seed": "1"}


def test_flatten():
    long = "x" * 7000
    assert flatten({"optimizer": {"lr": 0.1, "sched": {"name": "cosine"}}, "aug": ["flip", "crop"],
                    "tags": {}, "none": None, "long": long}) == {
        "optimizer.lr": "0.1", "optimizer.sched.name": "cosine", "aug": '["flip", "crop"]', "tags": "{}",
        "none": "None", "long": "x" * 5997 + "..."}


def test_create_tracker_checks_the_uri_on_every_rank():
    assert isinstance(create_tracker(TrackingConfig(enabled=False, uri="htp://x"), rank=0), NullTracker)
    assert isinstance(create_tracker(TrackingConfig(uri="http://localhost:5000"), rank=1), NullTracker)
    with pytest.raises(ConfigError, match="tracking.uri: 'htp://x'"):
        create_tracker(TrackingConfig(uri="htp://x"), rank=1)
    null = NullTracker()
    assert null.start({"a": 1}) is None and null.finish("FAILED").delivered and null.finish().message == ""


def test_server_never_answers_run_is_created_by_sync(store, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    uri = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    t = MlflowTracker(uri, EXPERIMENT, run_name="never")
    local_id = t.start({"lr": 0.1})
    for step in range(10):
        t.log_metrics({"loss": 1.0}, step)
    t.log_text("hello", "notes.txt")
    result = t.finish(timeout_s=1)
    assert not result.delivered and result.run_id == local_id and load_bundle(result.bundle).meta["run_id"] is None

    from runner import console
    from runner.commands import tracking as command
    monkeypatch.setattr(console.out, "width", 400)
    assert command.pending(Namespace(dir="mlflow-offline")) == 0
    assert f"runner tracking sync ./mlflow-offline/{local_id} --uri {uri}" in capsys.readouterr().out

    run_id = sync_offline(result.bundle, store)
    run = open_store_run(store, run_id)
    assert (run.status, run.params, run.artifacts) == ("FINISHED", {"lr": "0.1"}, ("notes.txt",))
    assert run.tags["runner.offline_bundle"] == local_id and run.tags["mlflow.runName"] == "never"
    assert steps(store, run_id, "loss") == list(range(10))

    resumed = MlflowTracker(store, EXPERIMENT, resume_run_id=local_id)  # e.g. from a checkpoint of that run
    assert resumed.start({"lr": 0.1}) == run_id
    resumed.log_metrics({"loss": 0.5}, 10)
    assert resumed.finish().delivered and steps(store, run_id, "loss") == list(range(11))


def test_ui_points_at_an_existing_server_instead_of_starting_one(capsys):
    from runner.commands import ui
    assert ui.run(Namespace(uri="http://tracking:5000", host="127.0.0.1", port=5000)) == 0
    assert capsys.readouterr().out.strip() == "http://tracking:5000 is a tracking server already: open it in a browser."
    with pytest.raises(ConfigError, match="^command line: --uri: 'htp://x' is not a tracking store URI"):
        ui.run(Namespace(uri="htp://x", host="127.0.0.1", port=5000))
