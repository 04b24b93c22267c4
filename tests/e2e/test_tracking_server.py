"""runner tracking server: MLflow's server on a PostgreSQL cluster of its own. Eight runs writing at once lose no
metric point, artifact or checkpoint; a sweep's concurrent children lose nothing while the server is down and
comes back."""
from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest
from mlflow import MlflowClient

from tests.helpers import REPO, free_port, wait_for_text, write_image_folder

STEPS = 18  # 3 epochs of 6 batches


@pytest.fixture(scope="module")
def postgres():
    from runner.errors import RunnerError
    from runner.tracking.server import find_bindir

    try:
        find_bindir()
    except RunnerError as e:
        pytest.skip(str(e))
    if os.geteuid() == 0:
        import pwd

        try:
            pwd.getpwnam("postgres")
        except KeyError:
            pytest.skip("PostgreSQL refuses to run as root, and this machine has no 'postgres' account")


@pytest.fixture
def server_dir(postgres):
    """A folder PostgreSQL's account can reach (pytest's own temp folders are closed to other users)."""
    folder = Path(tempfile.mkdtemp(prefix="runner-tracking-", dir="/tmp"))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def load_bench():
    spec = importlib.util.spec_from_file_location("tracking_load", REPO / "bench" / "tracking_load.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_eight_runs_writing_at_once_lose_nothing(postgres):
    bench = load_bench()
    args = argparse.Namespace(runs=8, steps=100, keys=4, checkpoint_mb=1)
    row = bench.measure("server", args, free_port())
    assert row["processes_failed"] == 0, row["first_error"]
    assert (row["runs_in_store"], row["finished"]) == (8, 8)
    assert row["metric_points"] == row["metric_points_logged"] == 8 * 100 * 4
    assert row["artifacts"] == row["artifacts_logged"] == 8 * 3
    assert row["checkpoints"] == 8 and row["bundles"] == 0 and row["dropped"] == 0


class TrackingServer:
    """`runner tracking server` in a subprocess: stop() is an outage (the server and its database go), start()
    the recovery (the same folder and port)."""

    def __init__(self, folder: Path):
        self.folder, self.port = folder, free_port()
        self.uri = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        self.proc = subprocess.Popen([sys.executable, "-m", "runner", "tracking", "server", "--dir", str(self.folder),
                                      "--port", str(self.port), "--workers", "2"], env=env, text=True,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        line = self.proc.stdout.readline()
        assert line.startswith(f"tracking server: http://127.0.0.1:{self.port} (MLflow on PostgreSQL "), \
            line + self.proc.stdout.read()
        with urllib.request.urlopen(f"{self.uri}/health", timeout=5) as r:
            assert r.status == 200

    def stop(self) -> str:
        self.proc.send_signal(signal.SIGTERM)
        out, _ = self.proc.communicate(timeout=120)
        assert self.proc.returncode == 128 + signal.SIGTERM, out
        return out


def test_the_server_restarts_and_the_database_keeps_its_runs(server_dir):
    server = TrackingServer(server_dir)
    server.start()
    client = MlflowClient(server.uri)
    run = client.create_run(client.create_experiment("kept"))
    client.log_metric(run.info.run_id, "m", 1.5, step=7)
    assert server.stop().endswith("stopping the tracking server and its database (SIGTERM)\n")
    assert subprocess.run([shutil.which("pgrep") or "pgrep", "-f", f"postgres -D {server_dir}"]).returncode == 1
    server.start()
    try:
        assert [(m.step, m.value) for m in client.get_metric_history(run.info.run_id, "m")] == [(7, 1.5)]
    finally:
        server.stop()


def test_an_outage_mid_sweep_loses_nothing_from_concurrent_children(server_dir, tmp_path, monkeypatch):
    shutil.copytree(REPO / "pipelines", tmp_path / "pipelines")
    write_image_folder(tmp_path / "data" / "train", classes=3, per_class=8, seed=1)
    write_image_folder(tmp_path / "data" / "val", classes=3, per_class=3, seed=2)
    (tmp_path / "study.yaml").write_text(
        "name: study\nseed: 1\nmodel: {name: resnet18, num_classes: 3}\noptimizer: {lr: 0.02}\n"
        "trainer: {epochs: 3, log_every_n_steps: 1, checkpoint_every_n_epochs: 0}\n"
        "data: {root: data, batch_size: 4}\n"
        "pipelines:\n  train: {use: imagenet_train, params: {size: 32, decode_device: cpu}}\n"
        "  eval: {use: imagenet_eval, params: {size: 32, resize_shorter: 36, decode_device: cpu}}\n"
        "tracking: {experiment: study}\n")
    server = TrackingServer(server_dir)
    server.start()
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": str(REPO)}
    sweep = subprocess.Popen([sys.executable, "-m", "runner", "sweep", "study.yaml", "seed=0,1", "--parallel", "2",
                              f"tracking.uri={server.uri}", "launcher.dir=sweeps"], cwd=tmp_path, env=env, text=True,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        (folder,) = wait_for_folder(tmp_path / "sweeps")
        for child in ("001", "002"):
            wait_for_text(folder / child / "log.txt", "(global 3)")
        server.stop()  # both children are mid-epoch 1
        for child in ("001", "002"):
            wait_for_text(folder / child / "log.txt", "(global 9)")  # they train on while it is away
            wait_for_text(folder / child / "log.txt", "does not answer")
        server.start()
        out, _ = sweep.communicate(timeout=600)
        assert sweep.returncode == 0, out
        assert "2 runs of study in 1 group" in out and "  2 children: 2 done\n" in out, out
        client = MlflowClient(server.uri)
        (parent,) = client.search_runs([client.get_experiment_by_name("study").experiment_id],
                                       "tags.`runner.sweep` = 'parent'")
        children = client.search_runs([parent.info.experiment_id],
                                      f"tags.`mlflow.parentRunId` = '{parent.info.run_id}'")
        assert sorted(c.info.run_name for c in children) == ["seed=0", "seed=1"]
        for child in children:
            assert child.info.status == "FINISHED"
            steps = [m.step for m in client.get_metric_history(child.info.run_id, "train/loss")]
            assert sorted(steps) == list(range(1, STEPS + 1)), child.info.run_name  # every step, once
            assert "eval/top1" in child.data.metrics
            assert {a.path for a in client.list_artifacts(child.info.run_id)} >= {"experiment.yaml", "checkpoints"}
        assert not (tmp_path / "mlflow-offline").exists() or not any((tmp_path / "mlflow-offline").iterdir())
    finally:
        if sweep.poll() is None:
            sweep.kill()
        if server.proc.poll() is None:
            server.stop()


def wait_for_folder(root: Path, timeout: float = 120) -> list[Path]:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        found = [p for p in root.glob("*") if (p / "sweep.json").exists()] if root.exists() else []
        if found:
            return found
        time.sleep(0.3)
    raise AssertionError(f"no sweep folder appeared in {root}")
