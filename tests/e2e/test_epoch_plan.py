"""pipelines.train.resolution and data.repeats: FFCV's resolution ramp value for value, timm's RepeatAugSampler
deal, the DALI train pipeline rebuilt per epoch at that side and in that order, the torchvision sampler, a CPU
launch that logs each epoch's side and resumes mid-ramp bit for bit, and the errors."""
from __future__ import annotations

import signal
from pathlib import Path

import torch
from mlflow import MlflowClient

from tests.helpers import output_of, runner_process


def histories(workdir: Path, run_name: str, keys=("train/loss", "train/top1", "eval/loss", "epoch/train_resolution")):
    client = MlflowClient(f"sqlite:///{workdir}/mlflow.db")
    exp = client.get_experiment_by_name("ramp")
    run = next(r for r in client.search_runs([exp.experiment_id]) if r.info.run_name == run_name)
    return run, {k: {m.step: m.value.hex() for m in client.get_metric_history(run.info.run_id, k)} for k in keys}


def test_a_launch_logs_each_epochs_side_and_resumes_mid_ramp_bit_for_bit(ramp):
    output_of(runner_process(ramp, "launch", "experiments/ramp.yaml", "tracking.run_name=full"))
    _, full = histories(ramp, "full")
    assert {e: float.fromhex(x) for e, x in full["epoch/train_resolution"].items()} == {1: 32, 2: 48, 3: 48, 4: 64}
    assert len(full["train/loss"]) == 4 * 6  # 24 images an epoch with repeats as without, batch 4
    cut = runner_process(ramp, "launch", "experiments/ramp.yaml", "tracking.run_name=cut")
    for line in cut.stdout:
        if "(global 14)" in line:  # epoch 3 (side 48), batch 2 of 6
            break
    cut.send_signal(signal.SIGTERM)
    output_of(cut, 143)
    run, _ = histories(ramp, "cut")
    state = torch.load(Path(ramp, run.data.tags["runner.checkpoint"]), weights_only=False)
    assert state["epoch"] == 2 and 0 < state["batch"] < 6 and state["loader_states"][0]["epoch"] == 2
    output_of(runner_process(ramp, "resume", run.info.run_id))
    _, resumed = histories(ramp, "cut")
    assert resumed == full  # every step's loss, each evaluation and each epoch's side, bit for bit
