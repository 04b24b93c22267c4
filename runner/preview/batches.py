"""Grids of what the model is fed: a loader's images with its own normalisation undone, each captioned by
its class names and their weights ("cat" or, for a mixed image, "cat 0.70 + dog 0.30").

`runner preview` draws them from a loader built as training builds it; every launch logs its first train
batch and its first eval batch the same way (BatchPreview), so both show the same grid for the same seed.
"""
from __future__ import annotations

import io
import logging
import math
import tempfile
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import torch
    from PIL import Image

    from runner.dist import Dist

log = logging.getLogger(__name__)

PIPELINES = ("train", "eval", "train.hybrid")  # runner preview --pipeline; the last is dali_plan.HYBRID
LAUNCH_IMAGES = 16                             # images of each batch a launch draws
ARTIFACT_DIR = "preview"                       # preview/train.png, preview/eval.png

Caption = list[tuple[str, float]]              # (class name, weight) per label an image carries


# ---------------------------------------------------------------------------------------- normalisation

NORMALIZING_OPS = {"crop_mirror_normalize": ("mean", "std"), "normalize": ("mean", "stddev")}


@dataclass(frozen=True)
class Denorm:
    """How a pipeline's output maps back to its input: out = scale * (in - mean) / std + shift (DALI's
    crop_mirror_normalize and normalize, torchvision's Normalize with scale 1 and shift 0)."""
    mean: tuple[float, ...] = (0.0,)
    std: tuple[float, ...] = (1.0,)
    scale: float = 1.0
    shift: float = 0.0
    stretch: bool = False   # the values have no fixed scale (random tensors, per-sample statistics)
    source: str = ""        # where mean and std were read, for the grid's header

    def describe(self) -> str:
        if self.stretch:
            return f"{self.source}: each image shown over its own value range"
        if not self.source:
            return "no normalisation step"
        extra = (f", scale {self.scale:g}" if self.scale != 1 else "") + (f", shift {self.shift:g}" if self.shift else "")
        return f"{self.source} undone (mean {_numbers(self.mean)}, std {_numbers(self.std)}{extra})"

    def invert(self, x: np.ndarray) -> np.ndarray:
        """NHWC pipeline output -> the normalising step's input values."""
        channels = x.shape[-1]
        mean, std = _per_channel(self.mean, channels), _per_channel(self.std, channels)
        return (x - np.float32(self.shift)) / np.float32(self.scale) * std + mean


def _numbers(values: tuple[float, ...]) -> str:
    return " ".join(f"{v:.4g}" for v in values)


def _per_channel(values: tuple[float, ...], channels: int) -> np.ndarray:
    v = np.asarray(values, dtype=np.float32)
    return v if v.size in (1, channels) else np.resize(v, channels)


def graph_denorm(checked) -> Denorm:
    """The normalisation of a checked DALI graph's image output: the crop_mirror_normalize or normalize step
    that makes it (followed back through steps that only move it, such as a transpose), its mean and std as
    written (DALI's are in the input's units: 0-255 for decoded images)."""
    from runner.dsl.checked import Lit, OpNode, Stream

    wanted = checked.outputs[0].name
    for s in reversed(checked.steps):
        if wanted not in s.step.targets:
            continue
        node = s.node
        if not isinstance(node, OpNode):
            return Denorm()  # arithmetic on the stream: its values are shown as they are
        if node.op.name not in NORMALIZING_OPS:
            first = node.inputs[0] if node.inputs else None
            if not isinstance(first, Stream):
                return Denorm()
            wanted = first.name
            continue
        mean_key, std_key = NORMALIZING_OPS[node.op.name]
        kwargs = dict(node.kwargs)
        source = f"{node.op.name} (step {s.step.index})"
        if node.op.name == "normalize" and not (mean_key in kwargs and std_key in kwargs):
            return Denorm(stretch=True, source=f"{source}, with statistics of each batch")
        values = {}
        for key, default in ((mean_key, 0.0), (std_key, 1.0), ("scale", 1.0), ("shift", 0.0)):
            arg = kwargs.get(key)
            if arg is not None and not isinstance(arg, Lit):
                return Denorm(stretch=True, source=f"{source}, with {key} drawn per sample")
            values[key] = default if arg is None else arg.value
        return Denorm(mean=_tuple(values[mean_key]), std=_tuple(values[std_key]), scale=float(values["scale"]),
                      shift=float(values["shift"]), source=source)
    return Denorm()


