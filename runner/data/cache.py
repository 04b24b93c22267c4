"""A pre-decoded cache of an ImageFolder: every image decoded once into a uint8 HWC RGB `.npy` file.

DST mirrors SRC's class folders (and its split folders, when SRC holds splits), so DALI's file
reader gives a cached image the label it gives the JPEG: `readers.file(file_root=DST/<split>,
file_filters=["*.npy"])` then `decoders.numpy` (pipelines/imagenet_*_cache.yaml). A cached image is
`<class>/<file name>.npy` (the source name kept whole, so `a.jpg` and `a.png` cannot collide), resized
with Pillow's Lanczos filter so that its longer side is at most `max_side`, never enlarged, EXIF
orientation applied as DALI's decoder applies it.

Resumable: each file is written under a temporary name and renamed, and a rerun keeps every file
whose header matches what its source would give and that is newer than its source. The marker
`DST/.runner-cache.json` holds the settings (written first, so that an interrupted build cannot be
resumed with other settings) and, once complete, the summary. Files that do not decode are left out
and listed, with `runner data check`'s reasons, in `DST/.runner-bad-files.txt`. runner deletes
nothing in DST but its own temporary files.
"""
from __future__ import annotations

import json
import logging
import os
import re
import socket
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import NamedTuple

import numpy as np
from PIL import Image, ImageOps

from runner.data.pixels import dali_refuses, rgb_as_dali
from runner.data.pool import Progress, map_in_pool, process_alive
from runner.data.scan import (
    DEFAULT_SKIP_LIST,
    READER_CASE_SENSITIVE,
    FileIssue,
    fingerprint,
    reader_reads,
    scan_image_folder,
    setup_decoder,
    try_decode,
)
from runner.errors import DataError, display_path

log = logging.getLogger(__name__)

MARKER = ".runner-cache.json"
SUFFIX = ".npy"
# bump when the cached arrays change (filter, orientation, ...), so that an older cache is not resumed;
# 2: 16-bit and float sources scaled to 8 bits as DALI scales them (runner/data/pixels.py)
FORMAT = 2
_ORIENTATION = 0x0112  # EXIF tag; values 5-8 swap width and height


@dataclass(frozen=True, kw_only=True)
class CacheSummary:
    """What build_cache left in `root`: counts and bytes cover every cached image, written now or kept."""
    root: Path
    source: Path
    max_side: int
    splits: dict[str, int]            # split folder ('' for a single split) -> cached images
    classes: int                      # class folders of the first split
    written: int                      # images decoded and written by this call
    kept: int                         # images already complete from an earlier call
    jpeg_bytes: int                   # source files of the cached images
    cache_bytes: int                  # their .npy files
    seconds: float
    skipped: tuple[FileIssue, ...] = ()   # source files that do not decode (paths relative to source)
    stale: tuple[str, ...] = ()           # files/folders in DST with no source image (paths relative to root)

    @property
    def images(self) -> int:
        return self.written + self.kept

    @property
    def ratio(self) -> float:
        """Disk cost of the cache against the source files (cache bytes / JPEG bytes)."""
        return self.cache_bytes / max(1, self.jpeg_bytes)

    @property
    def skip_list(self) -> Path:
        return self.root / DEFAULT_SKIP_LIST


def build_cache(src: Path, dst: Path, *, max_side: int = 256, workers: int | None = None,
                progress: Progress | None = None) -> CacheSummary:
    """Decode every image the reader would read under SRC into DST (see the module docstring).

    Raises DataError when SRC is not an ImageFolder (or a folder of splits), when DST holds files runner
    did not write, or a cache made with other settings.
    """
    src, dst = Path(src), Path(dst)
    if max_side < 1:
        raise DataError(f"max_side must be at least 1 (got {max_side}).", where="cache")
    splits = find_splits(src)
    scans = [scan_image_folder(src / split) for split in splits]  # before DST is touched: SRC's mistakes first
    check_outside_source(src, dst)
    settings = {"format": FORMAT, "max_side": max_side}
    claim_cache(dst, settings, src)
    start = time.perf_counter()
    tasks, names = [], []
    for split, scan in zip(splits, scans):
        for cls in scan.classes:
            (dst / split / cls).mkdir(parents=True, exist_ok=True)  # every class, so labels match
        for path, _ in scan.files:
            rel = f"{split}/{path}" if split else path
            tasks.append(_Task(src=str(src / rel), dst=str(dst / (rel + SUFFIX)), max_side=max_side))
            names.append(rel)
    try:
        outcomes = map_in_pool(_cache_one, tasks, workers=workers, progress=progress, initializer=setup_decoder)
    except OSError as e:  # writing, not reading: unreadable sources are skipped, not raised
        raise DataError(f"cannot write the cache ({e.strerror or e}"
                        + (f": {display_path(Path(e.filename))}" if e.filename else "")
                        + "). Free space or choose another folder; a rerun keeps what is written.", file=dst) from None
    summary = _summarise(src, dst, max_side, splits, len(scans[0].classes), names, outcomes,
                         time.perf_counter() - start)
    write_cache_skip_list(summary)
    write_json_atomic(dst / MARKER, _marker(settings, src, summary))
    log.info("cached %d images (%d written) in %.1f s", summary.images, summary.written, summary.seconds)
    return summary


