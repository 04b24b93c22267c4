"""An ImageFolder as DALI's file reader sees it, its fingerprint, and a decode check of every file.

fn.readers.file(file_root=ROOT) numbers every subfolder of ROOT (hidden ones too, empty ones too) by
its place in the byte-sorted list of names, and reads the files directly inside each subfolder whose
names match its default filters, case-insensitively, in sorted order. `scan_image_folder` reproduces
that listing, so labels and order here are the reader's (tests compare them with a real pipeline).
"""
from __future__ import annotations

import hashlib
import io
import os
import warnings
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import numpy as np
from PIL import Image, ImageFile, UnidentifiedImageError

from runner.data.paths import DEFAULT_SKIP_LIST
from runner.data.pixels import dali_refuses, rgb_as_dali
from runner.data.pool import Progress, map_in_pool
from runner.data.shardset import find_shard_split, shard_fingerprint
from runner.errors import DataError, display_path, first_names

# fn.readers.file's default `file_filters` and `case_sensitive_filter` (DALI 2.4; a test compares them
# with the installed DALI's schema). The audio patterns are the reader's too: such files are read and
# then fail in the image decoder, so `check_images` reports them as bad.
READER_FILE_FILTERS = ("*.jpg", "*.jpeg", "*.png", "*.bmp", "*.tif", "*.tiff", "*.pnm", "*.ppm", "*.pgm",
                       "*.pbm", "*.jp2", "*.webp", "*.flac", "*.ogg", "*.wav")
READER_CASE_SENSITIVE = False
_SUFFIXES = tuple(f[1:] for f in READER_FILE_FILTERS)  # every filter is "*.ext"

LAYOUT = "an ImageFolder: ROOT/<class>/<image>.jpg, one folder per class with the images directly inside"



class FileIssue(NamedTuple):
    """A file (relative to the scanned root) and why it is listed."""
    path: str
    reason: str


@dataclass(frozen=True, kw_only=True)
class ImageFolderScan:
    """The reader's view of ROOT: class names by label, and (relative path, label) in reading order."""
    root: Path
    classes: tuple[str, ...]
    files: tuple[tuple[str, int], ...]
    ignored: tuple[FileIssue, ...] = ()   # entries the reader passes over

    def __len__(self) -> int:
        return len(self.files)


def reader_reads(name: str, suffixes: tuple[str, ...] = _SUFFIXES) -> bool:
    """Whether fn.readers.file's filters (by default its default ones) match this file name."""
    return (name if READER_CASE_SENSITIVE else name.lower()).endswith(suffixes)


def filter_suffixes(file_filters: list[str] | tuple[str, ...] | None) -> tuple[str, ...]:
    """A reader's `file_filters` (["*.npy"]) as suffixes; the default filters when None."""
    if not file_filters:
        return _SUFFIXES
    if not all(f.startswith("*.") and "*" not in f[1:] for f in file_filters):
        raise DataError(f"file_filters {list(file_filters)}: only '*.ext' patterns are understood here.")
    return tuple(f[1:].lower() for f in file_filters)


CACHE_SUFFIXES = (".npy",)  # `runner data cache` output, read with file_filters=["*.npy"]


def scan_data_folder(root: str | Path, suffixes: tuple[str, ...] | None = None) -> ImageFolderScan:
    """ROOT's files with these suffixes; without them, its images, or the .npy arrays of a decoded cache."""
    if suffixes is not None:
        return scan_image_folder(root, suffixes)
    try:
        return scan_image_folder(root)
    except DataError as error:
        try:
            return scan_image_folder(root, CACHE_SUFFIXES)
        except DataError:
            raise error from None


def _sorted_names(names: list[str]) -> list[str]:
    return sorted(names, key=os.fsencode)  # DALI sorts std::strings: byte order


def scan_image_folder(root: str | Path, suffixes: tuple[str, ...] = _SUFFIXES) -> ImageFolderScan:
    """List ROOT as fn.readers.file(file_root=ROOT) would; DataError when it is not an ImageFolder."""
    root = Path(root)
    classes, stray = _class_folders(root)
    files: list[tuple[str, int]] = []
    ignored = [FileIssue(name, "outside any class folder") for name in stray]
    empty = []
    for label, name in enumerate(classes):
        images, skipped = _class_files(root / name, suffixes)
        files += [(f"{name}/{f}", label) for f in images]
        ignored += [FileIssue(f"{name}/{f}", why) for f, why in skipped]
        if not images:
            empty.append(name)
    if empty:
        raise DataError(_empty_classes_message(root, classes, empty, ignored, suffixes), file=root)
    return ImageFolderScan(root=root, classes=tuple(classes), files=tuple(files), ignored=tuple(ignored))