def _tuple(value) -> tuple[float, ...]:
    return tuple(float(v) for v in value) if isinstance(value, list | tuple) else (float(value),)


def transforms_denorm(compose) -> Denorm:
    """The last torchvision Normalize of a Compose (its mean and std are in ToTensor's 0-1 units)."""
    import torchvision.transforms as T

    found = [t for t in compose.transforms if isinstance(t, T.Normalize)]
    if not found:
        return Denorm()
    t = found[-1]
    return Denorm(mean=_tuple(list(t.mean)), std=_tuple(list(t.std)), source="Normalize")


def batch_denorms(v, pipeline: str) -> list[tuple[int | None, Denorm]]:
    """(images, Denorm) for each part of a batch of `pipeline` in order; None: the rest of the batch. A hybrid
    train batch is [written | copy], and the copy may normalise differently."""
    from runner.loaders.dali_plan import HYBRID, hybrid_batches

    cfg = v.config
    if cfg.data.loader == "synthetic":
        return [(None, Denorm(stretch=True, source="random tensors"))]
    if cfg.data.loader == "torchvision":
        from runner.loaders.transforms import build_transforms

        train_tf, eval_tf = build_transforms(cfg.data.torchvision, v.loaded.locate)
        return [(None, transforms_denorm(train_tf if pipeline == "train" else eval_tf))]
    if pipeline == "train" and HYBRID in v.graphs:
        base, _ = hybrid_batches(cfg.data, cfg.pipelines.train.hybrid)
        return [(base, graph_denorm(v.graphs["train"])), (None, graph_denorm(v.graphs[HYBRID]))]
    return [(None, graph_denorm(v.graphs[pipeline]))]


def display_pixels(images: torch.Tensor, parts: list[tuple[int | None, Denorm]]) -> np.ndarray:
    """A batch as the loader yields it (NCHW, or NHWC) -> uint8 NHWC RGB, its normalisation undone. Values
    are read as 0-255 when the tensor is uint8 or any exceeds 1.5 (DALI's decoded range), else as 0-1
    (torchvision's ToTensor)."""
    x = images.detach().float().cpu().numpy()
    if x.ndim == 3:
        x = x[:, None]
    if not (x.shape[-1] in (1, 3, 4) and x.shape[1] not in (1, 3, 4)):
        x = x.transpose(0, 2, 3, 1)  # the loaders' contract is NCHW; an HWC pipeline output is read as is
    out, start = [], 0
    for count, denorm in parts:
        end = len(x) if count is None else min(len(x), start + count)
        part = x[start:end]
        start = end
        if not len(part):
            continue
        if denorm.stretch:
            low = part.min(axis=(1, 2, 3), keepdims=True)
            high = part.max(axis=(1, 2, 3), keepdims=True)
            out.append((part - low) / np.maximum(high - low, 1e-6))
            continue
        values = denorm.invert(part)
        wide = not images.dtype.is_floating_point or values.max(initial=0.0) > 1.5
        out.append(values / 255.0 if wide else values)
    pixels = np.clip(np.concatenate(out), 0.0, 1.0)
    pixels = pixels[..., :3] if pixels.shape[-1] >= 3 else np.repeat(pixels[..., :1], 3, axis=-1)
    return np.rint(pixels * 255).astype(np.uint8)


# ------------------------------------------------------------------------------------------- captions

def class_names(v) -> tuple[str, ...] | None:
    """Label i's class name (the train split's label map), or None where labels name no class (synthetic)."""
    return v.labels.classes if v.labels is not None else None


def captions(targets: torch.Tensor, names: Sequence[str] | None, most: int = 2) -> list[Caption]:
    """Per image, its classes and weights, heaviest first: from labels (N,) each image one class of weight 1;
    from soft targets (N, C), as batch mixing makes them, the classes at least 0.01 above the row's floor (label
    smoothing's share of every class), at most `most`."""
    t = targets.detach().cpu()

    def name(i: int) -> str:
        return names[i] if names is not None and i < len(names) else f"label {i}"

    if t.ndim == 1:
        return [[(name(int(i)), 1.0)] for i in t.tolist()]
    out = []
    for row in t.float().tolist():
        order = sorted(range(len(row)), key=lambda i: -row[i])[:most]
        floor = min(row)
        out.append([(name(i), row[i]) for i in order if row[i] >= floor + 0.01] or [(name(order[0]), row[order[0]])])
    return out


