"""Gradient accumulation (trainer.global_batch_size): the same YAML gives the same optimisation on 1 process or N.

What matches, and why: a process accumulating over slots j reads, for each micro-step, the shard and seeds rank
rank * accumulation + j of a run without accumulation reads, so the batches are the same bytes. In training mode
BatchNorm normalises each forward by that forward's batch, and a micro-batch of the accumulating process is the
batch of the matching process of the other run, so each micro-batch's loss is the same; the mean of the
micro-batches' gradients is the mean DDP takes over processes. The train loss and lr curves therefore match to
float tolerance. BatchNorm's running statistics do not (DDP keeps rank 0's, broadcast every forward; accumulation
updates them with every micro-batch), so evaluation is left out of the comparison.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from mlflow import MlflowClient

from tests.fixtures.accumulate import EXPERIMENT
from tests.helpers import REPO, write_image_folder


def launch(cwd: Path, *args: str, name: str, wait: bool = True) -> subprocess.Popen | str:
    """`runner launch experiments/acc.yaml` pinned to one core: the intra-op thread count changes float reduction
    order (oneDNN), so one process alone and each of two processes must run torch on one thread alike."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("MLFLOW_TRACKING_URI", None)
    core = min(os.sched_getaffinity(0))
    proc = subprocess.Popen([sys.executable, "-u", "-m", "runner", "launch", "experiments/acc.yaml",
                             f"tracking.run_name={name}", *args], cwd=cwd, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            preexec_fn=lambda: os.sched_setaffinity(0, {core}))
    if not wait:
        return proc
    out = proc.stdout.read()
    assert proc.wait(timeout=600) == 0, out[-3000:]
    return out


def history(cwd: Path, name: str, key: str = "train/loss"):
    client = MlflowClient(f"sqlite:///{cwd}/mlflow.db")
    exp = client.get_experiment_by_name("acc")
    run = next(r for r in client.search_runs([exp.experiment_id]) if r.info.run_name == name)
    return run, sorted((m.step, m.value) for m in client.get_metric_history(run.info.run_id, key))


def test_one_process_accumulating_two_batches_trains_as_two_processes(exp, project):
    out = launch(project, "trainer.devices=1", "trainer.max_steps=4", name="one")
    assert "accumulates the gradients of 2 batches of 4 (data.batch_size) on each of 1 process(es)" in out
    launch(project, "trainer.devices=2", "trainer.max_steps=4", name="two")
    one, one_loss = history(project, "one")
    two, two_loss = history(project, "two")
    assert (one.data.params["trainer.accumulation"], two.data.params["trainer.accumulation"]) == ("2", "1")
    # 24 images in 2 slots of 12: 3 optimizer steps an epoch; max_steps=4 counts optimizer steps, into epoch 2
    assert [s for s, _ in one_loss] == [s for s, _ in two_loss] == [1, 2, 3, 4]
    assert [x for _, x in one_loss] == pytest.approx([x for _, x in two_loss], rel=1e-4)
    # the lr scales with the global batch (8 / lr_reference_batch 4), on the same per-optimizer-step schedule
    assert history(project, "one", "train/lr")[1] == history(project, "two", "train/lr")[1]
    assert history(project, "one", "train/lr")[1][0][1] == pytest.approx(0.04 * 0.5 * (1 + torch.cos(
        torch.tensor(torch.pi / 6)).item()))


def test_a_stop_mid_epoch_with_accumulation_resumes_bit_identically(tmp_path):
    (tmp_path / "experiments").mkdir()
    import shutil

    shutil.copytree(REPO / "pipelines", tmp_path / "pipelines")
    write_image_folder(tmp_path / "data" / "train", classes=3, per_class=12, seed=1)  # 2 slots x 18: 4 steps
    write_image_folder(tmp_path / "data" / "val", classes=3, per_class=2, seed=2)
    (tmp_path / "experiments" / "acc.yaml").write_text(EXPERIMENT.format(root="data"))
    launch(tmp_path, name="full")
    _, expected = history(tmp_path, "full")
    assert len(expected) == 8  # 2 epochs of 4 optimizer steps

    cut = launch(tmp_path, name="cut", wait=False)
    seen = []
    for line in cut.stdout:
        seen.append(line)
        if "(global 2)" in line:  # epoch 1, step 2 of 4
            cut.send_signal(signal.SIGTERM)
            break
    out = "".join(seen) + cut.stdout.read()
    assert cut.wait(timeout=120) == 143, out[-3000:]
    run, _ = history(tmp_path, "cut")
    ckpt = Path(tmp_path, run.data.tags["runner.checkpoint"])
    state = torch.load(ckpt, weights_only=False)
    assert state["epoch"] == 0 and 0 < state["batch"] < 4
    slots = state["loader_states"][0]["slots"]
    assert len(slots) == 2 and all(slots) and slots[0] != slots[1]  # each slot's DALI reader and RNG
    assert state["fixed_settings"]["trainer.global_batch_size"] == 8

    saved = ckpt.read_bytes()
    refused = launch(tmp_path, "--resume", "last", "trainer.global_batch_size=4", name="cut", wait=False)
    out = refused.stdout.read()
    assert refused.wait(timeout=120) == 2, out
    assert out.splitlines()[-1] == (
        f"error: --resume: checkpoint {ckpt.relative_to(tmp_path)} cannot resume under these settings: "
        "trainer.global_batch_size: 8 in the checkpoint, 4 now. Its model, optimizer and data readers' positions "
        "were saved under the checkpoint's values: launch with those, or start a new run without --resume.")
    assert ckpt.read_bytes() == saved

    launch(tmp_path, "--resume", run.info.run_id, name="cut")
    run, after = history(tmp_path, "cut")
    assert run.info.status == "FINISHED"
    assert after == expected  # every optimizer step's loss, bit for bit, across the interruption
