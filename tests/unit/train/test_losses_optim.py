"""trainer.loss and optimizer: the binary cross entropy against timm's BinaryCrossEntropy on the same inputs (index
targets, mixed targets, thresholds), the optimizers against timm's factory on the same model and gradients, the
weight-decay filter, layer-wise lr decay through the schedule, and the errors."""
from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from timm.data import mixup as timm_mixup
from timm.loss import BinaryCrossEntropy
from timm.optim import list_optimizers

from runner.augment.mix import mixup_target
from runner.config.load import load_experiment
from runner.config.sections import LossConfig, OptimizerConfig, SchedulerConfig
from runner.errors import ConfigError
from runner.optim.optimizers import check_optimizer, create_optimizer
from runner.optim.schedules import create_scheduler
from runner.train.losses import create_losses
from tests.helpers import write

CLASSES = 7


def inputs(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(8, CLASSES, generator=g) * 3, torch.tensor([0, 1, 2, 3, 4, 5, 6, 1])


@pytest.mark.parametrize("smoothing", [0.0, 0.1])
@pytest.mark.parametrize("threshold", [None, 0.2])
def test_bce_on_class_indices_is_timms(smoothing, threshold):
    logits, labels = inputs()
    ours = create_losses(LossConfig(name="bce", target_threshold=threshold), smoothing).hard(logits, labels)
    timm = BinaryCrossEntropy(smoothing=smoothing, target_threshold=threshold)(logits, labels)
    assert torch.equal(ours, timm)
    off = smoothing / CLASSES
    target = torch.full((8, CLASSES), off).scatter_(1, labels[:, None], 1 - smoothing + off)
    if threshold is not None:
        target = (target > threshold).float()
    assert torch.allclose(ours, F.binary_cross_entropy_with_logits(logits, target))  # the definition, by hand


@pytest.mark.parametrize("lam", [0.3, 0.85])
@pytest.mark.parametrize("threshold", [None, 0.2])
def test_bce_on_mixed_targets_is_timms_mixup_then_bce(lam, threshold, monkeypatch):
    """As timm's train.py with mixup on: Mixup smooths and mixes the targets, BinaryCrossEntropy(target_threshold)
    takes them as they are."""
    logits, labels = inputs(1)
    images = torch.randn(8, 3, 6, 6, generator=torch.Generator().manual_seed(3))
    timm = timm_mixup.Mixup(mixup_alpha=1.0, label_smoothing=0.1, num_classes=CLASSES)
    monkeypatch.setattr(timm, "_params_per_batch", lambda: (lam, False))
    _, timm_targets = timm(images.clone(), labels)
    ours_targets = mixup_target(labels, CLASSES, lam, 0.1)  # the mix's targets for this lam (tests/test_mix.py)
    losses = create_losses(LossConfig(name="bce", target_threshold=threshold), 0.1)
    expected = BinaryCrossEntropy(target_threshold=threshold)(logits, timm_targets)
    assert torch.equal(losses.soft(logits, ours_targets), expected)


def test_cross_entropy_and_eval_loss():
    logits, labels = inputs(2)
    ce = create_losses(LossConfig(), 0.1)
    assert torch.equal(ce.hard(logits, labels), F.cross_entropy(logits, labels, label_smoothing=0.1))
    bce = create_losses(LossConfig(name="bce"), 0.1)
    assert torch.equal(bce.eval(logits, labels), ce.eval(logits, labels))  # eval/loss: cross entropy under both


def tiny() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.Flatten(),
                               torch.nn.Linear(4 * 4 * 4, CLASSES))


def steps(model, optimizer, n: int = 3) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(5)
    for _ in range(n):
        x, y = torch.randn(4, 3, 6, 6, generator=g), torch.randint(0, CLASSES, (4,), generator=g)
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        optimizer.step()
    return [p.detach().clone() for p in model.parameters()]


@pytest.mark.parametrize("name,args,timm_args", [
    ("lamb", {"eps": 1e-6, "betas": (0.9, 0.999)}, {"eps": 1e-6, "betas": (0.9, 0.999)}),
    ("lars", {"momentum": 0.9}, {"momentum": 0.9}),
    ("adamw", {}, {}),
    ("sgd", {"momentum": 0.875, "nesterov": False}, {"momentum": 0.875, "nesterov": False}),
])
def test_optimizers_are_timms_factory(name, args, timm_args):
    import timm.optim

    cfg = OptimizerConfig(name=name, lr=0.02, weight_decay=0.05, **args)
    ours_model, timm_model = tiny(), tiny()
    ours = create_optimizer(ours_model, cfg, global_batch=256)
    theirs = timm.optim.create_optimizer_v2(timm_model, opt=name, lr=0.02, weight_decay=0.05, **timm_args)
    assert type(ours) is type(theirs)
    assert all(torch.equal(a, b) for a, b in zip(steps(ours_model, ours), steps(timm_model, theirs)))
    decay = {g["weight_decay"]: sum(p.numel() for p in g["params"]) for g in ours.param_groups}
    assert decay == {0.0: 4 + 4 + 4 + CLASSES, 0.05: 3 * 4 * 9 + 64 * CLASSES}  # biases and BN: no decay


