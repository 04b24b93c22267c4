"""Gradient accumulation: a global batch (trainer.global_batch_size) that does not depend on the machine.

A run reads `slots` = processes x accumulation reader shards. Slot k = rank * accumulation + j is the shard, with
the seeds, that rank k of a run of `slots` processes reads, and micro-step j of a process reads its slot j: one
process accumulating two batches sees, in each optimizer step, the batches two processes see.
"""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, NamedTuple

from runner.dist import Dist
from runner.errors import ConfigError

if TYPE_CHECKING:
    import torch

    from runner.config.load import LoadedExperiment


def global_batch(cfg, world: int) -> int:
    """Images per optimizer step over all `world` processes: trainer.global_batch_size, or one batch each."""
    return cfg.trainer.global_batch_size or cfg.data.batch_size * world


def check_accumulation(loaded: LoadedExperiment, world: int) -> int:
    """Batches each of `world` processes accumulates per optimizer step; a ConfigError at trainer.global_batch_size
    when that is not a whole number of at least 1."""
    cfg = loaded.config
    wanted, batch = cfg.trainer.global_batch_size, cfg.data.batch_size
    once = batch * world
    if wanted is None:
        return 1
    if wanted % once:
        raise ConfigError(f"{wanted} is not a whole multiple of data.batch_size x processes = {batch} x {world} = "
                          f"{once}: each optimizer step accumulates the same whole number of batches of "
                          f"data.batch_size on every process. Valid here: {once}, {2 * once}, {3 * once}, ... "
                          f"(accumulating 1, 2, 3, ... batches), or null ({once}); or change data.batch_size.",
                          **loaded.at("trainer.global_batch_size"))
    return wanted // once


def accumulation_note(cfg, world: int, accumulation: int) -> list[str]:
    """What a global batch above one batch per process runs as, said once by launch and validate."""
    if accumulation == 1:
        return []
    return [f"trainer.global_batch_size={cfg.trainer.global_batch_size}: each optimizer step accumulates the "
            f"gradients of {accumulation} batches of {cfg.data.batch_size} (data.batch_size) on each of {world} "
            "process(es); trainer.max_steps, logging and the schedule count optimizer steps."]


def slot_views(d: Dist, accumulation: int) -> list[Dist]:
    """The slots process `d` reads, each as the rank that would read it in a run of processes x accumulation."""
    if accumulation == 1:
        return [d]
    return [dataclasses.replace(d, rank=d.rank * accumulation + j, world=d.world * accumulation, slots=accumulation)
            for j in range(accumulation)]


class MicroBatch(NamedTuple):
    slot: int                   # the global slot index: what rank `slot` of a run without accumulation would be
    images: torch.Tensor
    labels: torch.Tensor


