"""runner sweep on this machine, several children at once: each in its own slot of cores, a misconfigured child
left out while the rest run, a Ctrl-C that stops every child at a checkpoint, and `runner sweep --resume` that
runs only the unfinished children on, in their own runs."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

from mlflow import MlflowClient

from tests.helpers import REPO, wait_for_text, write_image_folder

STEPS = 18  # 3 epochs of 6 batches


EXPERIMENT = """\
name: study
seed: 1
model: {name: resnet18, num_classes: 3}
optimizer: {lr: 0.02}
trainer: {epochs: 3, log_every_n_steps: 1}
data: {root: data, batch_size: 4}
pipelines:
  train: {use: imagenet_train, params: {size: 32, decode_device: cpu}}
  eval: {use: imagenet_eval, params: {size: 32, resize_shorter: 36, decode_device: cpu}}
tracking: {experiment: study}
"""


def test_children_run_side_by_side_stop_together_and_resume(project):
    write_image_folder(project / "data" / "train", classes=3, per_class=8, seed=1)
    write_image_folder(project / "data" / "val", classes=3, per_class=3, seed=2)
    (project / "experiments" / "study.yaml").write_text(EXPERIMENT)
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": str(REPO)}
    argv = [sys.executable, "-m", "runner", "sweep", "experiments/study.yaml", "seed=0,1",
            "model.name=resnet18,resnet1800", "--parallel", "2"]
    sweep = subprocess.Popen(argv, cwd=project, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 120
    while not list(project.glob("sweeps/study-*/sweep.json")) and time.monotonic() < deadline:
        time.sleep(0.3)
    (folder,) = [p.parent for p in project.glob("sweeps/study-*/sweep.json")]
    # children 1 (seed=0) and 3 (seed=1) run at once, one core each; 2 and 4 (resnet1800) never start
    for child in ("001", "003"):
        wait_for_text(folder / child / "log.txt", "(global 3)")
    for child, core in (("001", 0), ("003", 1)):
        header = (folder / child / "log.txt").read_text().splitlines()[0]
        assert f", cores {core}, at " in header, header
    sweep.send_signal(signal.SIGINT)
    out, _ = sweep.communicate(timeout=300)
    assert sweep.returncode == 130, out
    assert "sweep stopped (4 children: 2 stopped, 2 invalid); the stopped children saved a checkpoint: " \
           "runner sweep --resume " in out, out
    for child in ("001", "003"):
        assert json.loads((folder / child / "exit.json").read_text())["exit_code"] == 130
        assert len(list((folder / child / "checkpoints").glob("study/*/last.pt"))) == 1
    for child in ("002", "004"):
        log = (folder / child / "log.txt").read_text()
        assert log.startswith("error: command line 'model.name=resnet18,resnet1800': model.name: unknown model "
                              "'resnet1800'.") and not (folder / child / "exit.json").exists()

    uri = f"sqlite:///{project}/mlflow.db"
    client = MlflowClient(uri)
    (parent,) = client.search_runs([client.get_experiment_by_name("study").experiment_id],
                                   "tags.`runner.sweep` = 'parent'")
    assert parent.info.status == "KILLED"
    stopped = {r.info.run_name: r.info.run_id for r in client.search_runs(
        [parent.info.experiment_id], f"tags.`mlflow.parentRunId` = '{parent.info.run_id}'")}
    assert sorted(stopped) == ["seed=0 name=resnet18", "seed=1 name=resnet18"]

    resumed = subprocess.run([sys.executable, "-m", "runner", "sweep", "--resume", parent.info.run_id], cwd=project,
                             env=env, text=True, capture_output=True, timeout=600)
    out = resumed.stdout + resumed.stderr
    assert resumed.returncode == 2, out  # what is left undone is the two children that do not validate
    assert f"resuming sweep {parent.info.run_id}: 4 children: 2 stopped, 2 invalid; running again: 1, 3" in \
        " ".join(out.split()), out
    assert "\n  4 children: 2 done, 2 invalid\n" in out, out
    children = client.search_runs([parent.info.experiment_id], f"tags.`mlflow.parentRunId` = '{parent.info.run_id}'")
    assert {r.info.run_name: r.info.run_id for r in children} == stopped  # each went on in its own run
    for run in children:
        assert run.info.status == "FINISHED"
        steps = sorted(m.step for m in client.get_metric_history(run.info.run_id, "train/loss"))
        assert steps == list(range(1, STEPS + 1)), run.info.run_name
    assert client.get_run(parent.info.run_id).info.status == "FAILED"  # two of its children never ran