def class_folders(root: str | Path) -> tuple[str, ...]:
    """The subfolders of ROOT that fn.readers.file(file_root=ROOT) numbers as classes, in its order."""
    return tuple(_class_folders(Path(root))[0])


def _class_folders(root: Path) -> tuple[list[str], list[str]]:
    """(subfolder names, sorted as the reader sorts them; names of other entries)."""
    if not root.exists():
        raise DataError(f"no such folder{_why_missing(root)}. Expected {LAYOUT}.", file=root)
    if not root.is_dir():
        raise DataError(f"is a file, not a folder. Expected {LAYOUT}.", file=root)
    folders, others = [], []
    for entry in _entries(root):
        if entry.is_symlink() and not os.path.exists(entry.path):
            raise DataError(f"'{entry.name}' is a broken symbolic link: DALI's reader stops on it ('Could not "
                            "access ... during directory traversal'). Remove it.", file=root)
        (folders if entry.is_dir() else others).append(entry.name)  # follows links, as the reader does
    if not folders and not others:
        raise DataError(f"the folder is empty. Expected {LAYOUT}.", file=root)
    if not folders:
        example = _sorted_names(others)[0]
        raise DataError(f"no class folders, only {len(others)} file(s) such as '{example}'. Expected {LAYOUT}; "
                        "put each class's images in a folder named after the class.", file=root)
    return _sorted_names(folders), _sorted_names(others)


def _why_missing(root: Path) -> str:
    """What is there instead: the first missing or non-folder parent, or the parent's subfolders."""
    for parent in reversed(root.absolute().parents):
        if parent.is_file():
            return f" ({display_path(parent)} is a file, not a folder)"
        if not parent.exists():
            return f" ({display_path(parent)} does not exist either)"
    try:
        siblings = _sorted_names([e.name for e in _entries(root.parent) if e.is_dir() and not e.name.startswith(".")])
    except DataError:
        return ""
    if not siblings:
        return ""
    shown = first_names(siblings, 8)
    return f"; {display_path(root.absolute().parent)} holds: {shown}"


def _entries(folder: Path) -> list[os.DirEntry]:
    try:
        with os.scandir(folder) as entries:
            return list(entries)
    except OSError as e:
        raise DataError(f"cannot list this folder ({e.strerror}).", file=folder) from None


def _class_files(folder: Path, suffixes: tuple[str, ...] = _SUFFIXES) -> tuple[list[str], list[tuple[str, str]]]:
    """(names the reader reads in `folder`, sorted; (name, why not) for the rest)."""
    images, skipped = [], []
    for entry in _entries(folder):
        # the reader takes regular files and links (even broken ones), never folders or devices
        kind_ok = entry.is_symlink() or entry.is_file(follow_symlinks=False)
        if kind_ok and reader_reads(entry.name, suffixes):
            images.append(entry.name)
        elif entry.is_dir(follow_symlinks=False):
            named = "a folder named like an image" if reader_reads(entry.name) else "a folder"
            skipped.append((entry.name, f"{named} (the reader reads no subfolders of class folders)"))
        elif not kind_ok:
            skipped.append((entry.name, "not a regular file"))
        else:
            skipped.append((entry.name, "extension not read by DALI's file reader"))
    return _sorted_names(images), sorted(skipped, key=lambda s: os.fsencode(s[0]))


def _empty_classes_message(root: Path, classes: list[str], empty: list[str], ignored: list[FileIssue],
                           suffixes: tuple[str, ...]) -> str:
    nested = [name for name in empty if any(e.is_dir() for e in _entries(root / name))]
    shown = first_names([f"'{n}'" for n in empty], 5)
    if len(empty) == len(classes) and nested:
        return (f"no images directly inside its subfolders ({shown}); they hold folders. If this folder holds "
                f"splits, point at one split, e.g. {display_path(root / nested[0])}. Expected {LAYOUT}.")
    other = [i.path for i in ignored if i.reason.startswith("extension not read")]
    if len(empty) == len(classes) and other:
        kinds = sorted({Path(p).suffix.lower() or "no extension" for p in other})
        return (f"no class folder holds a file the reader reads: {shown} hold {len(other)} file(s) such as "
                f"'{other[0]}' ({', '.join(kinds[:5])}). The reader takes only {', '.join(suffixes)} (any case). "
                f"Expected {LAYOUT}.")
    return (f"{len(empty)} of {len(classes)} class folders hold no images: {shown}. DALI's reader numbers every "
            "subfolder as a class (hidden and empty ones too), so these would shift the labels; remove them or "
            f"add images. Expected {LAYOUT}.")


