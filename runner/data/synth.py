"""A synthetic ImageNet-like dataset: ROOT/{train,val}/c0000/00000.jpg, deterministic and learnable.

Each class owns a colour palette and a stripe texture (orientation, frequency) that cover the whole
image, so a random resized crop or a horizontal flip keeps the class recognisable; nothing depends on
where in the image something is. Image sizes, JPEG quality and fine texture are set so that files look
like ImageNet's to a decoder: sides 400-640 px, quality 90, about 120 KiB each.

The set is written into a temporary sibling folder and renamed into place with its marker file
(`.runner-synth.json`) inside, so ROOT is either absent or complete; calling again with the same
arguments returns at once, which lets a launcher call it before every run.
"""
from __future__ import annotations

import fcntl
import json
import logging
import math
import os
import shutil
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
from PIL import Image

from runner.data.cache import settings_diff
from runner.data.paths import FORMAT
from runner.data.pool import Progress, map_in_pool, process_alive
from runner.errors import DataError

log = logging.getLogger(__name__)

SPLITS = ("train", "val")
MARKER = ".runner-synth.json"

# mid-frequency luma texture and per-pixel grain: at 400-640 px and quality 90 these give a mean of
# ~122 KiB per file (measured), in the 100-150 KiB of ImageNet's JPEGs; without them ~40 KiB
_TEXTURE_AMPLITUDE = 12.0
_GRAIN_STD = 10.0
_CLASS_STREAM = len(SPLITS)  # seed keys: [seed, split, class, index]; class traits use split id 2


@dataclass(frozen=True, kw_only=True)
class SynthSummary:
    """What generate_synthetic wrote (or found already there: reused=True)."""
    root: Path
    classes: int
    train_images: int
    val_images: int
    total_bytes: int
    seconds: float
    reused: bool = False

    @property
    def images(self) -> int:
        return self.train_images + self.val_images

    @property
    def mean_kib(self) -> float:
        return self.total_bytes / max(1, self.images) / 1024


def generate_synthetic(root: Path, *, classes: int, per_class: int, eval_per_class: int, min_side: int,
                       max_side: int, quality: int, seed: int = 0, workers: int | None = None,
                       progress: Progress | None = None) -> SynthSummary:
    """Write (or find) the synthetic ImageFolder set for these arguments under `root`.

    Raises DataError when `root` holds anything else: a set made with other arguments, or files
    runner did not write (nothing is ever deleted there).
    """
    root = Path(root)
    settings = dict(format=FORMAT, classes=classes, per_class=per_class, eval_per_class=eval_per_class,
                    min_side=min_side, max_side=max_side, quality=quality, seed=seed)
    _check_settings(settings)
    if _holds_something(root):
        return _existing(root, settings)
    root.parent.mkdir(parents=True, exist_ok=True)
    with _generation_lock(root):
        if _holds_something(root):  # made while this process waited for the lock
            return _existing(root, settings)
        _remove_stale_temporaries(root)
        tmp = root.parent / f".{root.name}.tmp-{socket.gethostname()}-{os.getpid()}"
        try:
            summary = _write_set(tmp, root, settings, workers=workers, progress=progress)
            (tmp / MARKER).write_text(json.dumps(_marker(settings, summary), indent=2) + "\n")
            return _move_into_place(tmp, root, settings, summary)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