def test_sgd_nesterov_is_the_key_written_and_decay_everywhere_when_asked():
    off = create_optimizer(tiny(), OptimizerConfig(name="sgd", no_decay_on_norm_and_bias=False), 256)
    assert [g["weight_decay"] for g in off.param_groups] == [1e-4] and off.param_groups[0]["nesterov"] is False
    on = create_optimizer(tiny(), OptimizerConfig(name="sgd", nesterov=True), 256)
    assert all(g["nesterov"] for g in on.param_groups)


def test_layer_decay_scales_each_group_through_the_schedule():
    import timm
    from timm.optim import param_groups_layer_decay

    model = timm.create_model("resnet18", num_classes=CLASSES)
    cfg = OptimizerConfig(name="adamw", lr=0.1, lr_reference_batch=256, weight_decay=0.05, layer_decay=0.7)
    optimizer = create_optimizer(model, cfg, global_batch=512)  # lr 0.2
    expected = param_groups_layer_decay(model, weight_decay=0.05, layer_decay=0.7)
    assert sorted(g["lr"] for g in optimizer.param_groups) == pytest.approx(
        sorted(0.2 * g["lr_scale"] for g in expected))
    assert max(g["lr"] for g in optimizer.param_groups) == pytest.approx(0.2)  # the head
    # timm's resnet18 groups: the stem, each of its 8 blocks, the head
    assert min(g["lr"] for g in optimizer.param_groups) == pytest.approx(0.2 * 0.7 ** 9)
    scheduler = create_scheduler(optimizer, SchedulerConfig(name="cosine"), 10, 10)
    ratios = [g["lr"] / g["lr_scale"] for g in optimizer.param_groups]
    for _ in range(3):
        optimizer.step()
        scheduler.step()
    after = [g["lr"] / g["lr_scale"] for g in optimizer.param_groups]
    assert after == pytest.approx([r * scheduler.lr_lambdas[0](3) for r in ratios])


@pytest.mark.parametrize("override,expected", [
    ("optimizer.name=lambb", "command line 'optimizer.name=lambb': optimizer.name: unknown optimizer 'lambb'. Did you "
                             f"mean 'lamb'? optimizer.name takes one of timm.optim's {len(list_optimizers())} optimizers, e.g. sgd, momentum, "
                             "adamw, lamb, lars, lion, rmsproptf, adafactor; `runner optimizers` lists them all with "
                             "what they are."),
    ("optimizer.betas=[0.9,0.99]", "command line 'optimizer.betas=[0.9,0.99]': optimizer.betas: sgd takes no betas; "
                                   "remove optimizer.betas, or choose an optimizer that does (adamw, lamb, ...)."),
    ("optimizer.kwargs.trust_clipp=true", "command line 'optimizer.kwargs.trust_clipp=true': "
                                           "optimizer.kwargs.trust_clipp: sgd takes no argument 'trust_clipp'. Its "
                                           "constructor takes: dampening, differentiable, foreach, fused, lr, maximize, "
                                           "momentum, nesterov, weight_decay."),
    ("optimizer.layer_decay=0.7", "command line 'optimizer.layer_decay=0.7': optimizer.layer_decay: layer-wise lr "
                                  "decay groups a model's layers from the head down, which timm's models say "
                                  "(group_matcher) and 'resnet18' does not; use a timm model "
                                  "(model.name=timm/resnet50) or remove optimizer.layer_decay."),
    ("trainer.loss.target_threshold=0.2", "command line 'trainer.loss.target_threshold=0.2': "
                                          "trainer.loss.target_threshold: 0.2 is a setting of the binary cross "
                                          "entropy, but trainer.loss.name is cross_entropy; set trainer.loss.name=bce, "
                                          "or remove trainer.loss.target_threshold."),
])
def test_bad_optimizer_and_loss_settings(project, override, expected):
    from runner.run.validate import check_names

    path = write(project, "model: {name: resnet18, num_classes: 7}\noptimizer: {name: sgd}\n"
                          "pipelines: {train: {use: imagenet_train}}\n")
    with pytest.raises(ConfigError) as e:
        check_names(load_experiment(path, [override]))
    assert str(e.value).startswith(expected), str(e.value)


def test_kwargs_reach_the_constructor():
    cfg = OptimizerConfig(name="lamb", lr=0.008, weight_decay=0.02, kwargs={"trust_clip": True})
    check_optimizer(cfg, "timm/resnet50", lambda key: {"where": key})
    optimizer = create_optimizer(copy.deepcopy(tiny()), cfg, 2048)
    assert optimizer.defaults["trust_clip"] is True and optimizer.defaults["eps"] == 1e-6  # lamb's own eps


def ffcv_cyclic_lr(epoch: float, lr: float, epochs: int, lr_peak_epoch: int) -> float:
    """ffcv-imagenet's get_cyclic_lr, which its train loop interpolates linearly between epochs."""
    return float(np.interp([epoch], [0, lr_peak_epoch, epochs], [1e-4 * lr, lr, 0])[0])


def test_linear_schedule_with_warmup_is_ffcvs_cyclic():
    from runner.optim.schedules import lr_factor

    steps_per_epoch, epochs = 10, 16
    factor = lr_factor(SchedulerConfig(name="linear", warmup_epochs=2, warmup_start_factor=1e-4), steps_per_epoch,
                       epochs * steps_per_epoch)
    for step in range(0, epochs * steps_per_epoch + 1, 3):
        assert factor(step) == pytest.approx(ffcv_cyclic_lr(step / steps_per_epoch, 1.0, epochs, 2), abs=1e-12)