def fingerprint(root: str | Path, suffixes: tuple[str, ...] | None = None) -> dict:
    """files, bytes, classes and a sha256 over the sorted lines "relative/path<TAB>size" of what the reader reads.

    Two machines with the same fingerprint train on the same file names and sizes (contents are not
    hashed: that would read the whole dataset). A file that cannot be stat'ed counts as size -1. Without
    `suffixes`: the images, or a decoded cache's arrays (see scan_data_folder).
    """
    shards = find_shard_split(root)
    if shards is not None:
        return shard_fingerprint(shards)
    scan = scan_data_folder(root, suffixes)
    lines, total = [], 0
    for path, _ in scan.files:
        size = _size(scan.root / path)
        total += max(0, size)
        lines.append(f"{path}\t{size}\n")
    digest = hashlib.sha256("".join(sorted(lines)).encode("utf-8", "surrogateescape")).hexdigest()
    return {"files": len(scan.files), "bytes": total, "classes": len(scan.classes), "sha256": digest}


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return -1


# ---- decode check ------------------------------------------------------------------------------

@dataclass(frozen=True, kw_only=True)
class CheckReport:
    """The result of decoding every file the reader would read under `root`."""
    root: Path
    checked: int
    bad: tuple[FileIssue, ...]
    ignored: tuple[FileIssue, ...]
    formats: dict[str, int] = field(default_factory=dict)  # decodable files by format (JPEG, PNG, ...)
    modes: dict[str, int] = field(default_factory=dict)    # ... and by colour mode (RGB, L, CMYK, ...)

    @property
    def ok(self) -> bool:
        return not self.bad

    @property
    def greyscale(self) -> int:
        return sum(n for mode, n in self.modes.items() if mode in ("1", "L", "LA", "I", "I;16", "F"))

    @property
    def cmyk(self) -> int:
        return self.modes.get("CMYK", 0)

    @property
    def png(self) -> int:
        return self.formats.get("PNG", 0)


def check_images(root: str | Path, *, workers: int | None = None, progress: Progress | None = None,
                 start_method: str = "fork", suffixes: tuple[str, ...] | None = None) -> CheckReport:
    """Fully decode every file the reader would read under ROOT (in a process pool); list those that fail.

    Greyscale, CMYK, PNG, ... files that decode are fine (DALI converts them to RGB): they are only
    counted. Files the reader passes over (other extensions, subfolders) are listed as `ignored`. In a decoded
    cache (.npy files) every array is loaded and must be uint8 height x width x 3.
    """
    scan = scan_data_folder(root, suffixes)
    paths = [str(scan.root / path) for path, _ in scan.files]
    results = map_in_pool(try_decode, paths, workers=workers, progress=progress, initializer=setup_decoder,
                          start_method=start_method)
    bad, formats, modes = [], Counter(), Counter()
    for (path, _), (reason, fmt, mode) in zip(scan.files, results):
        if reason:
            bad.append(FileIssue(path, reason))
        else:
            formats[fmt] += 1
            modes[mode] += 1
    return CheckReport(root=scan.root, checked=len(paths), bad=tuple(bad), ignored=scan.ignored,
                       formats=dict(formats), modes=dict(modes))


def setup_decoder() -> None:
    Image.MAX_IMAGE_PIXELS = None            # DALI decodes large images; Pillow's bomb guard would flag them
    ImageFile.LOAD_TRUNCATED_IMAGES = False  # a truncated file must fail, not decode to grey
    warnings.simplefilter("ignore")          # EXIF and ICC complaints are not decode failures


def try_decode(path: str) -> tuple[str | None, str | None, str | None]:
    """(why it fails or None, Pillow's format, colour mode) for one file."""
    if path.lower().endswith(CACHE_SUFFIXES):
        return _load_array(path)
    try:
        return _decode(path, os.stat(path).st_size, lambda: _head(path))
    except OSError as e:  # a file that cannot be opened; _decode turns a decoder's OSError into its reason
        return _unreadable(path, e), None, None


