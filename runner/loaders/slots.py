"""Gradient accumulation: a global batch (trainer.global_batch_size) that does not depend on the machine.

A run reads `slots` = processes x accumulation reader shards. Slot k = rank * accumulation + j is the shard, with
the seeds, that rank k of a run of `slots` processes reads, and micro-step j of a process reads its slot j: one
process accumulating two batches sees, in each optimizer step, the batches two processes see.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, NamedTuple

from runner.dist import Dist
from runner.errors import ConfigError

if TYPE_CHECKING:
    import torch

    from runner.config import LoadedExperiment


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


class SlotLoader:
    """A process's train loaders, one per slot, read in turn: every step yields one MicroBatch per slot.

    Every slot's epoch has the same number of batches (the loaders size an epoch by their shard count, not by the
    shard), so all of them end, drain and reset together."""

    role = "train"

    def __init__(self, loaders: list, slots: list[int]):
        self.loaders, self.slots = loaders, slots
        self.steps_per_epoch = loaders[0].steps_per_epoch

    def set_epoch(self, epoch: int) -> None:
        """Before epoch `epoch` (from 0): loaders whose input changes with the epoch (loaders.epochs) take it."""
        for loader in self.loaders:
            if hasattr(loader, "set_epoch"):
                loader.set_epoch(epoch)

    def epoch(self, start_batch: int = 0) -> Iterator[list[MicroBatch]]:
        epochs = [loader.epoch(start_batch) for loader in self.loaders]
        while True:
            batches = [next(e, None) for e in epochs]  # every one to its end: each resets its reader there
            if any(b is None for b in batches):
                return
            yield [MicroBatch(slot, *b) for slot, b in zip(self.slots, batches)]

    def part_waits(self) -> dict[str, float]:
        """Seconds spent waiting for each pipeline of a hybrid loader, over the slots; {} without one."""
        total: dict[str, float] = {}
        for loader in self.loaders:
            for name, seconds in getattr(loader, "part_waits", dict)().items():
                total[name] = total.get(name, 0.0) + seconds
        return total

    def state(self) -> Any:
        """The reader positions: the one loader's state as it is without accumulation, else one per slot."""
        states = [loader.state() for loader in self.loaders]
        return states[0] if len(states) == 1 else {"slots": states}

    def close(self) -> None:
        for loader in self.loaders:
            loader.close()


def create_train_loader(v, d: Dist, accumulation: int, *, state: Any = None,
                        checkpointing: bool = False) -> SlotLoader:
    """The train loaders of process `d`'s slots (create_loader with each slot's view), from a checkpoint's `state`."""
    from runner.loaders import create_loader

    views = slot_views(d, accumulation)
    states = state["slots"] if accumulation > 1 and state is not None else [state] * len(views)
    loaders = [create_loader(v, "train", view, state=s, checkpointing=checkpointing) for view, s in zip(views, states)]
    return SlotLoader(loaders, [view.rank for view in views])
