"""A folder of WebDataset shards that `runner data shard` wrote, as a run, its checks and its record see it.

Layout (DST made from a folder of splits; from one ImageFolder, the shards lie in DST itself):

    DST/.runner-shards.json      the manifest: settings, source and its fingerprint, classes, each shard's record
    DST/labels.json              {class name: label}, the train split's map, as a run's label_map.json
    DST/train/shard-000000.tar   samples KEY.jpg (the source file's bytes), KEY.cls (label as text, WebDataset's
    DST/train/shard-000000.idx     convention), KEY.cls.i32 (the label as int32, what DALI reads), KEY.json
                                  (source path and class); the .idx is DALI's index (wds2idx's format v1.2)

A split is checked before a run reads it: every shard has its index, the index belongs to the shard (the tar's
entry names at the offsets it gives), the tar is as long as the index says, every sample has an image and a
label, and the labels lie within the classes. What the manifest recorded is trusted for shards whose size,
modification time and index are the ones it recorded; any other shard (changed, or copied without keeping its
times) has its labels read.
"""
from __future__ import annotations

import hashlib
import json
import os
import struct
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from runner.data import tfrecord
from runner.errors import DataError, counted, display_path, first_names

MARKER = ".runner-shards.json"
LABELS = "labels.json"
SHARD_PREFIX = "shard-"
TAR, INDEX = ".tar", ".idx"
TFRECORD = ".tfrecord"
SUFFIX = {"webdataset": TAR, "tfrecord": TFRECORD}   # a shard's file by format; its index is .idx in both
LABEL_EXT = "cls.i32"     # little-endian int32: readers.webdataset(ext=[..., "cls.i32"], dtypes=[UINT8, INT32])
TEXT_LABEL_EXT = "cls"    # the label as decimal text, as webdataset's and timm's readers take it
META_EXT = "json"
# image components by the extension of their source file, as DALI's decoder reads them
IMAGE_EXTS = ("jpg", "png", "bmp", "tif", "pnm", "ppm", "pgm", "pbm", "jp2", "webp")
INDEX_VERSION = "v1.2"
_TAR_BLOCK = 512


def image_ext(name: str) -> str:
    """The component extension of a source image: its suffix, lower case, .jpeg as jpg and .tiff as tif."""
    ext = name.rsplit(".", 1)[-1].lower()
    return {"jpeg": "jpg", "tiff": "tif"}.get(ext, ext)


@dataclass(frozen=True)
class IndexedSample:
    key: str
    components: dict[str, tuple[int, int, str]]   # ext -> (offset of the data in the tar, size, entry name)


def parse_index(path: Path) -> list[IndexedSample]:
    """DALI's WebDataset index: 'v1.2 N', then one line per sample of 'ext offset size name' groups."""
    try:
        lines = path.read_text(encoding="utf-8", errors="surrogateescape").splitlines()
    except OSError as e:
        raise DataError(f"cannot read this index ({e.strerror or e}).", file=path) from None
    head = lines[0].split() if lines else []
    if len(head) != 2 or head[0] != INDEX_VERSION or not head[1].isdigit() or int(head[1]) != len(lines) - 1:
        raise DataError(f"is not a WebDataset index of format {INDEX_VERSION} (first line '{' '.join(head)}', "
                        f"{len(lines) - 1} sample lines): rebuild it with DALI's `wds2idx SHARD.tar SHARD.idx`, or "
                        "rebuild the shards with `runner data shard`.", file=path)
    samples = []
    for n, line in enumerate(lines[1:], start=2):
        fields = line.split(" ")
        if len(fields) % 4 or not fields:
            raise DataError(f"line {n} is not a list of 'ext offset size name' groups: '{line[:80]}'.", file=path)
        components = {}
        for i in range(0, len(fields), 4):
            ext, offset, size, name = fields[i:i + 4]
            components[ext] = (int(offset), int(size), name)
        key = fields[3][: len(fields[3]) - len(fields[0]) - 1]
        samples.append(IndexedSample(key, components))
    return samples


