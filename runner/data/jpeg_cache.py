"""A compact JPEG cache of an ImageFolder: every image re-encoded once as a smaller JPEG.

FFCV's answer to JPEG decode cost: store the images at the size training reads them. DST is an
ImageFolder again (class folders mirrored, and split folders when SRC holds splits), so the shipped
JPEG pipelines read it as they read SRC (`data.root=DST`). Each image is shrunk with Pillow so that its
longer side is at most `max_side` (never enlarged) and written as a baseline RGB JPEG at `quality`
with the chroma subsampling and filter chosen in docs/benchmarks.md ("The compact JPEG cache").

- EXIF orientation is applied to the pixels and no EXIF is written: DALI's decoder applies the tag
  (checked with decoders.image on a rotated JPEG), so the cache decodes as the original does.
- Greyscale, CMYK, PNG, ... sources become RGB JPEGs (DALI decodes them to RGB with output_type=RGB), 16-bit
  and float samples scaled to 8 bits as DALI's decoder scales them (runner/data/pixels.py).
- An RGB JPEG already within `max_side` and without a rotation is copied byte for byte: its decoded
  pixels stay the original's, and re-encoding it would cost fidelity for few bytes (measured there).
- A name ending in .jpg/.jpeg keeps its name; any other gets ".jpg" appended (`a.png` -> `a.png.jpg`).

Resumable as the decoded cache is (runner/data/cache.py): files are written under a temporary name and
renamed, a rerun keeps each file that is whole, newer than its source and of the size its source gives,
and the marker `DST/.runner-cache.json` (the manifest) holds the settings from the start and, once
complete, the source's fingerprint, counts and bytes. Files that do not decode are left out and
listed in `DST/.runner-bad-files.txt`.
"""
from __future__ import annotations

import logging
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from PIL import Image, ImageOps, features

from runner.data.cache import (
    MARKER,
    CacheSummary,
    cached_size,
    check_outside_source,
    claim_cache,
    find_splits,
    stale_entries,
    temporary_path,
    write_cache_skip_list,
    write_json_atomic,
)
from runner.data.pixels import dali_refuses, rgb_as_dali
from runner.data.pool import Progress, map_in_pool
from runner.data.scan import FileIssue, fingerprint, scan_image_folder, setup_decoder, try_decode
from runner.errors import DataError, display_path

log = logging.getLogger(__name__)

FORMAT = "jpeg"
# bump when the encoded files change (copy rule, orientation, ...), so an older cache is not resumed;
# 2: 16-bit and float sources scaled to 8 bits as DALI scales them (runner/data/pixels.py)
VERSION = 2
# the choice measured in docs/benchmarks.md ("The compact JPEG cache")
FILTERS = {"lanczos": Image.Resampling.LANCZOS, "bicubic": Image.Resampling.BICUBIC,
           "bilinear": Image.Resampling.BILINEAR}
SUBSAMPLING = {"4:4:4": 0, "4:2:2": 1, "4:2:0": 2}
DEFAULT_FILTER, DEFAULT_SUBSAMPLING = "lanczos", "4:2:0"
_JPEG_NAMES = (".jpg", ".jpeg")
_ORIENTATION = 0x0112


@dataclass(frozen=True, kw_only=True)
class JpegCacheSummary(CacheSummary):
    """CacheSummary's counts, plus how many images were copied whole and the settings of the manifest."""
    quality: int
    copied: int                       # of the cached images, source files copied byte for byte
    settings: dict


def encoder_versions() -> dict[str, str]:
    """The encoder that writes the files: Pillow and its libjpeg(-turbo)."""
    turbo = features.version_feature("libjpeg_turbo")
    libjpeg = f"libjpeg-turbo {turbo}" if turbo else f"libjpeg {features.version('jpg')}"
    return {"pillow": Image.__version__, "libjpeg": libjpeg}


def jpeg_settings(max_side: int, quality: int, filter: str = DEFAULT_FILTER,
                  subsampling: str = DEFAULT_SUBSAMPLING) -> dict:
    """The manifest's settings (a rerun must match them all); DataError for values out of range."""
    if not isinstance(max_side, int) or max_side < 16:
        raise DataError(f"{max_side} is too small: the longer side of a cached image is at least 16 px (FFCV's "
                        "ImageNet caches use 256-512; 320 fed a compiled ResNet-50 at 99% of its ceiling).",
                        where="--max-side")
    if not isinstance(quality, int) or not 1 <= quality <= 100:
        raise DataError(f"{quality} is not a JPEG quality: give 1-100 (90 is the measured default; above 95 "
                        "Pillow's files grow fast for little fidelity).", where="--quality")
    if filter not in FILTERS:
        raise DataError(f"unknown filter '{filter}'; one of {', '.join(FILTERS)}.", where="filter")
    if subsampling not in SUBSAMPLING:
        raise DataError(f"unknown chroma subsampling '{subsampling}'; one of {', '.join(SUBSAMPLING)}.",
                        where="subsampling")
    return {"format": FORMAT, "version": VERSION, "max_side": max_side, "quality": quality, "filter": filter,
            "subsampling": subsampling, "small_jpegs": "copied", **encoder_versions()}


