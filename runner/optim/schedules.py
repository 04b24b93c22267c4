"""Learning-rate schedules by name, per optimizer step."""
from __future__ import annotations

import math
from collections.abc import Callable

from runner.config.sections import SchedulerConfig
from runner.registry import Registry

# torch is imported where a scheduler is made, for start-up (`runner validate` checks the section).

SCHEDULES: Registry[Callable[..., Callable[[int], float]]] = Registry("scheduler")


# Each schedule: (cfg, steps_per_epoch, total_steps) -> factor(step) in [0, 1] applied to the lr.
@SCHEDULES.register("constant")
def _constant(cfg: SchedulerConfig, steps_per_epoch: int, total: int):
    return lambda step: 1.0


@SCHEDULES.register("step")
def _step(cfg: SchedulerConfig, steps_per_epoch: int, total: int):
    every = max(1, cfg.step_epochs * steps_per_epoch)
    return lambda step: cfg.gamma ** (step // every)


@SCHEDULES.register("cosine")
def _cosine(cfg: SchedulerConfig, steps_per_epoch: int, total: int):
    floor = cfg.min_lr_factor
    return lambda step: floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * min(step, total) / max(1, total)))


@SCHEDULES.register("linear")
def _linear(cfg: SchedulerConfig, steps_per_epoch: int, total: int):
    """From the end of the warm-up straight down to min_lr_factor at the last step: with a warm-up from
    warmup_start_factor, FFCV's cyclic (triangular) schedule."""
    floor, start = cfg.min_lr_factor, int(round(cfg.warmup_epochs * steps_per_epoch))
    return lambda step: 1.0 if step < start else floor + (1 - floor) * max(0, total - step) / max(1, total - start)


@SCHEDULES.register("onecycle")
def _onecycle(cfg: SchedulerConfig, steps_per_epoch: int, total: int):
    peak = max(1, int(cfg.pct_start * total))

    def factor(step: int) -> float:
        if step < peak:
            return 0.04 + 0.96 * step / peak  # torch's OneCycleLR starts at max_lr / 25
        return 0.5 * (1 + math.cos(math.pi * (step - peak) / max(1, total - peak)))
    return factor


def lr_factor(cfg: SchedulerConfig, steps_per_epoch: int, total_steps: int) -> Callable[[int], float]:
    """The schedule with its linear warm-up in front."""
    schedule = SCHEDULES.get(cfg.name, where="scheduler.name")(cfg, steps_per_epoch, total_steps)
    warmup = int(round(cfg.warmup_epochs * steps_per_epoch))
    if warmup <= 0:
        return schedule

    def factor(step: int) -> float:
        if step < warmup:
            start = cfg.warmup_start_factor
            return (start + (1 - start) * step / warmup) * schedule(warmup)
        return schedule(step)
    return factor


def create_scheduler(optimizer, cfg: SchedulerConfig, steps_per_epoch: int, total_steps: int):
    import torch

    return torch.optim.lr_scheduler.LambdaLR(optimizer, lr_factor(cfg, steps_per_epoch, total_steps))