def index_digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@dataclass(frozen=True)
class ShardSplit:
    """One split of a shard set: its shards in reading order, their indexes, and the set's manifest."""
    folder: Path
    root: Path
    split: str
    manifest: dict

    @property
    def record(self) -> dict:
        return (self.manifest.get("splits") or {}).get(self.split) or {}

    @cached_property
    def shards(self) -> tuple[Path, ...]:
        """The split's shard files, by name (the manifest's order)."""
        suffix = SUFFIX.get(self.format, TAR)
        return tuple(sorted(self.folder.glob(f"{SHARD_PREFIX}*{suffix}"), key=lambda p: os.fsencode(p.name)))

    @property
    def indexes(self) -> tuple[Path, ...]:
        return tuple(p.with_suffix(INDEX) for p in self.shards)

    @property
    def classes(self) -> tuple[str, ...]:
        return tuple(self.manifest.get("classes") or ())

    @property
    def samples(self) -> int:
        return int(self.record.get("samples") or 0)

    def __len__(self) -> int:
        return self.samples

    @property
    def format(self) -> str:
        return str((self.manifest.get("settings") or {}).get("format"))

    def describe(self) -> str:
        s = self.manifest.get("settings") or {}
        shuffled = s.get("shuffle_seed") is not None and self.split in ("", self.manifest.get("train_split"))
        order = f"shuffled with seed {s['shuffle_seed']}" if shuffled else "in the source's order"
        return (f"{s.get('format')} shards of about {s.get('shard_mb')} MB, {order}"
                + ("" if self.manifest.get("complete") else " (incomplete: its build did not finish)"))


def find_shard_split(folder: str | Path) -> ShardSplit | None:
    """The shard split at `folder` (a shard set made from one ImageFolder, or one split of a set of splits);
    None for a folder that is neither. A manifest that cannot be read is a DataError."""
    folder = Path(folder)
    for root, split in ((folder, ""), (folder.parent, folder.name)):
        marker = root / MARKER
        if not marker.is_file():
            continue
        try:
            manifest = json.loads(marker.read_text())
            dict(manifest["settings"])
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise DataError(f"cannot read this shard set's manifest ({type(e).__name__}: {e}); rebuild the shards "
                            "with `runner data shard` into a new folder.", file=marker) from None
        if split in (manifest.get("splits") or {}) or (split == "" and not manifest.get("splits")):
            return ShardSplit(folder=folder, root=root, split=split, manifest=manifest)
        if split == "":
            return None  # a shard set's root, read as a folder of splits
    return None


def shard_splits(folder: str | Path) -> list[ShardSplit] | None:
    """Every split of the shard set at `folder` (its root, or one split of it); None for other folders."""
    folder = Path(folder)
    if (folder / MARKER).is_file():
        found = find_shard_split(folder)
        if found is not None:
            return [found]
        manifest = json.loads((folder / MARKER).read_text())
        return [ShardSplit(folder=folder / name, root=folder, split=name, manifest=manifest)
                for name in manifest.get("splits") or {}]
    found = find_shard_split(folder)
    return None if found is None else [found]


def is_shard_split(folder: str | Path) -> bool:
    try:
        return find_shard_split(folder) is not None
    except DataError:
        return True


def build_command(split: ShardSplit) -> str:
    s = split.manifest.get("settings") or {}
    seed = "none" if s.get("shuffle_seed") is None else s.get("shuffle_seed")
    return (f"runner data shard {split.manifest.get('source')} {display_path(split.root)} --format {s.get('format')} "
            f"--shard-size {s.get('shard_mb')} --shuffle-seed {seed}")


# ---- checks before a run reads a split ------------------------------------------------------------

