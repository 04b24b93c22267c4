"""Optimizers and learning-rate schedules by name.

Schedules are per optimizer step (not per epoch), so warm-up and decay are smooth and a run cut
by `trainer.max_steps` follows the same curve as a full one up to that point.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from runner.config.sections import OptimizerConfig, SchedulerConfig
from runner.registry import Registry

OPTIMIZERS: Registry[Callable[..., Any]] = Registry("optimizer")
SCHEDULES: Registry[Callable[..., Callable[[int], float]]] = Registry("scheduler")


def _param_groups(model, cfg: OptimizerConfig) -> list[dict]:
    if not cfg.no_decay_on_norm_and_bias:
        return [{"params": [p for p in model.parameters() if p.requires_grad]}]
    decay, no_decay = [], []
    for p in model.parameters():
        if p.requires_grad:
            (no_decay if p.ndim <= 1 else decay).append(p)  # 1-d: biases and norm scales
    return [{"params": decay}, {"params": no_decay, "weight_decay": 0.0}]


@OPTIMIZERS.register("sgd")
def _sgd(groups, cfg: OptimizerConfig, lr: float):
    import torch

    return torch.optim.SGD(groups, lr=lr, momentum=cfg.momentum, nesterov=cfg.nesterov,
                           weight_decay=cfg.weight_decay)


@OPTIMIZERS.register("adamw")
def _adamw(groups, cfg: OptimizerConfig, lr: float):
    import torch

    return torch.optim.AdamW(groups, lr=lr, betas=cfg.betas, eps=cfg.eps, weight_decay=cfg.weight_decay)


def scaled_lr(cfg: OptimizerConfig, global_batch: int) -> float:
    """optimizer.lr, scaled linearly when a reference batch is given (Goyal et al. 2017)."""
    if cfg.lr_reference_batch is None:
        return cfg.lr
    return cfg.lr * global_batch / cfg.lr_reference_batch


def create_optimizer(model, cfg: OptimizerConfig, global_batch: int):
    return OPTIMIZERS.get(cfg.name, where="optimizer.name")(_param_groups(model, cfg), cfg,
                                                             scaled_lr(cfg, global_batch))


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
