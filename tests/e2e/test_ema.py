"""trainer.ema: the decay against timm's ModelEmaV3, the averaged weights against timm's, equal on DDP ranks
(2 gloo processes); and launches with mix and EMA on the CPU: bit-identical twice, bit-identical across a stop
and --resume, eval_ema metrics in the MLflow store, the averaged weights in the checkpoint."""
from __future__ import annotations

import signal
from pathlib import Path

import pytest
import torch
from mlflow import MlflowClient
from torch import nn

from runner.config.sections import EmaConfig
from runner.train.ema import ModelEma
from tests.fixtures.ema import checksum, small_net, train_steps
from tests.helpers import REPO, free_port, output_of, runner_process, write_image_folder

EXPERIMENT = """\
name: recipe
seed: 5
model: {name: resnet18, num_classes: 3}
optimizer: {lr: 0.02}
trainer:
  epochs: 2
  log_every_n_steps: 1
  deterministic: true
  label_smoothing: 0.1
  ema: {decay: 0.9, warmup: true, every_n_steps: 2}
data: {root: data, batch_size: 4}
pipelines:
  train:
    use: imagenet_train
    params: {size: 32}
    mix: {mixup_alpha: 0.2, cutmix_alpha: 1.0}
  eval: {use: imagenet_eval, params: {size: 32, resize_shorter: 36}}
tracking: {experiment: recipe}
"""


KEYS = ("train/loss", "train/top1", "eval/loss", "eval/top1", "eval_ema/loss", "eval_ema/top1")


def histories(workdir: Path, run_name: str) -> tuple[object, dict[str, dict[int, float]]]:
    client = MlflowClient(f"sqlite:///{workdir}/mlflow.db")
    exp = client.get_experiment_by_name("recipe")
    run = next(r for r in client.search_runs([exp.experiment_id]) if r.info.run_name == run_name)
    return run, {k: {m.step: m.value for m in client.get_metric_history(run.info.run_id, k)} for k in KEYS}


@pytest.fixture(scope="module")
def workdir(module_tmp) -> Path:
    """A project with the experiment and one uninterrupted run of it, 'full'."""
    import shutil

    root = module_tmp
    shutil.copytree(REPO / "pipelines", root / "pipelines")
    (root / "experiments").mkdir()
    (root / "experiments" / "recipe.yaml").write_text(EXPERIMENT)
    write_image_folder(root / "data" / "train", classes=3, per_class=8, seed=1)
    write_image_folder(root / "data" / "val", classes=3, per_class=3, seed=2)
    out = output_of(runner_process(root, "launch", "experiments/recipe.yaml", "tracking.run_name=full"))
    assert "ema: loss" in out and "eval top-1 (EMA)" in out
    return root


def test_eval_ema_metrics_are_logged_and_the_checkpoint_holds_the_average(workdir):
    run, full = histories(workdir, "full")
    for key in KEYS:
        assert full[key], key
    assert sorted(full["eval_ema/top1"]) == sorted(full["eval/top1"]) == [1, 2]  # per epoch, beside eval/
    assert sorted(full["train/loss"]) == list(range(1, 13))
    assert full["eval_ema/loss"] != full["eval/loss"]  # another model: the average
    state = torch.load(Path(workdir, run.data.tags["runner.checkpoint"]), weights_only=False)
    assert state["fixed_settings"]["trainer.ema"] == "on"
    assert state["ema"].keys() == state["model"].keys()
    assert not torch.equal(state["ema"]["fc.weight"], state["model"]["fc.weight"])
    assert state["ema"]["bn1.num_batches_tracked"] == 12  # copied at the last update (step 12)


def test_two_launches_with_mix_and_ema_are_bit_identical(workdir):
    output_of(runner_process(workdir, "launch", "experiments/recipe.yaml", "tracking.run_name=again"))
    _, full = histories(workdir, "full")
    _, again = histories(workdir, "again")
    for key in KEYS:
        assert {s: v.hex() for s, v in again[key].items()} == {s: v.hex() for s, v in full[key].items()}, key


def test_a_run_stopped_mid_epoch_and_resumed_ends_as_the_unstopped_one(workdir):
    cut = runner_process(workdir, "launch", "experiments/recipe.yaml", "tracking.run_name=cut")
    for line in cut.stdout:
        if "(global 9)" in line:  # epoch 2, batch 3 of 6: after an EMA update at step 8, before the next
            break
    cut.send_signal(signal.SIGTERM)
    output_of(cut, 143)
    run, _ = histories(workdir, "cut")
    state = torch.load(Path(workdir, run.data.tags["runner.checkpoint"]), weights_only=False)
    assert state["epoch"] == 1 and 0 < state["batch"] < 6 and state["ema"] is not None
    output_of(runner_process(workdir, "resume", run.info.run_id))
    _, resumed = histories(workdir, "cut")
    _, full = histories(workdir, "full")
    assert resumed == full  # every step's train loss and top-1, and both evaluations, bit for bit

    refused = output_of(runner_process(workdir, "launch", "experiments/recipe.yaml", "--resume", "last",
                                       "trainer.ema=null"), code=2)
    assert ("cannot resume under these settings: trainer.ema: on in the checkpoint, off now. Its model, optimizer "
            "and data readers' positions were saved under the checkpoint's values") in refused


def ddp_worker(rank: int, port: int, out: str) -> None:
    import torch.distributed as dist

    from runner.dist import Dist

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    model = small_net()
    ema = ModelEma(model, EmaConfig(decay=0.8))
    net = nn.parallel.DistributedDataParallel(model)
    # each rank its own batches: gradients are all-reduced, BatchNorm's statistics stay each rank's
    train_steps(net, 5, ema.update, seed=10 + rank)
    params = checksum({k: v for k, v in ema.module.named_parameters()})
    before = checksum(ema.state_dict())
    ema.sync(Dist(rank=rank, world=2))
    after = checksum(ema.state_dict())
    gathered = [None, None]
    dist.all_gather_object(gathered, (params, before, after))
    if rank == 0:
        Path(out).write_text(repr(gathered))
    dist.destroy_process_group()


def test_ddp_ranks_hold_the_same_averaged_weights_after_sync(tmp_path):
    out = tmp_path / "checksums.txt"
    torch.multiprocessing.spawn(ddp_worker, args=(free_port(), str(out)), nprocs=2)
    (params0, before0, after0), (params1, before1, after1) = eval(out.read_text())
    assert params0 == params1  # the parameters agree without any help
    assert before0 != before1  # the BatchNorm statistics do not: each rank's own batches
    assert after0 == after1 == before0  # rank 0's, on both