def check_shard_split(split: ShardSplit, num_classes: int | None = None) -> None:
    """DataError, one paragraph naming the shard, for a split a reader must not read (see the module docstring)."""
    rebuild = f"`{build_command(split)}` (it rewrites only the shards that are not whole)"
    if not split.manifest.get("complete"):
        raise DataError(f"is a shard set whose build did not finish, so it holds only part of its source "
                        f"{split.manifest.get('source')}. Run {rebuild}.", file=split.root)
    recorded = {r["name"]: r for r in split.record.get("shards") or []}
    names = [p.name for p in split.shards]
    missing = [name for name in recorded if name not in names]
    if missing:
        raise DataError(f"lacks {counted(len(missing), 'shard', 'shards')} that its manifest lists: "
                        f"{first_names(missing, 4)}. Copy them again, or run {rebuild}.", file=split.folder)
    extra = [name for name in names if name not in recorded]
    if extra:
        raise DataError(f"holds {counted(len(extra), 'shard', 'shards')} that its manifest does not list: {first_names(extra, 4)} "
                        "(a reader would read them too, with labels runner never checked). Move them out, or "
                        "rebuild the shard set into a new folder.", file=split.folder)
    classes = len(split.classes) if num_classes is None else min(num_classes, len(split.classes))
    check = _check_tfrecord if split.format == "tfrecord" else _check_shard
    for shard in split.shards:
        check(shard, recorded[shard.name], classes, len(split.classes), rebuild)


def _missing_index(shard: Path, index: Path, rebuild: str) -> DataError:
    tool = "wds2idx" if shard.suffix == TAR else "tfrecord2idx"
    return DataError(f"has no index {index.name} beside it. DALI's reader needs one per shard (without it, it reads "
                     f"the whole file to find its samples, and runner cannot check it); run {rebuild}, or DALI's "
                     f"`{tool} {display_path(shard)} {display_path(index)}`.", file=shard)


def _trusted(shard: Path, index: Path, record: dict) -> bool:
    stat = shard.stat()
    return (record.get("bytes") == stat.st_size and record.get("mtime_ns") == stat.st_mtime_ns
            and record.get("index_sha256") == index_digest(index))


def _check_labels(shard: Path, low: int, high: int, classes: int, known: int, rebuild: str) -> None:
    if low < 0 or high >= classes:
        what = "the model's outputs (model.num_classes)" if classes < known else f"the {known} classes of the set"
        raise DataError(f"holds label {high if high >= classes else low}, beyond {what}: labels run 0 to "
                        f"{classes - 1}. The shard does not match its set's label map ({LABELS}); rebuild it with "
                        f"{rebuild}.", file=shard)


def _check_tfrecord(shard: Path, record: dict, classes: int, known: int, rebuild: str) -> None:
    index = shard.with_suffix(INDEX)
    if not index.is_file():
        raise _missing_index(shard, index, rebuild)
    try:
        records = tfrecord.parse_index(index)
    except ValueError:
        raise DataError("is not a TFRecord index (lines of 'offset size'): rebuild it with DALI's `tfrecord2idx "
                        f"{display_path(shard)} {display_path(index)}`.", file=index) from None
    size = shard.stat().st_size
    end = max((o + s for o, s in records), default=0)
    if size < end:
        raise DataError(f"is cut short: it holds {size} bytes, but its index {index.name} places data up to byte "
                        f"{end} (a copy that did not finish?). Copy it again, or run {rebuild}.", file=shard)
    with open(shard, "rb") as f:
        for n in {0, len(records) - 1} if records else ():
            offset, length = records[n]
            f.seek(offset)
            header = f.read(12)
            if len(header) < 12 or tfrecord.record_length(header) + 16 != length:
                raise DataError(f"does not match its index {index.name}: the index has a record of {length} bytes at "
                                f"byte {offset}, the file does not (an index of another shard?). Rebuild the index "
                                f"with DALI's `tfrecord2idx {display_path(shard)} {display_path(index)}`.", file=shard)
    if _trusted(shard, index, record):
        low, high = record.get("labels") or (0, -1)
    else:
        labels = []
        for n, example in enumerate(tfrecord.read_examples(shard, records)):
            if not isinstance(example.get(tfrecord.LABEL_KEY), int):
                raise DataError(f"record {n} has no label: no single int64 '{tfrecord.LABEL_KEY}' feature. Every record needs "
                                f"one; run {rebuild}.", file=shard)
            if not example.get(tfrecord.IMAGE_KEY):
                raise DataError(f"record {n} has no image ('{tfrecord.IMAGE_KEY}'); run {rebuild}.", file=shard)
            labels.append(example[tfrecord.LABEL_KEY])
        low, high = (min(labels), max(labels)) if labels else (0, -1)
    _check_labels(shard, low, high, classes, known, rebuild)