def mixed_train_batch(v, images: torch.Tensor, labels: torch.Tensor, step: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The train batch as training mixes it (pipelines.train.mix) at optimizer step `step` on slot 0, for
    `runner preview --pipeline train`: (images, targets), targets the labels (N,) or, when mixed, the soft targets
    (N, C) that `captions` reads."""
    from runner.augment.mix import Mixer

    mixer = Mixer.for_experiment(v.config)
    if mixer is None:
        return images, labels
    mixed = mixer(images, labels, slot=0, step=step)
    return mixed.images, mixed.targets


# ---------------------------------------------------------------------------------------------- drawing

MIN_CELL = 160     # px: small crops are enlarged (nearest neighbour, whole multiples) to at least this
PAD = 8
FONT = 14
TITLE_FONT = 16
INK, GREY, PAPER = (20, 20, 20), (90, 90, 90), (255, 255, 255)


def _font(size: int):
    from PIL import ImageFont

    return ImageFont.load_default(size=size)  # Pillow's bundled font: the same pixels on every machine


def _fit(text: str, font, width: int) -> str:
    """`text`, cut with an ellipsis where it is wider than `width` px."""
    if font.getlength(text) <= width:
        return text
    while text and font.getlength(text + "…") > width:
        text = text[:-1]
    return text + "…"


def _wrap(text: str, font, width: int) -> list[str]:
    lines, line = [], ""
    for word in text.split():
        trial = f"{line} {word}" if line else word
        if line and font.getlength(trial) > width:
            lines.append(line)
            line = word
        else:
            line = trial
    return [_fit(t, font, width) for t in lines + [line] if t]


def caption_lines(caption: Caption, font, width: int) -> list[str]:
    """'cat' for one class of weight 1; 'cat 0.70 + dog 0.30' on one line when it fits, else a line each
    (a long name is cut, never its weight)."""
    if len(caption) == 1 and caption[0][1] >= 0.995:
        return [_fit(caption[0][0], font, width)]
    joined = " + ".join(f"{name} {weight:.2f}" for name, weight in caption)
    if font.getlength(joined) <= width:
        return [joined]
    lines = []
    for i, (name, weight) in enumerate(caption):
        head, tail = ("+ " if i else ""), f" {weight:.2f}"
        lines.append(head + _fit(name, font, int(width - font.getlength(head + tail))) + tail)
    return lines


def draw_grid(pixels: np.ndarray, caps: Sequence[Caption], title: str, subtitle: str = "") -> Image.Image:
    """uint8 NHWC RGB images in a near-square grid, each over its caption, under a header."""
    from PIL import Image, ImageDraw

    n, h, w = pixels.shape[:3]
    k = max(1, math.ceil(MIN_CELL / max(h, w)))
    cw, ch = w * k, h * k
    cols = math.ceil(math.sqrt(n))
    rows = math.ceil(n / cols)
    font, title_font, small = _font(FONT), _font(TITLE_FONT), _font(FONT - 1)
    lines = [caption_lines(c, font, cw) for c in caps]
    line_h = FONT + 4
    cap_h = max(len(t) for t in lines) * line_h + 4
    width = cols * cw + (cols + 1) * PAD
    head = _wrap(title, title_font, width - 2 * PAD)
    sub = _wrap(subtitle, small, width - 2 * PAD)
    head_h = PAD + len(head) * (TITLE_FONT + 5) + len(sub) * (FONT + 3) + PAD
    grid = Image.new("RGB", (width, head_h + rows * (ch + cap_h + PAD)), PAPER)
    draw = ImageDraw.Draw(grid)
    y = PAD
    for text in head:
        draw.text((PAD, y), text, fill=INK, font=title_font)
        y += TITLE_FONT + 5
    for text in sub:
        draw.text((PAD, y), text, fill=GREY, font=small)
        y += FONT + 3
    for i in range(n):
        r, c = divmod(i, cols)
        x0, y0 = PAD + c * (cw + PAD), head_h + r * (ch + cap_h + PAD)
        tile = Image.fromarray(pixels[i])
        grid.paste(tile.resize((cw, ch), Image.NEAREST) if k > 1 else tile, (x0, y0))
        for j, text in enumerate(lines[i]):
            draw.text((x0, y0 + ch + 2 + j * line_h), text, fill=INK, font=font)
    return grid


def png_bytes(image: Image.Image) -> bytes:
    buf = io.BytesIO()
    image.save(buf, format="PNG")  # Pillow writes no time stamp: the same grid gives the same bytes
    return buf.getvalue()


def epoch_side(v, pipeline: str, epoch: int) -> str | None:
    """'epoch 3: train side 48 px (pipelines.train.resolution)' for a train pipeline on a resolution schedule."""
    from runner.loaders.epochs import resolution_at

    r = v.config.pipelines.train.resolution
    if r is None or not pipeline.startswith("train"):
        return None
    return f"epoch {epoch}: train side {resolution_at(r, epoch - 1)} px (pipelines.train.resolution)"


def grid_header(v, pipeline: str, batch: int, parts: list[tuple[int | None, Denorm]],
                epoch: int = 1) -> tuple[str, str]:
    """(title, subtitle) of a grid: the experiment, the pipeline, its seed (and the epoch's side on a resolution
    schedule); the batch size and what was undone."""
    cfg = v.config
    what = {"synthetic": "the synthetic loader", "torchvision": "torchvision transforms"}.get(cfg.data.loader)
    if what is None:
        what = f"pipeline {v.graphs[pipeline].graph.name}"
    title = f"{cfg.name}: {pipeline}, {what}, seed {cfg.seed}"
    side = epoch_side(v, pipeline, epoch)
    if side is not None:
        title += f"; {side.removesuffix(' (pipelines.train.resolution)')}"
    undone = "; ".join(dict.fromkeys(d.describe() for _, d in parts))
    return title, f"batches of {batch}; {undone}"


def render(v, pipeline: str, pixels: np.ndarray, targets: torch.Tensor, batch: int, epoch: int = 1) -> bytes:
    """The PNG grid of images of `pipeline` (display_pixels of one batch, or of several), `batch` a batch's size."""
    title, subtitle = grid_header(v, pipeline, batch, batch_denorms(v, pipeline), epoch)
    return png_bytes(draw_grid(pixels, captions(targets, class_names(v)), title, subtitle))


# ------------------------------------------------------------------------------------------- the loaders

def preview_dist(v) -> Dist:
    """Rank 0 of the run the experiment plans: its shard, its seeds, its device (the CPU without a GPU)."""
    from runner.dist import Dist

    t = v.target
    return Dist(accelerator=t.accelerator, world=t.world, local_world=t.local_world)


def create_preview_loader(v, pipeline: str, d: Dist):
    """The loader training builds for `pipeline` on rank `d`; for HYBRID, the copy's pipeline alone."""
    from runner.loaders import create_loader
    from runner.loaders.dali_plan import HYBRID

    if pipeline != HYBRID:
        return create_loader(v, pipeline, d, feeds_model=False)
    from runner.loaders.dali import DaliLoader
    from runner.loaders.dali_plan import checked_pipelines

    cfg = v.config
    graphs = checked_pipelines(v.loaded, d, roles=("train",))
    return DaliLoader.create(cfg.data, cfg.pipelines, graphs, "train", d, seed=cfg.seed, at=v.loaded.at,
                             parts=(HYBRID,), feeds_model=False)


def preview_png(v, pipeline: str, n: int, epoch: int = 1) -> tuple[bytes, int]:
    """The first `n` images `pipeline` yields on rank 0 in `epoch` (from 1; fewer when the epoch has fewer), as a
    PNG grid; returns (png, images drawn)."""
    import torch

    loader = create_preview_loader(v, pipeline, preview_dist(v))
    if hasattr(loader, "set_epoch"):  # a train pipeline on a resolution schedule, or with repeats
        loader.set_epoch(epoch - 1)
    parts = batch_denorms(v, pipeline)
    pixels, targets, batch = [], [], 0
    try:
        for k, (x, y) in enumerate(loader.epoch()):
            if pipeline == "train":
                x, y = mixed_train_batch(v, x, y, step=k)
            batch = batch or len(x)
            room = n - sum(map(len, pixels))
            pixels.append(display_pixels(x[:room], parts))  # per batch: a hybrid's parts repeat in each
            targets.append(y[:room].cpu())
            if room <= len(x):
                break
    finally:
        loader.close()
    drawn = np.concatenate(pixels)
    return render(v, pipeline, drawn, torch.cat(targets), batch, epoch), len(drawn)


class BatchPreview:
    """A launch's first train batch and first eval batch as grids (preview/train.png, preview/eval.png): taken
    on rank 0, once each, from the batch the loop already holds (its first images copied to the CPU), and drawn
    and logged on a thread of their own so the loop does not wait; nothing where nothing is tracked."""

    def __init__(self, v, tracker, d: Dist, *, enabled: bool = True):
        self.v, self.tracker = v, tracker
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
            png = render(self.v, role, display_pixels(images, batch_denorms(self.v, role)), targets, batch)
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