@contextmanager
def _generation_lock(root: Path) -> Iterator[None]:
    """One generation per folder at a time: the ranks of a launch all call generate_synthetic; one
    writes, the others wait and then find the set. (Across nodes flock may not hold; the atomic
    rename still keeps the set whole.)"""
    path = root.parent / f".{root.name}.lock"
    with open(path, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            # safe to remove: whoever takes the lock next (on this file or a new one) checks for root again
            path.unlink(missing_ok=True)
            fcntl.flock(lock, fcntl.LOCK_UN)


def _check_settings(s: dict) -> None:
    for key in ("classes", "per_class", "eval_per_class", "min_side", "max_side"):
        if s[key] < 1:
            raise DataError(f"{key} must be at least 1 (got {s[key]}).", where="synthetic data")
    if s["seed"] < 0:
        raise DataError(f"seed must not be negative (got {s['seed']}).", where="synthetic data")
    if s["min_side"] > s["max_side"]:
        raise DataError(f"min_side ({s['min_side']}) is larger than max_side ({s['max_side']}).",
                        where="synthetic data")
    if not 1 <= s["quality"] <= 100:
        raise DataError(f"quality must be 1-100 (got {s['quality']}).", where="synthetic data")


def _holds_something(root: Path) -> bool:
    if root.is_dir():
        return any(root.iterdir())
    return root.exists() or root.is_symlink()


def _existing(root: Path, settings: dict) -> SynthSummary:
    """The summary of the complete set at `root` when it was made with `settings`; else DataError."""
    marker = root / MARKER
    if not root.is_dir() or not marker.is_file():
        what = "a file" if not root.is_dir() else f"a folder without {MARKER}"
        raise DataError(f"exists and is {what}, not a synthetic dataset made by runner. runner does not write "
                        "into (or delete) data it did not make: choose a new or empty folder, or remove this one.",
                        file=root)
    try:
        recorded = json.loads(marker.read_text())
        old = dict(recorded["settings"])
        summary = SynthSummary(root=root, reused=True, **recorded["summary"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise DataError(f"cannot read this marker ({type(e).__name__}: {e}); remove the folder to generate "
                        "the set again.", file=marker) from None
    if old != settings:
        raise DataError(f"holds a synthetic dataset made with other settings: {settings_diff(old, settings)}. Remove it or choose "
                        "another folder (data.synth.dir keeps one folder per setting).", file=root)
    return summary


def _remove_stale_temporaries(root: Path) -> None:
    """Temporary folders this host left behind when a generation was killed (the process is gone)."""
    prefix = f".{root.name}.tmp-{socket.gethostname()}-"
    for path in root.parent.glob(f"{prefix}*"):
        pid = path.name[len(prefix):]
        if pid.isdigit() and not process_alive(int(pid)):
            log.info("removing %s, left by an interrupted generation", path)
            shutil.rmtree(path, ignore_errors=True)


def _move_into_place(tmp: Path, root: Path, settings: dict, summary: SynthSummary) -> SynthSummary:
    try:
        os.rename(tmp, root)  # atomic; also replaces an empty folder
    except OSError:
        # another process (a second rank, a second launch) finished first: use its set if it matches
        if _holds_something(root):
            return _existing(root, settings)
        raise
    return summary


def _write_set(tmp: Path, root: Path, settings: dict, *, workers: int | None,
               progress: Progress | None) -> SynthSummary:
    shutil.rmtree(tmp, ignore_errors=True)
    classes = settings["classes"]
    class_width = max(4, len(str(classes - 1)))
    tasks = []
    for split_id, (split, count) in enumerate(zip(SPLITS, (settings["per_class"], settings["eval_per_class"]))):
        file_width = max(5, len(str(count - 1)))
        for c in range(classes):
            folder = tmp / split / f"c{c:0{class_width}d}"
            folder.mkdir(parents=True)
            tasks += [_ImageTask(path=str(folder / f"{i:0{file_width}d}.jpg"), seed=settings["seed"],
                                 split=split_id, label=c, index=i, min_side=settings["min_side"],
                                 max_side=settings["max_side"], quality=settings["quality"])
                      for i in range(count)]
    start = time.perf_counter()
    sizes = map_in_pool(_write_image, tasks, workers=workers, progress=progress)
    seconds = time.perf_counter() - start
    log.info("generated %d images in %.1f s", len(tasks), seconds)
    return SynthSummary(root=root, classes=classes, train_images=classes * settings["per_class"],
                        val_images=classes * settings["eval_per_class"], total_bytes=sum(sizes),
                        seconds=round(seconds, 3))


def _marker(settings: dict, summary: SynthSummary) -> dict:
    fields = asdict(summary)
    for key in ("root", "reused"):
        fields.pop(key)
    return {"made_by": "runner data synth", "settings": settings, "summary": fields}


# ---- one image ---------------------------------------------------------------------------------

@dataclass(frozen=True, kw_only=True)
class _ImageTask:
    path: str
    seed: int
    split: int
    label: int
    index: int
    min_side: int
    max_side: int
    quality: int


def _write_image(task: _ImageTask) -> int:
    image = render_image(task.seed, task.split, task.label, task.index, task.min_side, task.max_side)
    image.save(task.path, format="JPEG", quality=task.quality)
    return os.path.getsize(task.path)


def class_traits(seed: int, label: int) -> tuple[np.ndarray, float, float]:
    """(3 RGB colours, stripe angle in [0, pi/2), stripe frequency in cycles per pixel) of a class.

    Angles stay in one quadrant so that a horizontal flip (angle -> pi - angle) never turns one class's
    stripes into another's.
    """
    rng = np.random.default_rng([seed, _CLASS_STREAM, label, 0])
    palette = rng.uniform(20, 235, (3, 3)).astype(np.float32)
    return palette, float(rng.uniform(0, math.pi / 2)), float(rng.uniform(0.02, 0.12))


def render_image(seed: int, split: int, label: int, index: int, min_side: int, max_side: int) -> Image.Image:
    """One RGB image of class `label`; the same arguments give the same pixels."""
    palette, angle, freq = class_traits(seed, label)
    rng = np.random.default_rng([seed, split, label, index])
    w, h = (int(v) for v in rng.integers(min_side, max_side + 1, size=2))
    angle += float(rng.normal(0, 0.12))
    k = 2 * math.pi * freq * float(rng.uniform(0.8, 1.25))
    x, y = np.arange(w, dtype=np.float32), np.arange(h, dtype=np.float32)
    phase = (k * math.cos(angle) * x)[None, :] + (k * math.sin(angle) * y + float(rng.uniform(0, 2 * math.pi)))[:, None]
    phase += 1.5 * _smooth_noise(rng, h, w, cell=48)            # wavy, not ruled, stripes
    stripes = np.sin(phase)
    stripes += 1
    stripes *= 0.3                                              # weight of colour 2, 0-0.6
    mix = _smooth_noise(rng, h, w, cell=96)                     # large patches of colour 0 vs 1
    mix *= 0.35
    mix += 0.5
    np.clip(mix, 0, 1, out=mix)
    colours = palette + rng.normal(0, 10, (3, 3)).astype(np.float32)
    luma = _smooth_noise(rng, h, w, cell=3)
    luma *= _TEXTURE_AMPLITUDE
    grain = rng.random((h, w), dtype=np.float32)
    grain -= 0.5
    grain *= _GRAIN_STD * math.sqrt(12)                         # uniform noise with this std
    luma += grain
    pixels = np.empty((h, w, 3), np.float32)
    for ch in range(3):                                         # per channel: 3x less temporary memory
        base = mix * (colours[1, ch] - colours[0, ch])
        base += colours[0, ch]
        base += stripes * (colours[2, ch] - base)
        base += luma
        pixels[..., ch] = base
    np.clip(pixels, 0, 255, out=pixels)
    return Image.fromarray(pixels.astype(np.uint8))


def _smooth_noise(rng: np.random.Generator, h: int, w: int, *, cell: int) -> np.ndarray:
    """Gaussian noise on a grid of `cell`-pixel squares, bicubically upsampled to h x w (float32)."""
    grid = rng.standard_normal((max(2, h // cell), max(2, w // cell)), dtype=np.float32)
    return np.array(Image.fromarray(grid).resize((w, h), Image.Resampling.BICUBIC))