def _check_shard(tar: Path, record: dict, classes: int, known: int, rebuild: str) -> None:
    index = tar.with_suffix(INDEX)
    if not index.is_file():
        raise _missing_index(tar, index, rebuild)
    samples = parse_index(index)
    size = tar.stat().st_size
    end = max((o + s for sample in samples for o, s, _ in sample.components.values()), default=0)
    if size < end:
        raise DataError(f"is cut short: it holds {size} bytes, but its index {index.name} places data up to byte "
                        f"{end} (a copy that did not finish?). Copy it again, or run {rebuild}.", file=tar)
    _check_entry_names(tar, index, samples)
    for sample in samples:
        if not any(ext in sample.components for ext in IMAGE_EXTS):
            raise DataError(f"sample '{sample.key}' has no image (components {', '.join(sample.components)}; "
                            f"runner reads {', '.join(IMAGE_EXTS)}). Rebuild this shard with `runner data shard`.",
                            file=tar)
        if LABEL_EXT not in sample.components:
            raise DataError(f"sample '{sample.key}' has no label: no '{LABEL_EXT}' component (it has "
                            f"{', '.join(sample.components)}). Every sample needs one, or the reader would hand it "
                            f"out with an empty label; run {rebuild}.", file=tar)
    low, high = (record.get("labels") or (0, -1)) if _trusted(tar, index, record) else _label_range(tar, samples)
    _check_labels(tar, low, high, classes, known, rebuild)


def _check_entry_names(tar: Path, index: Path, samples: list[IndexedSample]) -> None:
    """The tar entry names at the offsets the index gives (first and last sample): another shard's index names
    other entries, or points past the end."""
    with open(tar, "rb") as f:
        for sample in (samples[0], samples[-1]) if samples else ():
            offset, _, name = next(iter(sample.components.values()))
            f.seek(max(0, offset - _TAR_BLOCK))
            header = f.read(_TAR_BLOCK)
            found = header[:100].split(b"\0", 1)[0].decode("utf-8", "replace")
            if offset < _TAR_BLOCK or found != name:
                raise DataError(f"does not match its index {index.name}: the index has '{name}' at byte {offset}, "
                                f"the tar has '{found or 'no entry'}' there (an index of another shard?). Rebuild the "
                                f"index with DALI's `wds2idx {display_path(tar)} {display_path(index)}`.", file=tar)


def _label_range(tar: Path, samples: list[IndexedSample]) -> tuple[int, int]:
    labels = read_labels(tar, samples)
    return (min(labels), max(labels)) if labels else (0, -1)


def read_labels(tar: Path, samples: list[IndexedSample]) -> list[int]:
    """Every sample's int32 label, read at the offsets of the index."""
    out = []
    with open(tar, "rb") as f:
        for sample in samples:
            offset, size, _ = sample.components[LABEL_EXT]
            f.seek(offset)
            data = f.read(size)
            if size != 4 or len(data) != 4:
                raise DataError(f"sample '{sample.key}' has a label of {size} bytes; '{LABEL_EXT}' holds one "
                                "little-endian int32.", file=tar)
            out.append(struct.unpack("<i", data)[0])
    return out


# ---- what a run records ----------------------------------------------------------------------------

def shard_fingerprint(split: ShardSplit) -> dict:
    """files (samples), bytes (of the tars), classes and a sha256 over "shard<TAB>size<TAB>index sha256" lines:
    two machines with the same fingerprint read the same shards (their contents are not hashed)."""
    lines, total = [], 0
    for tar in split.shards:
        size = tar.stat().st_size
        index = tar.with_suffix(INDEX)
        digest = index_digest(index) if index.is_file() else "-"
        total += size
        lines.append(f"{tar.name}\t{size}\t{digest}\n")
    return {"files": split.samples, "bytes": total, "classes": len(split.classes),
            "sha256": hashlib.sha256("".join(lines).encode()).hexdigest()}
