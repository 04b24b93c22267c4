"""Three loaders behind one contract, so the training loop never knows which one feeds it.

A loader yields `(images, labels)` already on the training device: images float NCHW, labels
int64 N. A *train* epoch is exactly `steps_per_epoch` full batches on every rank (equal step
counts keep DDP's collectives in lock-step; fixed shapes keep BatchNorm and torch.compile
happy); an *eval* epoch covers this rank's shard exactly once (partial batches included).
"""
from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import torch

    from runner.dist import Dist


class Loader(Protocol):
    role: str                    # train | eval
    steps_per_epoch: int         # batches one epoch yields on this rank

    def epoch(self, start_batch: int = 0) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """One epoch's batches, from `start_batch` (after a resume)."""

    def state(self) -> Any:
        """Position to store in a checkpoint (picklable), taken between batches."""

    def close(self) -> None: ...


def create_loader(v, role: str, d: Dist, *, state: Any = None, checkpointing: bool = False,
                  feeds_model: bool = True) -> Loader | None:
    """The loader the experiment names, for `role` on this rank; None when there is no eval pipeline.
    `feeds_model`: False where nothing trains on the images (preview, loader-only timing), so a DALI pipeline
    may make any output, e.g. uint8 images before normalization."""
    cfg = v.config
    if cfg.data.loader == "dali":
        from runner.loaders.epochs import EpochLoader, epoch_key, epoch_view, scheduled

        if role == "train" and scheduled(cfg):  # a pipeline per epoch: its side, its file list
            def build(epoch: int, epoch_state: Any):
                return _dali_loader(epoch_view(v, epoch), role, d, epoch_state, checkpointing, feeds_model, epoch)
            return EpochLoader(build, lambda epoch: epoch_key(cfg, epoch), state)
        return _dali_loader(v, role, d, state, checkpointing, feeds_model)
    if cfg.data.loader == "torchvision":
        from runner.loaders.folder import FolderLoader

        return FolderLoader.create(v, role, d, state=state)
    from runner.loaders.synthetic import SyntheticLoader

    return SyntheticLoader.create(v, role, d)


def _dali_loader(v, role: str, d: Dist, state: Any, checkpointing: bool, feeds_model: bool,
                 epoch: int | None = None):
    from runner.loaders.dali import DaliLoader
    from runner.loaders.dali_plan import checked_pipelines

    cfg = v.config
    graphs = checked_pipelines(v.loaded, d, roles=(role,), epoch=epoch)
    if role not in graphs:
        return None
    return DaliLoader.create(cfg.data, cfg.pipelines, graphs, role, d, seed=cfg.seed, at=v.loaded.at,
                             state=state, checkpointing=checkpointing, feeds_model=feeds_model,
                             sharded=not (role == "train" and epoch is not None and cfg.data.repeats > 1))
