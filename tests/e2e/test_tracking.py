"""Tracking against real stores: a sqlite store in a temp dir, and a real `mlflow server` that dies."""
from __future__ import annotations

import logging
import time

import pytest
from mlflow import MlflowClient

from runner.errors import RunnerError
from runner.tracking import (
    MlflowTracker,
    list_bundles,
    load_bundle,
    open_store_run,
    sync_offline,
)
from tests.fixtures.tracking import EXPERIMENT, steps, wait_for


def test_server_down_at_start_then_dies_mid_run_and_returns(server, tmp_path, caplog):
    t = MlflowTracker(server.uri, EXPERIMENT, run_name="outage", flush_s=0.2, offline_dir=tmp_path / "offline")
    with caplog.at_level(logging.WARNING, logger="runner.tracking"):
        begin = time.perf_counter()
        local_id = t.start({"lr": 0.1})
        assert local_id.startswith("local-") and time.perf_counter() - begin < 3
        for step in range(100):
            t.log_metrics({"loss": 1.0 / (step + 1)}, step)

        server.start()  # the tracker creates the run and delivers the backlog
        client = MlflowClient(server.uri)

        def created():
            exp = client.get_experiment_by_name(EXPERIMENT)
            return exp and client.search_runs([exp.experiment_id], f"tags.`runner.local_run_id` = '{local_id}'")
        run_id = wait_for(created, what="the run to be created")[0].info.run_id
        wait_for(lambda: len(steps(server.uri, run_id, "loss")) == 100, what="the first 100 steps")

        server.kill()
        slowest = 0.0
        for step in range(100, 300):
            begin = time.perf_counter()
            t.log_metrics({"loss": 1.0 / (step + 1)}, step)
            slowest = max(slowest, time.perf_counter() - begin)
        assert slowest < 0.05
        (tmp_path / "notes.txt").write_text("written during the outage")
        t.log_artifact(tmp_path / "notes.txt")
        t.set_tags({"stage": "outage"})
        time.sleep(1.0)  # the sender meets the dead server and retries quietly

        server.start()
        result = t.finish(timeout_s=30)
    assert (result.delivered, result.run_id, result.bundle) == (True, run_id, None)
    assert steps(server.uri, run_id, "loss") == list(range(300))
    run = open_store_run(server.uri, run_id)
    assert (run.status, run.params, run.tags["stage"], run.artifacts) == ("FINISHED", {"lr": "0.1"}, "outage",
                                                                          ("notes.txt",))
    warnings = [r.getMessage() for r in caplog.records]
    assert sum("does not answer" in w for w in warnings) == 2  # down at start; down mid-run
    assert sum("answers again" in w for w in warnings) == 2
    assert not (tmp_path / "offline").exists()


def test_server_never_returns_offline_bundle_then_sync(server, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    server.start()
    t = MlflowTracker(server.uri, EXPERIMENT, flush_s=0.2)
    run_id = t.start({"lr": 0.1, "model": {"name": "resnet18"}})
    for step in range(50):
        t.log_metrics({"loss": 1.0}, step)
    wait_for(lambda: len(steps(server.uri, run_id, "loss")) == 50, what="the first 50 steps")
    server.kill()
    for step in range(50, 150):
        t.log_metrics({"loss": 0.5, "acc": 0.9}, step)
    t.log_text("lr: 0.1\n", "config/experiment.yaml")
    t.set_tags({"stage": "lost"})

    result = t.finish("FAILED", timeout_s=2)
    assert (result.delivered, result.run_id, result.status) == (False, run_id, "FAILED")
    assert result.bundle == tmp_path / "mlflow-offline" / run_id
    assert result.sync_command == f"runner tracking sync ./mlflow-offline/{run_id} --uri {server.uri}"
    assert result.message == (f"{server.uri} did not answer; run kept in ./mlflow-offline/{run_id}. "
                              f"Deliver it with: {result.sync_command}")
    assert [b.path.name for b in list_bundles()] == [run_id]
    assert load_bundle(result.bundle).meta["metrics"] == 200  # 100 steps x 2 keys, none delivered

    server.start()
    assert sync_offline(result.bundle, server.uri) == run_id  # the run exists there: it continues
    assert steps(server.uri, run_id, "loss") == list(range(150))
    assert steps(server.uri, run_id, "acc") == list(range(50, 150))
    run = open_store_run(server.uri, run_id)
    assert (run.status, run.tags["stage"], run.artifacts) == ("FAILED", "lost", ("config/experiment.yaml",))
    assert list_bundles() == []
    with pytest.raises(RunnerError, match=f"already synced \\(run {run_id} at {server.uri}\\)"):
        sync_offline(result.bundle, server.uri)
