"""trainer.ema without launching: the decay against timm's ModelEmaV3, its warm-up values, and the averaged
weights and BatchNorm statistics against timm's. tests/e2e/test_ema.py launches with mix and EMA."""
from __future__ import annotations

import pytest
import torch
from timm.utils.model_ema import ModelEmaV3
from torch import nn

from runner.config.sections import EmaConfig
from runner.train.ema import ModelEma, ema_decay
from tests.fixtures.ema import small_net, train_steps


@pytest.mark.parametrize("cfg", [EmaConfig(decay=0.999), EmaConfig(decay=0.99, warmup=True),
                                 EmaConfig(decay=0.9999, warmup=True, warmup_gamma=2.0, warmup_power=0.75),
                                 EmaConfig(decay=0.999, warmup=True, min_decay=0.5)])
def test_decay_is_timms_model_ema_v3(cfg):
    timm = ModelEmaV3(nn.Linear(1, 1), decay=cfg.decay, min_decay=cfg.min_decay, use_warmup=cfg.warmup,
                      warmup_gamma=cfg.warmup_gamma, warmup_power=cfg.warmup_power)
    for step in [1, 2, 3, 10, 100, 1000, 10 ** 6]:
        assert ema_decay(cfg, step) == timm.get_decay(step), step


def test_warm_up_decay_values():
    cfg = EmaConfig(decay=0.999, warmup=True)  # gamma 1, power 2/3
    assert ema_decay(cfg, 1) == 0.0  # the first update copies the weights
    assert ema_decay(cfg, 2) == pytest.approx(1 - 2 ** (-2 / 3))  # 0.370
    assert ema_decay(cfg, 9) == pytest.approx(1 - 9 ** (-2 / 3))  # 0.769
    assert ema_decay(cfg, 10 ** 5) == 0.999  # capped at decay
    floor = EmaConfig(decay=0.999, warmup=True, min_decay=0.6)
    assert ema_decay(floor, 2) == 0.6 and ema_decay(floor, 9) == pytest.approx(1 - 9 ** (-2 / 3))
    assert ema_decay(EmaConfig(decay=0.99), 2) == 0.99






@pytest.mark.parametrize("every", [1, 3])
def test_averaged_weights_and_batchnorm_statistics_are_timms(every):
    cfg = EmaConfig(decay=0.9, warmup=True, every_n_steps=every)
    model = small_net()
    ours, timm = ModelEma(model, cfg), ModelEmaV3(model, decay=0.9, use_warmup=True)

    def update(step):
        ours.update(step)
        if step % every == 0:
            timm.update(model, step=step)
    train_steps(model, 7, update)
    theirs = timm.module.state_dict()
    for key, value in ours.state_dict().items():
        assert torch.equal(value, theirs[key]), key
    assert ours.state_dict()["1.num_batches_tracked"] == (7 // every) * every  # integers copied, not averaged
    assert not torch.equal(ours.state_dict()["1.running_mean"], model.state_dict()["1.running_mean"])






