"""Training around files that do not decode: skip lists -> a reader file list without them.

`runner data check SPLIT` (or the runner itself, after a decode error) writes SPLIT/.runner-bad-files.txt;
for a read-only dataset the list goes to runner's user cache (runner.files.user_cache, ~/.cache/runner/skip-lists/)
instead. A split's reader gets `file_list=` (every image of the split minus the listed ones, each labelled by its
class name from the train split's label map, see data.labels) in place of scanning `file_root` itself; for the
train split itself those are the labels fn.readers.file would give, and the file order is the reader's.
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path

from runner.data.labels import LabelMap, labelled_files
from runner.data.scan import (
    DEFAULT_SKIP_LIST,
    CheckReport,
    ImageFolderScan,
    read_skip_list,
    scan_image_folder,
    write_skip_list,
)
from runner.files import user_cache


def _key(split_dir: Path) -> str:
    return hashlib.sha256(str(split_dir.resolve()).encode()).hexdigest()[:16]


def skip_list_locations(split_dir: Path) -> list[Path]:
    """Where a split's skip list may be: inside the split, or in runner's cache for read-only data."""
    return [split_dir / DEFAULT_SKIP_LIST, user_cache("skip-lists") / f"{_key(split_dir)}.txt"]


def skipped_files(split_dir: Path) -> tuple[set[str], list[Path]]:
    """The relative paths listed for this split, and the lists they came from."""
    found = [p for p in skip_list_locations(split_dir) if p.is_file()]
    out: set[str] = set()
    for p in found:
        out |= read_skip_list(p)
    return out, found


def save_skip_list(report: CheckReport, split_dir: Path) -> Path:
    """Write the list inside the split when possible, else in runner's cache."""
    for target in skip_list_locations(split_dir):
        try:
            return write_skip_list(report, target)
        except OSError:
            continue
    raise OSError(f"no writable place for the skip list of {split_dir}")


def labelled_file_list(scan: ImageFolderScan, label_map: LabelMap, *, keep_skipped: bool,
                       at: dict | None = None) -> tuple[Path, int]:
    """A `file_list` for fn.readers.file over a scanned split: its files in the reader's order, labelled from the
    train split's map, skip-listed ones left out unless `keep_skipped`: (path, how many left out)."""
    skipped = set() if keep_skipped else skipped_files(scan.root)[0]
    files = labelled_files(label_map, scan.root, list(scan.files), scan.classes, at)
    keep = [(path, label) for path, label in files if path not in skipped]
    return write_file_list(scan.root, keep), len(files) - len(keep)


def readable_files(split_dir: Path, suffixes: tuple[str, ...], *, keep_skipped: bool = False) -> list[tuple[str, int]]:
    """(relative path, label) of every file the reader would read, skip-listed ones left out unless `keep_skipped`."""
    skipped = set() if keep_skipped else skipped_files(split_dir)[0]
    return [(path, label) for path, label in scan_image_folder(split_dir, suffixes).files if path not in skipped]


def write_file_list(split_dir: Path, files: list[tuple[str, int]], tag: str = "") -> Path:
    """A `file_list` for fn.readers.file in runner's cache, named by its content (ranks may write it at once)."""
    # a name that is not UTF-8 goes back to its own bytes, which is what the reader opens
    body = "".join(f"{path} {label}\n" for path, label in files).encode("utf-8", "surrogateescape")
    digest = hashlib.sha256(body).hexdigest()[:12]
    out = user_cache("file-lists") / f"{_key(split_dir)}{'-' + tag if tag else ''}-{digest}.txt"
    if not out.exists():
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_suffix(f".tmp{os.getpid()}")
        tmp.write_bytes(body)
        os.replace(tmp, out)
    return out
