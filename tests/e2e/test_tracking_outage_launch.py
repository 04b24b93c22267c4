"""A real `runner launch` against a real `mlflow server` that dies mid-run: training never waits for
tracking, and nothing logged is lost (delivered when the server returns, or kept in an offline bundle
that `runner tracking sync` delivers)."""
from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time

import pytest
from mlflow import MlflowClient

from tests.helpers import REPO, run_cli, write_image_folder

EPOCHS = 3


STEPS_PER_EPOCH = 6  # 24 training images, batch 4


EXPERIMENT = """\
name: outage
seed: 1
model: {name: resnet18, num_classes: 3}
optimizer: {lr: 0.02}
trainer: {epochs: %d, log_every_n_steps: 1, checkpoint_every_n_epochs: 0}
data: {root: data, batch_size: 4}
pipelines:
  train: {use: imagenet_train, params: {size: 32, decode_device: cpu}}
  eval: {use: imagenet_eval, params: {size: 32, resize_shorter: 36, decode_device: cpu}}
tracking: {experiment: outage}
""" % EPOCHS


@pytest.fixture
def experiment(project):
    write_image_folder(project / "data" / "train", classes=3, per_class=8, seed=1)
    write_image_folder(project / "data" / "val", classes=3, per_class=3, seed=2)
    path = project / "experiments" / "outage.yaml"
    path.write_text(EXPERIMENT)
    return path


class Launch:
    """`python -m runner launch` in a subprocess, its output read line by line as it comes."""

    def __init__(self, args: list[str], cwd):
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": str(REPO)}
        self.proc = subprocess.Popen([sys.executable, "-m", "runner", "launch", *args], cwd=cwd, env=env,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.append(line)

    @property
    def output(self) -> str:
        return "".join(self.lines)

    def wait_for_line(self, text: str, timeout: float = 60.0) -> None:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if any(text in line for line in self.lines):
                return
            if self.proc.poll() is not None:
                self._reader.join(5)
                raise AssertionError(f"runner launch ended before printing {text!r}:\n{self.output[-3000:]}")
            time.sleep(0.05)
        raise AssertionError(f"no {text!r} in {timeout} s:\n{self.output[-3000:]}")

    def wait(self, timeout: float = 90.0) -> int:
        try:
            code = self.proc.wait(timeout)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
        self._reader.join(5)
        return code


def the_run(uri: str):
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("outage")
    runs = client.search_runs([exp.experiment_id])
    assert len(runs) == 1, [r.info.run_id for r in runs]
    return client, runs[0]


def assert_everything_arrived(uri: str, run_id: str | None = None) -> None:
    client, run = the_run(uri)
    if run_id is not None:
        assert run.info.run_id == run_id
    assert run.info.status == "FINISHED"
    history = lambda key: [m.step for m in sorted(client.get_metric_history(run.info.run_id, key),  # noqa: E731
                                                  key=lambda m: m.step)]
    assert history("train/loss") == list(range(1, EPOCHS * STEPS_PER_EPOCH + 1))  # every step, none twice
    for key in ("eval/top1", "eval/top5", "eval/loss", "epoch/images_per_s"):
        assert history(key) == list(range(1, EPOCHS + 1)), key
    assert run.data.params["model.name"] == "resnet18" and run.data.params["trainer.epochs"] == str(EPOCHS)
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {"experiment.yaml", "summary.json"} <= artifacts


def test_server_dies_mid_run_and_returns(experiment, project, server):
    server.start()
    began = time.monotonic()
    run = Launch([str(experiment), f"tracking.uri={server.uri}"], cwd=project)
    run.wait_for_line("epoch 1/%d done" % EPOCHS)
    server.kill()
    killed = time.monotonic()
    run.wait_for_line("does not answer", timeout=30)  # the tracker noticed, and training goes on
    time.sleep(max(0.0, 3.0 - (time.monotonic() - killed)))
    server.start()  # same port, same database
    code = run.wait()
    out = run.output
    assert code == 0, out[-3000:]
    assert "MLflow at %s answers again; sending the tracking data it missed." % server.uri in out
    assert "epoch %d/%d done" % (EPOCHS, EPOCHS) in out
    run_id = re.search(r"│ run id\s+│ (\S+)", out)[1]
    assert f"run {run_id} at {server.uri} (runner ui to browse)" in out
    assert "View run" not in out  # MLflow's own link lines: the summary already says where the run is
    assert not (project / "mlflow-offline").exists()
    assert_everything_arrived(server.uri, run_id)
    assert time.monotonic() - began < 90


def test_server_never_returns_then_sync_delivers(experiment, project, server, capsys):
    server.start()
    run = Launch([str(experiment), f"tracking.uri={server.uri}"], cwd=project)
    run.wait_for_line("epoch 1/%d done" % EPOCHS)
    server.kill()
    code = run.wait()
    out = run.output
    assert code == 0, out[-3000:]
    assert "epoch %d/%d done" % (EPOCHS, EPOCHS) in out and "│ status" in out and "FINISHED" in out
    run_id = re.search(r"│ run id\s+│ (\S+)", out)[1]
    bundle = f"./mlflow-offline/{run_id}"
    command = f"runner tracking sync {bundle} --uri {server.uri}"
    summary = out[out.index("outage: summary"):]
    flat = " ".join(line.strip("│ ") for line in summary.splitlines())  # the table may wrap the long row
    assert f"{server.uri} did not answer; run kept in {bundle}. Deliver it with: {command}" in " ".join(flat.split())
    assert (project / bundle / "run.json").is_file()

    server.start()
    code, out, err = run_cli(command.split()[1:], capsys)
    assert code == 0, err
    assert f"synced {bundle} -> run {run_id} at {server.uri}\n" in out
    assert_everything_arrived(server.uri, run_id)
