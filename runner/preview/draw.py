"""`runner preview`: the first images a pipeline yields on rank 0, drawn from a loader built as training builds it."""
from __future__ import annotations

import numpy as np
import torch

from runner.augment.mix import Mixer
from runner.config.sections import HYBRID
from runner.dist import Dist
from runner.loaders.config import LoaderConfig
from runner.loaders.dali import DaliLoader
from runner.loaders.dali_plan import checked_pipelines
from runner.loaders.loader import create_loader
from runner.preview.batches import batch_denorms, render
from runner.preview.grid import display_pixels


def mixed_train_batch(mixer: Mixer | None, images: torch.Tensor, labels: torch.Tensor,
                      step: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The train batch as training mixes it (pipelines.train.mix) at optimizer step `step` on slot 0, for
    `runner preview --pipeline train`: (images, targets), targets the labels (N,) or, when mixed, the soft targets
    (N, C) that `captions` reads."""
    if mixer is None:
        return images, labels
    mixed = mixer(images, labels, slot=0, step=step)
    return mixed.images, mixed.targets


def preview_dist(target: Dist) -> Dist:
    """Rank 0 of the run `target` plans: its shard, its seeds, its device (the CPU without a GPU)."""
    return Dist(accelerator=target.accelerator, world=target.world, local_world=target.local_world)


def create_preview_loader(cfg: LoaderConfig, pipeline: str, d: Dist):
    """The loader training builds for `pipeline` on rank `d`; for HYBRID, the copy's pipeline alone."""
    if pipeline != HYBRID:
        return create_loader(cfg, pipeline, d, feeds_model=False)
    graphs = checked_pipelines(cfg, d, roles=("train",))
    return DaliLoader.create(cfg.data, cfg.pipelines, graphs, "train", d, seed=cfg.seed, at=cfg.at,
                             parts=(HYBRID,), feeds_model=False)


def preview_png(v, pipeline: str, n: int, epoch: int = 1) -> tuple[bytes, int]:
    """The first `n` images `pipeline` yields on rank 0 in `epoch` (from 1; fewer when the epoch has fewer), as a
    PNG grid; returns (png, images drawn)."""
    cfg, src = v.config, v.grids
    mixer = Mixer.create(cfg.pipelines.train.mix, num_classes=cfg.model.num_classes,
                         label_smoothing=cfg.trainer.label_smoothing, seed=cfg.seed) if pipeline == "train" else None
    loader = create_preview_loader(v.loaders, pipeline, preview_dist(v.target))
    if hasattr(loader, "set_epoch"):  # a train pipeline on a resolution schedule, or with repeats
        loader.set_epoch(epoch - 1)
    parts = batch_denorms(src, pipeline)
    pixels, targets, batch = [], [], 0
    try:
        for k, (x, y) in enumerate(loader.epoch()):
            x, y = mixed_train_batch(mixer, x, y, step=k)
            batch = batch or len(x)
            room = n - sum(map(len, pixels))
            pixels.append(display_pixels(x[:room], parts))  # per batch: a hybrid's parts repeat in each
            targets.append(y[:room].cpu())
            if room <= len(x):
                break
    finally:
        loader.close()
    drawn = np.concatenate(pixels)
    return render(src, pipeline, drawn, torch.cat(targets), batch, epoch), len(drawn)