def find_splits(src: Path) -> list[str]:
    """The split folders of SRC (e.g. ['train', 'val']), or [''] when SRC is itself one split.

    SRC holds splits when no subfolder has images directly inside and every (non-hidden) subfolder
    holds folders; anything else is scanned as one ImageFolder, which gives scan's messages.
    """
    if not src.is_dir():
        scan_image_folder(src)  # raises the scanner's message (missing, a file)
    subfolders = sorted((e for e in os.scandir(src) if e.is_dir() and not e.name.startswith(".")),
                        key=lambda e: os.fsencode(e.name))
    if not subfolders:
        return [""]
    for entry in subfolders:
        inside = list(os.scandir(entry.path))
        if any(reader_reads(e.name) and not e.is_dir() for e in inside) or not any(e.is_dir() for e in inside):
            return [""]
    return [e.name for e in subfolders]


# ---- the folder a command fills: where it may go, its marker ---------------------------------

@dataclass(frozen=True)
class MadeFolder:
    """A folder a runner command fills and marks as its own (a cache, a shard set): the words its errors use."""
    marker: str      # the marker file's name, in the folder
    made_by: str     # "runner data cache"
    held: str        # what it holds: "a cache", "shards"
    it: str          # "it", "them"
    kind: str        # "a cache", "a shard set"
    noun: str        # "the cache", "the shards"
    remake: str      # "build the cache", "write the shards"


CACHE_FOLDER = MadeFolder(marker=MARKER, made_by="runner data cache", held="a cache", it="it", kind="a cache",
                          noun="the cache", remake="build the cache")


def check_outside_source(src: Path, dst: Path, made: MadeFolder = CACHE_FOLDER) -> None:
    s, d = src.resolve(), dst.resolve()
    if s == d or s in d.parents:
        raise DataError(f"is inside the source folder {display_path(src)}; the reader would take its folders for "
                        f"classes. Put {made.noun} outside the dataset.", file=dst)
    if d in s.parents:
        raise DataError(f"holds the source folder {display_path(src)}; put {made.noun} in a folder of its own.",
                        file=dst)


def settings_diff(old: dict, wanted: dict) -> str:
    """'key old (wanted new), ...' for the settings a folder was made with that differ from the wanted ones."""
    return ", ".join(f"{k} {old.get(k)} (wanted {v})" for k, v in wanted.items() if old.get(k) != v)


def claim_cache(dst: Path, settings: dict, src: Path, made: MadeFolder = CACHE_FOLDER) -> None:
    """Make DST ours (new or empty), or check that it is a folder `made` with these settings."""
    marker = dst / made.marker
    if dst.exists() and not dst.is_dir():
        raise DataError(f"exists and is a file; choose a folder for {made.noun}.", file=dst)
    if marker.is_file():
        old = _read_marker(marker, made)["settings"]
        if old != settings:
            raise DataError(f"holds {made.held} made with other settings: {settings_diff(old, settings)}. runner does "
                            f"not overwrite or delete {made.it}: choose another folder for these settings, or remove "
                            "this one yourself.", file=dst)
    elif dst.is_dir() and any(dst.iterdir()):
        raise DataError(f"exists and is a folder without {made.marker}, not {made.kind} made by runner. runner does not "
                        "write into (or delete) data it did not make: choose a new or empty folder.", file=dst)
    dst.mkdir(parents=True, exist_ok=True)
    # incomplete until this call ends: an interrupted rerun must not look like a finished one
    write_json_atomic(marker, {"made_by": made.made_by, "settings": settings, "source": str(src.resolve()),
                               "complete": False})


