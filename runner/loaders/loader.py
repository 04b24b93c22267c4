"""The loader contract and the loader an experiment names: DALI's (a pipeline per reader slot, or per epoch on a
schedule), torchvision's DataLoader over an ImageFolder, or synthetic tensors (runner.loaders says what each yields).
"""
from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Protocol

from runner.dist import Dist
from runner.loaders.config import LoaderConfig
from runner.loaders.dali import DaliLoader
from runner.loaders.dali_plan import checked_pipelines
from runner.loaders.epochs import EpochLoader, epoch_key, epoch_view, scheduled
from runner.loaders.folder import FolderLoader
from runner.loaders.slots import MicroBatch, slot_views
from runner.loaders.synthetic import SyntheticLoader

if TYPE_CHECKING:
    import torch


class Loader(Protocol):
    role: str                    # train | eval
    steps_per_epoch: int         # batches one epoch yields on this rank

    def epoch(self, start_batch: int = 0) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """One epoch's batches, from `start_batch` (after a resume)."""
    def state(self) -> Any:
        """Position to store in a checkpoint (picklable), taken between batches."""
    def close(self) -> None: ...


def create_loader(cfg: LoaderConfig, role: str, d: Dist, *, state: Any = None, checkpointing: bool = False,
                  feeds_model: bool = True) -> Loader | None:
    """The loader data.loader names, for `role` on this rank; None when there is no eval pipeline.
    `feeds_model`: False where nothing trains on the images (preview, loader-only timing), so a DALI pipeline
    may make any output, e.g. uint8 images before normalization."""
    if cfg.data.loader == "dali":
        if role == "train" and scheduled(cfg):  # a pipeline per epoch: its side, its file list
            def build(epoch: int, epoch_state: Any):
                return _dali_loader(epoch_view(cfg, epoch), role, d, epoch_state, checkpointing, feeds_model, epoch)
            return EpochLoader(build, lambda epoch: epoch_key(cfg, epoch), state)
        return _dali_loader(cfg, role, d, state, checkpointing, feeds_model)
    if cfg.data.loader == "torchvision":
        return FolderLoader.create(cfg, role, d, state=state)
    return SyntheticLoader.create(cfg, role, d)


def _dali_loader(cfg: LoaderConfig, role: str, d: Dist, state: Any, checkpointing: bool, feeds_model: bool,
                 epoch: int | None = None):
    graphs = checked_pipelines(cfg, d, roles=(role,), epoch=epoch)
    if role not in graphs:
        return None
    return DaliLoader.create(cfg.data, cfg.pipelines, graphs, role, d, seed=cfg.seed, at=cfg.at,
                             state=state, checkpointing=checkpointing, feeds_model=feeds_model,
                             sharded=not (role == "train" and epoch is not None and cfg.data.repeats > 1))


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


def create_train_loader(cfg: LoaderConfig, d: Dist, accumulation: int, *, state: Any = None,
                        checkpointing: bool = False) -> SlotLoader:
    """The train loaders of process `d`'s slots (create_loader with each slot's view), from a checkpoint's `state`."""
    views = slot_views(d, accumulation)
    states = state["slots"] if accumulation > 1 and state is not None else [state] * len(views)
    loaders = [create_loader(cfg, "train", view, state=s, checkpointing=checkpointing) for view, s in zip(views, states)]
    return SlotLoader(loaders, [view.rank for view in views])