def cached_name(name: str) -> str:
    """The file name of an image in the cache: JPEG names kept, others with '.jpg' appended."""
    return name if name.lower().endswith(_JPEG_NAMES) else name + ".jpg"


def build_jpeg_cache(src: Path, dst: Path, *, max_side: int = 320, quality: int = 90, filter: str = DEFAULT_FILTER,
                     subsampling: str = DEFAULT_SUBSAMPLING, workers: int | None = None,
                     progress: Progress | None = None) -> JpegCacheSummary:
    """Re-encode every image the reader would read under SRC into DST (see the module docstring).

    Raises DataError for settings out of range, when SRC is not an ImageFolder (or a folder of splits),
    when DST holds files runner did not write, or a cache made with other settings.
    """
    src, dst = Path(src), Path(dst)
    settings = jpeg_settings(max_side, quality, filter, subsampling)
    splits = find_splits(src)
    scans = [scan_image_folder(src / split) for split in splits]  # before DST is touched: SRC's mistakes first
    check_outside_source(src, dst)
    tasks, names = _tasks(src, dst, splits, scans, settings)
    claim_cache(dst, settings, src)
    start = time.perf_counter()
    for split, scan in zip(splits, scans):
        for cls in scan.classes:
            (dst / split / cls).mkdir(parents=True, exist_ok=True)  # every class, so labels match
    try:
        outcomes = map_in_pool(_encode_one, tasks, workers=workers, progress=progress, initializer=setup_decoder)
    except OSError as e:  # writing, not reading: unreadable sources are skipped, not raised
        raise DataError(f"cannot write the cache ({e.strerror or e}"
                        + (f": {display_path(Path(e.filename))}" if e.filename else "")
                        + "). Free space or choose another folder; a rerun keeps what is written.", file=dst) from None
    summary = _summarise(src, dst, settings, splits, len(scans[0].classes), tasks, names, outcomes,
                         time.perf_counter() - start)
    write_cache_skip_list(summary)
    write_json_atomic(dst / MARKER, _manifest(settings, src, splits, summary))
    log.info("cached %d images as JPEG (%d written) in %.1f s", summary.images, summary.written, summary.seconds)
    return summary


def _tasks(src: Path, dst: Path, splits: list[str], scans, settings: dict) -> tuple[list[_Task], list[str]]:
    tasks, names, taken = [], [], {}
    for split, scan in zip(splits, scans):
        for path, _ in scan.files:
            rel = f"{split}/{path}" if split else path
            folder, _, name = rel.rpartition("/")
            out = f"{folder}/{cached_name(name)}"
            key = out if os.name != "nt" else out.lower()
            if key in taken:
                raise DataError(f"'{taken[key]}' and '{rel}' would both be cached as '{out}' (names not ending in "
                                ".jpg get '.jpg' appended). Rename one of them.", file=src)
            taken[key] = rel
            tasks.append(_Task(src=str(src / rel), dst=str(dst / out), max_side=settings["max_side"],
                               quality=settings["quality"], filter=settings["filter"],
                               subsampling=settings["subsampling"]))
            names.append(rel)
    return tasks, names


def _summarise(src: Path, dst: Path, settings: dict, splits: list[str], classes: int, tasks: list[_Task],
               names: list[str], outcomes: list[_Outcome], seconds: float) -> JpegCacheSummary:
    counts = dict.fromkeys(splits, 0)
    skipped, cached = [], set()
    for task, name, o in zip(tasks, names, outcomes):
        if o.status == "skipped":
            skipped.append(FileIssue(name, o.reason or "does not decode"))
        else:
            counts[name.split("/", 1)[0] if splits != [""] else ""] += 1
            cached.add(str(Path(task.dst).relative_to(dst)).replace(os.sep, "/"))
    good = [o for o in outcomes if o.status != "skipped"]
    return JpegCacheSummary(
        root=dst, source=src, max_side=settings["max_side"], quality=settings["quality"], settings=settings,
        splits=counts, classes=classes, written=sum(o.status == "written" for o in good),
        kept=sum(o.status == "kept" for o in good), copied=sum(o.copied for o in good),
        jpeg_bytes=sum(o.jpeg_bytes for o in good), cache_bytes=sum(o.cache_bytes for o in good),
        seconds=round(seconds, 3), skipped=tuple(skipped),
        stale=stale_entries(dst, splits, cached, names, suffixes=None))


def _manifest(settings: dict, src: Path, splits: list[str], s: JpegCacheSummary) -> dict:
    return {"made_by": "runner data cache", "settings": settings, "source": str(src.resolve()), "complete": True,
            "source_fingerprint": {split: fingerprint(src / split) for split in splits},
            "summary": {"splits": s.splits, "classes": s.classes, "images": s.images, "written": s.written,
                        "kept": s.kept, "copied": s.copied, "bytes_in": s.jpeg_bytes, "bytes_out": s.cache_bytes,
                        "ratio": round(s.ratio, 4), "seconds": s.seconds,
                        "skipped": [list(issue) for issue in s.skipped], "stale": list(s.stale)}}