def _read_marker(marker: Path, made: MadeFolder = CACHE_FOLDER) -> dict:
    try:
        recorded = json.loads(marker.read_text())
        dict(recorded["settings"])
        return recorded
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise DataError(f"cannot read this marker ({type(e).__name__}: {e}); {made.remake} into a new folder.",
                        file=marker) from None


def read_cache_marker(dst: Path) -> dict:
    """The marker of a cache folder: settings, source, complete, summary (once complete)."""
    return _read_marker(Path(dst) / MARKER)


def _marker(settings: dict, src: Path, summary: CacheSummary) -> dict:
    fields = asdict(summary)
    for key in ("root", "source", "max_side"):
        fields.pop(key)
    fields["skipped"] = [list(issue) for issue in summary.skipped]
    fields["stale"] = list(summary.stale)
    return {"made_by": "runner data cache", "settings": settings, "source": str(src.resolve()), "complete": True,
            "source_fingerprint": {split: fingerprint(src / split) for split in summary.splits}, "summary": fields}


def write_json_atomic(path: Path, data: dict) -> None:
    tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    os.replace(tmp, path)


def write_cache_skip_list(summary: CacheSummary) -> None:
    """Source paths left out, one a line, each after a comment with its reason (read_skip_list reads it)."""
    lines = [f"# files under {summary.source.resolve()} that do not decode (runner data cache):",
             f"# {len(summary.skipped)} of {summary.images + len(summary.skipped)}; one path relative to that "
             "folder per line, its reason on the comment line above."]
    for issue in summary.skipped:
        lines += [f"# {issue.reason}", issue.path]
    summary.skip_list.write_text("\n".join(lines) + "\n", encoding="utf-8", errors="surrogateescape")


# ---- after the pool ------------------------------------------------------------------------------

def _summarise(src: Path, dst: Path, max_side: int, splits: list[str], classes: int, names: list[str],
               outcomes: list[_Outcome], seconds: float) -> CacheSummary:
    counts = dict.fromkeys(splits, 0)
    skipped, cached = [], set()
    for name, o in zip(names, outcomes):
        if o.status == "skipped":
            skipped.append(FileIssue(name, o.reason or "does not decode"))
        else:
            counts[name.split("/", 1)[0] if splits != [""] else ""] += 1
            cached.add(name + SUFFIX)
    good = [o for o in outcomes if o.status != "skipped"]
    return CacheSummary(root=dst, source=src, max_side=max_side, splits=counts, classes=classes,
                        written=sum(o.status == "written" for o in good), kept=sum(o.status == "kept" for o in good),
                        jpeg_bytes=sum(o.jpeg_bytes for o in good), cache_bytes=sum(o.cache_bytes for o in good),
                        seconds=round(seconds, 3), skipped=tuple(skipped),
                        stale=stale_entries(dst, splits, cached, names))


def stale_entries(dst: Path, splits: list[str], cached: set[str], names: list[str],
           suffixes: tuple[str, ...] | None = (SUFFIX,)) -> tuple[str, ...]:
    """Entries of DST the reader would read that no source image backs (removed or now broken sources,
    extra class folders); also removes temporary files left by killed builds on this host. `suffixes`:
    the cache's file endings (None: the reader's default filters, for a cache of images)."""
    classes = {name.rsplit("/", 1)[0] for name in names}
    stale = []
    for split in splits:
        root = dst / split
        for entry in sorted(os.scandir(root), key=lambda e: os.fsencode(e.name)):
            rel = f"{split}/{entry.name}" if split else entry.name
            if entry.is_dir() and rel not in classes and not _empty(entry.path):
                stale.append(rel + "/")
            elif entry.is_dir():
                stale += _stale_files(Path(entry.path), rel, cached, suffixes)
    return tuple(stale)


def _empty(folder: str) -> bool:
    return not any(os.scandir(folder))


_TEMP = re.compile(rf"\.(.+)\.tmp-{re.escape(socket.gethostname())}-(\d+)")


def temporary_path(path: Path) -> Path:
    """Where a build on this machine writes `path` before renaming it into place: .NAME.tmp-HOST-PID, which a rerun
    removes once that process is gone (dead_temporary)."""
    return path.with_name(f".{path.name}.tmp-{socket.gethostname()}-{os.getpid()}")


