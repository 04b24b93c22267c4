"""Grids of what the model is fed: a loader's images with its own normalisation undone, each captioned by
its class names and their weights ("cat" or, for a mixed image, "cat 0.70 + dog 0.30").

`runner preview` draws them from a loader built as training builds it; every launch logs its first train
batch and its first eval batch the same way (BatchPreview), so both show the same grid for the same seed.
"""
from __future__ import annotations

import logging
import tempfile
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from runner.config.sections import HYBRID, DataConfig, PipelinesConfig
from runner.dist import Dist
from runner.errors import Locator
from runner.loaders.dali_plan import hybrid_batches
from runner.loaders.epochs import resolution_at
from runner.loaders.transforms import build_transforms
from runner.preview.grid import Denorm, captions, display_pixels, draw_grid, graph_denorm, png_bytes, transforms_denorm

if TYPE_CHECKING:
    import torch

log = logging.getLogger(__name__)

LAUNCH_IMAGES = 16                             # images of each batch a launch draws
ARTIFACT_DIR = "preview"                       # preview/train.png, preview/eval.png


@dataclass(frozen=True)
class GridSource:
    """What a grid says beside its images: the experiment's name and seed, the loader and its pipelines (whose
    normalisation is undone), the class names, and the train side on a resolution schedule."""
    name: str
    seed: int
    data: DataConfig
    pipelines: PipelinesConfig
    graphs: Mapping[str, Any]                  # role -> the checked graph (the DALI loader)
    classes: tuple[str, ...] | None            # label i's class name; None where labels name no class (synthetic)
    locate: Locator                            # where the torchvision transforms are written, for errors


# ---------------------------------------------------------------------------------------- normalisation


def batch_denorms(src: GridSource, pipeline: str) -> list[tuple[int | None, Denorm]]:
    """(images, Denorm) for each part of a batch of `pipeline` in order; None: the rest of the batch. A hybrid
    train batch is [written | copy], and the copy may normalise differently."""
    if src.data.loader == "synthetic":
        return [(None, Denorm(stretch=True, source="random tensors"))]
    if src.data.loader == "torchvision":
        train_tf, eval_tf = build_transforms(src.data.torchvision, src.locate)
        return [(None, transforms_denorm(train_tf if pipeline == "train" else eval_tf))]
    if pipeline == "train" and HYBRID in src.graphs:
        base, _ = hybrid_batches(src.data, src.pipelines.train.hybrid)
        return [(base, graph_denorm(src.graphs["train"])), (None, graph_denorm(src.graphs[HYBRID]))]
    return [(None, graph_denorm(src.graphs[pipeline]))]


# ------------------------------------------------------------------------------------------- captions

# ---------------------------------------------------------------------------------------------- drawing


def epoch_side(src: GridSource, pipeline: str, epoch: int) -> str | None:
    """'epoch 3: train side 48 px (pipelines.train.resolution)' for a train pipeline on a resolution schedule."""
    r = src.pipelines.train.resolution
    if r is None or not pipeline.startswith("train"):
        return None
    return f"epoch {epoch}: train side {resolution_at(r, epoch - 1)} px (pipelines.train.resolution)"


def grid_header(src: GridSource, pipeline: str, batch: int, parts: list[tuple[int | None, Denorm]],
                epoch: int = 1) -> tuple[str, str]:
    """(title, subtitle) of a grid: the experiment, the pipeline, its seed (and the epoch's side on a resolution
    schedule); the batch size and what was undone."""
    what = {"synthetic": "the synthetic loader", "torchvision": "torchvision transforms"}.get(src.data.loader)
    if what is None:
        what = f"pipeline {src.graphs[pipeline].graph.name}"
    title = f"{src.name}: {pipeline}, {what}, seed {src.seed}"
    side = epoch_side(src, pipeline, epoch)
    if side is not None:
        title += f"; {side.removesuffix(' (pipelines.train.resolution)')}"
    undone = "; ".join(dict.fromkeys(d.describe() for _, d in parts))
    return title, f"batches of {batch}; {undone}"


def render(src: GridSource, pipeline: str, pixels: np.ndarray, targets: torch.Tensor, batch: int,
           epoch: int = 1) -> bytes:
    """The PNG grid of images of `pipeline` (display_pixels of one batch, or of several), `batch` a batch's size."""
    title, subtitle = grid_header(src, pipeline, batch, batch_denorms(src, pipeline), epoch)
    return png_bytes(draw_grid(pixels, captions(targets, src.classes), title, subtitle))


# ------------------------------------------------------------------------------------------- the loaders


class BatchPreview:
    """A launch's first train batch and first eval batch as grids (preview/train.png, preview/eval.png): taken
    on rank 0, once each, from the batch the loop already holds (its first images copied to the CPU), and drawn
    and logged on a thread of their own so the loop does not wait; nothing where nothing is tracked."""

    def __init__(self, src: GridSource, tracker, d: Dist, *, enabled: bool = True):
        self.src, self.tracker = src, tracker
        tracked = getattr(tracker, "run_id", None) is not None  # a NullTracker (other ranks, tracking off) has none
        self.pending = {"train", "eval"} if enabled and d.main and tracked else set()
        self.threads: list[threading.Thread] = []

    def take(self, role: str, images: torch.Tensor, targets: torch.Tensor) -> None:
        """Log `role`'s grid from this batch the first time it is called for the role; after that, nothing."""
        if role not in self.pending:
            return
        self.pending.discard(role)
        batch = (images[:LAUNCH_IMAGES].detach().cpu(), targets[:LAUNCH_IMAGES].detach().cpu(), len(images))
        thread = threading.Thread(target=self._log, args=(role, *batch), name=f"preview-{role}", daemon=True)
        thread.start()
        self.threads.append(thread)

    def _log(self, role: str, images: torch.Tensor, targets: torch.Tensor, batch: int) -> None:
        try:
            png = render(self.src, role, display_pixels(images, batch_denorms(self.src, role)), targets, batch)
            with tempfile.TemporaryDirectory(prefix="runner-preview-") as tmp:
                path = Path(tmp) / f"{role}.png"
                path.write_bytes(png)
                self.tracker.log_artifact(path, ARTIFACT_DIR)  # copied now: the folder may go
        except Exception as e:  # a grid that cannot be drawn costs the run its picture, not its training
            log.warning("%s/%s.png not logged: %s: %s", ARTIFACT_DIR, role, type(e).__name__, e)

    def close(self) -> None:
        """Wait for the grids still being drawn, so that they reach the tracker before the run finishes."""
        for thread in self.threads:
            thread.join()
        self.threads = []
