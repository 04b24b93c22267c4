"""Three loaders behind one contract, so the training loop never knows which one feeds it.

A loader yields `(images, labels)` already on the training device: images float NCHW, labels
int64 N. A *train* epoch is exactly `steps_per_epoch` full batches on every rank (equal step
counts keep DDP's collectives in lock-step; fixed shapes keep BatchNorm and torch.compile
happy); an *eval* epoch covers this rank's shard exactly once (partial batches included).
"""
from __future__ import annotations

from typing import Any, Iterator, Protocol

import torch


class Loader(Protocol):
    role: str                    # train | eval
    steps_per_epoch: int         # batches one epoch yields on this rank

    def epoch(self, start_batch: int = 0) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """One epoch's batches, from `start_batch` (after a resume)."""

    def state(self) -> Any:
        """Position to store in a checkpoint (picklable), taken between batches."""

    def close(self) -> None: ...


def create_loader(v, role: str, d, *, state: Any = None, checkpointing: bool = False) -> Loader | None:
    """The loader the experiment names, for `role` on this rank; None when there is no eval pipeline."""
    from runner.plan import Target

    kind = v.config.data.loader
    target = Target(accelerator="gpu" if d.device.type == "cuda" else "cpu", rank=d.rank, world=d.world,
                    local_rank=d.local_rank, local_world=d.local_world)
    if kind == "dali":
        from runner.loaders.dali import DaliLoader

        return DaliLoader.create(v, role, target, d.device, state=state, checkpointing=checkpointing)
    if kind == "torchvision":
        from runner.loaders.folder import FolderLoader

        return FolderLoader.create(v, role, target, d.device, state=state)
    from runner.loaders.synthetic import SyntheticLoader

    return SyntheticLoader.create(v, role, target, d.device)