def try_decode_bytes(data: bytes) -> tuple[str | None, str | None, str | None]:
    """try_decode for an image held in memory (a shard's sample)."""
    return _decode(io.BytesIO(data), len(data), lambda: data[:256])


def _decode(source, size: int, head) -> tuple[str | None, str | None, str | None]:
    """Pillow decodes the whole image as DALI would take it; a failure's reason names the format when the header does.
    `head` gives the first bytes, read only to explain a failure."""

    if size == 0:
        return "zero bytes", None, None
    fmt = mode = None
    try:
        with Image.open(source) as image:
            fmt, mode = image.format, image.mode
            image.load()
            rgb_as_dali(image)
    except UnidentifiedImageError:
        return f"not an image ({_sniff(head())})", None, None
    except (FileNotFoundError, PermissionError, IsADirectoryError):
        raise
    except Exception as e:  # noqa: BLE001 - any decoder failure is a bad file, reported with its reason
        message = str(e).splitlines()[0] if str(e) else type(e).__name__
        fmt = fmt or _magic_format(head())  # a file cut inside its header fails before Pillow names it
        if "truncated" in message.lower():
            return f"truncated {fmt or 'image'} (ends after {size} bytes)", fmt, mode
        return f"does not decode as {fmt or 'an image'}: {message}", fmt, mode
    return dali_refuses(fmt, mode), fmt, mode


def _load_array(path: str) -> tuple[str | None, str | None, str | None]:
    """A decoded-cache file: (why it is unusable or None, "NPY", "RGB")."""
    try:
        array = np.load(path, mmap_mode="r", allow_pickle=False)
    except OSError as e:
        return _unreadable(path, e), None, None
    except Exception as e:  # noqa: BLE001 - a bad header or a cut file, with numpy's reason
        return f"not a readable .npy array: {str(e).splitlines()[0] if str(e) else type(e).__name__}", None, None
    if array.dtype != np.uint8 or array.ndim != 3 or array.shape[2] != 3:
        return f"an array of {array.dtype} {tuple(array.shape)}; the cache pipelines take uint8 HxWx3", "NPY", None
    return None, "NPY", "RGB"


_MAGIC = ((b"\xff\xd8\xff", "JPEG"), (b"\x89PNG", "PNG"), (b"GIF8", "GIF"), (b"BM", "BMP"), (b"II*\0", "TIFF"),
          (b"MM\0*", "TIFF"), (b"RIFF", "WEBP"), (b"\0\0\0\x0cjP", "JPEG2000"), (b"\xff\x4f\xff\x51", "JPEG2000"))


def _head(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read(256)


def _magic_format(head: bytes) -> str | None:
    return next((name for magic, name in _MAGIC if head.startswith(magic)), None)


def _unreadable(path: str, e: OSError) -> str:
    if os.path.islink(path) and not os.path.exists(path):
        return f"unreadable: broken symbolic link (to {os.readlink(path)})"
    return f"unreadable: {e.strerror or e}"


def _sniff(head: bytes) -> str:
    try:
        words = " ".join(head.decode("utf-8").split())
    except UnicodeDecodeError:
        words = None
    if words is None or not words.isprintable():
        return "unknown format, starts with " + head[:4].hex(" ")
    return f"a text file: '{words[:30]}" + ("...'" if len(words) > 30 else "'")


# ---- skip lists --------------------------------------------------------------------------------

def default_skip_list(root: str | Path) -> Path:
    """Where `runner data check ROOT` writes the skip list when --output is not given."""
    return Path(root) / DEFAULT_SKIP_LIST


def write_skip_list(report: CheckReport, path: str | Path) -> Path:
    """One path (relative to the checked root) per line, after a comment header; written even when empty,
    so that a list made before the files were fixed does not linger."""
    path = Path(path)
    header = [f"# files under {report.root.resolve()} that do not decode (runner data check):",
              f"# {len(report.bad)} of {report.checked}; one path relative to that folder per line."]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(header + sorted(issue.path for issue in report.bad)) + "\n",
                    encoding="utf-8", errors="surrogateescape")
    return path


def read_skip_list(path: str | Path) -> set[str]:
    """The relative paths in a skip list (comment and blank lines left out)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8", errors="surrogateescape")
    except FileNotFoundError:
        raise DataError("no such skip list; `runner data check ROOT` writes one.", file=path) from None
    except OSError as e:
        raise DataError(f"cannot read this skip list ({e.strerror}).", file=path) from None
    return {line for line in text.splitlines() if line.strip() and not line.startswith("#")}
