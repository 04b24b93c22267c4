"""The training loss (trainer.loss): cross entropy, or timm's BinaryCrossEntropy (ResNet Strikes Back), each for
class-index targets and for the probability targets of a mixed batch."""
from __future__ import annotations

from typing import NamedTuple

from torch import nn

from runner.config.sections import LossConfig

# timm is imported only for its BCE loss (the mixing recipes'), for start-up of runs that use plain CE.


class Losses(NamedTuple):
    hard: nn.Module    # class-index targets: smoothed by trainer.label_smoothing
    soft: nn.Module    # probability targets (B, classes) from the mix, which carry the smoothing already
    eval: nn.Module    # eval/loss: cross entropy with the same smoothing under either training loss


def create_losses(cfg: LossConfig, label_smoothing: float) -> Losses:
    evaluation = nn.CrossEntropyLoss(label_smoothing=label_smoothing)
    if cfg.name == "cross_entropy":
        return Losses(hard=evaluation, soft=nn.CrossEntropyLoss(), eval=evaluation)
    from timm.loss import BinaryCrossEntropy

    def bce(smoothing: float) -> nn.Module:
        return BinaryCrossEntropy(smoothing=smoothing, target_threshold=cfg.target_threshold,
                                  sum_classes=cfg.sum_classes, pos_weight=cfg.pos_weight)
    # as timm's train.py: smoothing on index targets; mixed targets come smoothed (timm's dense path leaves them)
    return Losses(hard=bce(label_smoothing), soft=bce(0.0), eval=evaluation)