def dead_temporary(name: str) -> bool:
    """Whether `name` is a temporary file (.NAME.tmp-HOST-PID) of a build on this machine whose process is gone."""
    temp = _TEMP.fullmatch(name)
    return bool(temp) and not process_alive(int(temp.group(2)))


def _stale_files(folder: Path, rel: str, cached: set[str], suffixes: tuple[str, ...] | None) -> list[str]:
    stale = []
    for entry in os.scandir(folder):
        name = entry.name if READER_CASE_SENSITIVE else entry.name.lower()
        if dead_temporary(entry.name):
            Path(entry.path).unlink(missing_ok=True)
        elif (reader_reads(name) if suffixes is None else name.endswith(suffixes)) \
                and f"{rel}/{entry.name}" not in cached:
            stale.append(f"{rel}/{entry.name}")
    return sorted(stale, key=os.fsencode)


# ---- one image (in a pool worker) ----------------------------------------------------------------

@dataclass(frozen=True)
class _Task:
    src: str
    dst: str
    max_side: int


class _Outcome(NamedTuple):
    status: str              # written | kept | skipped
    reason: str | None = None
    jpeg_bytes: int = 0
    cache_bytes: int = 0


def cached_size(width: int, height: int, max_side: int) -> tuple[int, int]:
    """(width, height) of the cached image: the longer side scaled down to max_side, never up."""
    longer = max(width, height)
    if longer <= max_side:
        return width, height
    if width >= height:
        return max_side, max(1, round(height * max_side / width))
    return max(1, round(width * max_side / height)), max_side


def _cache_one(task: _Task) -> _Outcome:
    try:
        jpeg_bytes = os.stat(task.src).st_size
        if _complete(task):
            return _Outcome("kept", None, jpeg_bytes, os.stat(task.dst).st_size)
        array = load_resized(task.src, task.max_side)
    except Exception:  # noqa: BLE001 - `runner data check`'s decoder names the reason
        return _Outcome("skipped", try_decode(task.src)[0] or "does not decode")
    if array is None:  # decodes, but not as a format DALI's decoder reads
        return _Outcome("skipped", try_decode(task.src)[0] or "a format DALI's decoder does not read")
    tmp = temporary_path(Path(task.dst))
    try:
        with open(tmp, "wb") as f:
            np.save(f, array, allow_pickle=False)
        os.replace(tmp, task.dst)  # atomic: a reader or a rerun sees a whole file or none
    except OSError:
        tmp.unlink(missing_ok=True)
        raise
    return _Outcome("written", None, jpeg_bytes, os.stat(task.dst).st_size)


def load_resized(path: str | Path, max_side: int):
    """The image at `path` as DALI would decode it (RGB, EXIF orientation applied), longer side at most
    max_side: a uint8 HWC numpy array; None for a format DALI's decoder does not read."""
    with Image.open(path) as image:
        if dali_refuses(image.format, image.mode):
            return None
        image = rgb_as_dali(ImageOps.exif_transpose(image))
    size = cached_size(image.width, image.height, max_side)
    if size != image.size:
        image = image.resize(size, Image.Resampling.LANCZOS)  # a wide kernel when shrinking: antialiased
    return np.asarray(image, dtype=np.uint8)


def _complete(task: _Task) -> bool:
    """Whether task.dst is a whole .npy of the shape task.src gives, written after task.src changed last."""
    try:
        if os.stat(task.dst).st_mtime < os.stat(task.src).st_mtime:
            return False
        with open(task.dst, "rb") as f:
            read_header = _HEADER_READERS.get(np.lib.format.read_magic(f))
            if read_header is None:
                return False
            shape, fortran, dtype = read_header(f)
            offset = f.tell()
        size = os.stat(task.dst).st_size
    except (OSError, ValueError):
        return False
    if dtype != np.uint8 or fortran or len(shape) != 3 or shape[2] != 3:
        return False
    h, w = shape[:2]
    return size == offset + h * w * 3 and (w, h) == _expected_size(task.src, task.max_side)


_HEADER_READERS = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}


def _expected_size(path: str, max_side: int) -> tuple[int, int] | None:
    try:
        with Image.open(path) as image:  # reads the header only
            w, h = image.size
            if image.getexif().get(_ORIENTATION) in (5, 6, 7, 8):
                w, h = h, w
    except Exception:  # noqa: BLE001 - an unreadable source is rebuilt (and then skipped with its reason)
        return None
    return cached_size(w, h, max_side)