def median_longer_side(split_dir: Path, sample: int = 64) -> int | None:
    """The median longer side of up to `sample` images spread over the split (headers only); None if none reads."""
    try:
        files = scan_image_folder(split_dir).files
    except DataError:
        return None
    sides = []
    for path, _ in files[:: max(1, len(files) // sample)][:sample]:
        try:
            with Image.open(Path(split_dir) / path) as image:
                sides.append(max(image.size))
        except Exception:  # noqa: BLE001 - an unreadable file says nothing about the others
            continue
    return sorted(sides)[len(sides) // 2] if sides else None


# ---- one image (in a pool worker) ----------------------------------------------------------------

@dataclass(frozen=True)
class _Task:
    src: str
    dst: str
    max_side: int
    quality: int
    filter: str
    subsampling: str


class _Outcome(NamedTuple):
    status: str              # written | kept | skipped
    reason: str | None = None
    jpeg_bytes: int = 0
    cache_bytes: int = 0
    copied: bool = False


class _Plan(NamedTuple):
    copy: bool               # the source file is the cached file
    size: tuple[int, int]    # (width, height) of the cached image


def _plan(path: str, max_side: int) -> _Plan | None:
    """What the cache holds for this source (from its header); None for a format DALI's decoder does not read."""
    with Image.open(path) as image:
        if dali_refuses(image.format, image.mode):
            return None
        w, h = image.size
        rotation = image.getexif().get(_ORIENTATION, 1)
        if rotation in (5, 6, 7, 8):
            w, h = h, w
        copy = image.format == "JPEG" and image.mode == "RGB" and rotation == 1 and max(w, h) <= max_side
    return _Plan(copy, cached_size(w, h, max_side))


def _encode_one(task: _Task) -> _Outcome:
    try:
        jpeg_bytes = os.stat(task.src).st_size
        plan = _plan(task.src, task.max_side)
        if plan is not None and _complete(task, plan, jpeg_bytes):
            return _Outcome("kept", None, jpeg_bytes, os.stat(task.dst).st_size, plan.copy)
        image = _load(task.src, plan) if plan is not None else None
    except Exception:  # noqa: BLE001 - `runner data check`'s decoder names the reason
        return _Outcome("skipped", try_decode(task.src)[0] or "does not decode")
    if image is None:  # decodes, but not as a format DALI's decoder reads
        return _Outcome("skipped", try_decode(task.src)[0] or "a format DALI's decoder does not read")
    tmp = temporary_path(Path(task.dst))
    try:
        if plan.copy:
            shutil.copyfile(task.src, tmp)  # a new mtime: newer than the source, as _complete wants
        else:
            encode(image, tmp, max_side=task.max_side, quality=task.quality, filter=task.filter,
                   subsampling=task.subsampling)
        os.replace(tmp, task.dst)  # atomic: a reader or a rerun sees a whole file or none
    except OSError:
        tmp.unlink(missing_ok=True)
        raise
    return _Outcome("written", None, jpeg_bytes, os.stat(task.dst).st_size, plan.copy)


def _load(path: str, plan: _Plan) -> Image.Image:
    """The decoded source (fully: a file that does not decode must not be copied), upright."""
    with Image.open(path) as image:
        image.load()
        return image if plan.copy else ImageOps.exif_transpose(image)


def encode(image: Image.Image, out: str | Path, *, max_side: int, quality: int, filter: str = DEFAULT_FILTER,
           subsampling: str = DEFAULT_SUBSAMPLING) -> None:
    """Write `image` (upright) as an RGB JPEG whose longer side is at most max_side, without EXIF or ICC data."""
    image = rgb_as_dali(image)
    size = cached_size(image.width, image.height, max_side)
    if size != image.size:
        image = image.resize(size, FILTERS[filter])
    image.save(out, format="JPEG", quality=quality, subsampling=SUBSAMPLING[subsampling])


def _complete(task: _Task, plan: _Plan, source_bytes: int) -> bool:
    """Whether task.dst is the whole file the plan gives, written after task.src changed last."""
    try:
        if os.stat(task.dst).st_mtime < os.stat(task.src).st_mtime:
            return False
        if plan.copy:
            return os.stat(task.dst).st_size == source_bytes
        with open(task.dst, "rb") as f:
            f.seek(-2, os.SEEK_END)
            if f.read(2) != b"\xff\xd9":  # a JPEG ends with its EOI marker; a cut file does not
                return False
        with Image.open(task.dst) as image:
            return image.format == "JPEG" and image.mode == "RGB" and image.size == plan.size
    except Exception:  # noqa: BLE001 - anything unreadable is rebuilt
        return False
