"""`runner data shard`: an ImageFolder (or a folder of splits, or a compact JPEG cache) as WebDataset or TFRecord
shards.

Each split's images are put in order (the train split shuffled with --shuffle-seed, the others in the order
DALI's file reader reads them), dealt into shards of about --shard-size MB, and each shard is written by one
process (webdataset's TarWriter, or the tfrecord package's Example records: runner/data/tfrecord.py): the source
file's bytes as they are, the label by class name from the train split's map, and the source path. DALI's own
wds2idx writes a tar's index. Layout and checks: runner/data/shardset.py.

Resumable as the caches are: a shard is written under a temporary name, indexed, renamed, and a record
(.shard-NNNNNN.json) written last; a rerun keeps every shard whose record matches its plan (same samples, same
sizes) and whose files are the size recorded. Files that do not decode are left out, listed in the manifest
and in DST/.runner-bad-files.txt. The manifest is complete only when every split is.
"""
from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import random
import struct
import time
from contextlib import contextmanager, redirect_stdout
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from typing import NamedTuple

from runner.data.cache import (
    MadeFolder,
    check_outside_source,
    claim_cache,
    dead_temporary,
    find_splits,
    temporary_path,
    write_json_atomic,
)
from runner.data.labels import LabelMap, extra_classes, extra_classes_error, load_label_map
from runner.data.manifest import describe as describe_cache
from runner.data.manifest import find_manifest as find_cache_manifest
from runner.data.paths import DEFAULT_SKIP_LIST
from runner.data.pool import Progress, map_in_pool
from runner.data.scan import FileIssue, fingerprint, scan_image_folder, setup_decoder, try_decode
from runner.data.shardset import (
    INDEX,
    LABEL_EXT,
    LABELS,
    MARKER,
    META_EXT,
    SHARD_PREFIX,
    SUFFIX,
    TAR,
    TEXT_LABEL_EXT,
    TFRECORD,
    image_ext,
    index_digest,
)
from runner.data.tfrecord import RecordWriter, write_index
from runner.errors import DataError, display_path

# webdataset is imported where tar shards are written: only `runner data shard` needs it.

log = logging.getLogger(__name__)

FORMATS = ("webdataset", "tfrecord")
VERSION = 1          # bump when a shard's bytes change for the same source and settings
TAR_MTIME = 0        # a fixed entry time: the same source and settings give the same bytes
SHARD_FOLDER = MadeFolder(marker=MARKER, made_by="runner data shard", held="shards", it="them", kind="a shard set",
                          noun="the shards", remake="write the shards")
_ENTRY_OVERHEAD = {"webdataset": 4 * 512 + 512, "tfrecord": 128}  # headers (tar: 4 entries, padded), roughly


@dataclass(frozen=True, kw_only=True)
class ShardSummary:
    root: Path
    source: Path
    format: str
    splits: dict[str, dict]        # split -> {"samples", "shards", "bytes"}
    classes: int
    written: int                   # shards written by this call
    kept: int                      # shards a previous call wrote, kept
    source_bytes: int
    shard_bytes: int
    seconds: float
    skipped: tuple[FileIssue, ...]

    @property
    def samples(self) -> int:
        return sum(s["samples"] for s in self.splits.values())

    @property
    def skip_list(self) -> Path:
        return self.root / DEFAULT_SKIP_LIST


def shard_settings(format: str, shard_mb: float, shuffle_seed: int | None) -> dict:
    """The manifest's settings (a rerun must match them); DataError for values out of range."""
    if format not in FORMATS:
        raise DataError(f"unknown shard format '{format}'; one of {', '.join(FORMATS)}.", where="--format")
    if not shard_mb > 0:
        raise DataError(f"{shard_mb:g} MB: a shard holds at least one image; give a positive size (WebDataset's "
                        "guidance is 100 MB to 1 GB per shard; the default is 256).", where="--shard-size")

    return {"format": format, "version": VERSION, "shard_mb": shard_mb, "shuffle_seed": shuffle_seed,
            format: version(format)}


def build_shards(src: Path, dst: Path, *, format: str = "webdataset", shard_mb: float = 256,
                 shuffle_seed: int | None = 0, train_split: str = "train", workers: int | None = None,
                 progress: Progress | None = None) -> ShardSummary:
    """Write SRC's splits into DST as shards (see the module docstring)."""
    src, dst = Path(src), Path(dst)
    settings = shard_settings(format, shard_mb, shuffle_seed)
    splits = find_splits(src)
    scans = {split: scan_image_folder(src / split) for split in splits}  # SRC's mistakes before DST is touched
    labels = _label_map(src, splits, train_split)
    check_outside_source(src, dst, SHARD_FOLDER)
    plans = {split: _plan(src, dst, split, scans[split], labels, settings, shuffle=split in ("", train_split))
             for split in splits}
    claim_cache(dst, settings, src, SHARD_FOLDER)
    start = time.perf_counter()
    tasks = [task for split in splits for task in plans[split]]
    for split in splits:
        (dst / split).mkdir(parents=True, exist_ok=True)
        _remove_unplanned(dst / split, {Path(t.tar).name for t in plans[split]})
    outcomes = map_in_pool(_write_shard, tasks, workers=workers, progress=progress, initializer=setup_decoder)
    manifest, summary = _summarise(src, dst, settings, splits, labels, tasks, outcomes, time.perf_counter() - start)
    manifest["train_split"] = train_split if splits != [""] else ""
    (dst / LABELS).write_text(labels.to_json(), encoding="utf-8")
    _write_skip_list(summary)
    write_json_atomic(dst / MARKER, manifest)
    log.info("wrote %d shards (%d kept) in %.1f s", summary.written, summary.kept, summary.seconds)
    return summary


def _label_map(src: Path, splits: list[str], train_split: str) -> LabelMap:
    if splits == [""]:
        return load_label_map(src)
    if train_split not in splits:
        raise DataError(f"holds the splits {', '.join(splits)} but no '{train_split}': the label map is the train "
                        "split's classes. Name the train split with --train-split.", file=src)
    labels = load_label_map(src / train_split)
    for split in splits:
        extra = extra_classes(labels, src / split)
        if extra:
            raise extra_classes_error(labels, src / split, extra, {})
    return labels


# ---- the plan ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class _Sample:
    key: str
    path: str         # source file, absolute
    name: str         # relative to the split: class/file
    label: int
    size: int


@dataclass(frozen=True)
class _ShardTask:
    tar: str                  # the shard's file (a .tar or a .tfrecord)
    split: str
    samples: tuple[_Sample, ...]
    format: str = "webdataset"

    @property
    def digest(self) -> str:
        text = "".join(f"{s.key}\t{s.name}\t{s.label}\t{s.size}\n" for s in self.samples)
        return hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()


def _plan(src: Path, dst: Path, split: str, scan, labels: LabelMap, settings: dict, *,
          shuffle: bool) -> list[_ShardTask]:
    """The split's samples in reading order (the train split shuffled), dealt into shards of about shard_mb."""
    index = labels.index
    folder = src / split
    samples = []
    for rel, label in scan.files:
        samples.append((rel, index[scan.classes[label]], (folder / rel).stat().st_size))
    if shuffle and settings["shuffle_seed"] is not None:
        random.Random(settings["shuffle_seed"]).shuffle(samples)
    budget = settings["shard_mb"] * 1e6
    tasks, current, filled = [], [], 0.0
    for n, (rel, label, size) in enumerate(samples):
        if current and filled + size + _ENTRY_OVERHEAD[settings["format"]] > budget:
            tasks.append(current)
            current, filled = [], 0.0
        current.append(_Sample(key=f"{n:08d}", path=str(folder / rel), name=rel, label=label, size=size))
        filled += size + _ENTRY_OVERHEAD[settings["format"]]
    if current:
        tasks.append(current)
    out, suffix = dst / split, SUFFIX[settings["format"]]
    return [_ShardTask(tar=str(out / f"{SHARD_PREFIX}{k:06d}{suffix}"), split=split, samples=tuple(part),
                       format=settings["format"]) for k, part in enumerate(tasks)]


def _remove_unplanned(folder: Path, planned: set[str]) -> None:
    """Shards of an earlier build that this plan does not have (the source changed), and the temporary files of
    builds on this machine whose process is gone: ours, in our folder."""
    for path in folder.glob(".*.tmp-*"):
        if dead_temporary(path.name):
            path.unlink(missing_ok=True)
    for tar in [*folder.glob(f"{SHARD_PREFIX}*{TAR}"), *folder.glob(f"{SHARD_PREFIX}*{TFRECORD}")]:
        if tar.name not in planned:
            for path in (tar, tar.with_suffix(INDEX), _record_path(tar)):
                path.unlink(missing_ok=True)


# ---- one shard (in a pool worker) -----------------------------------------------------------------

class _Outcome(NamedTuple):
    status: str                   # written | kept
    record: dict                  # the shard's manifest entry
    skipped: tuple[tuple[str, str], ...]


def _record_path(tar: Path) -> Path:
    return tar.with_name(f".{tar.stem}.json")


def _write_shard(task: _ShardTask) -> _Outcome:
    tar = Path(task.tar)
    kept = _kept(task, tar)
    if kept is not None:
        return _Outcome("kept", kept, tuple(tuple(x) for x in kept.get("skipped", ())))
    tmp = temporary_path(tar)
    index = tar.with_suffix(INDEX)
    skipped, labels, source_bytes = [], [], 0
    try:
        with open(tmp, "wb") as stream:
            write = _tfrecord_writer(stream, index) if task.format == "tfrecord" else _tar_writer(stream, tmp, index)
            with write as add:
                for s in task.samples:
                    reason = try_decode(s.path)[0]
                    if reason:
                        skipped.append((s.name, reason))
                        continue
                    data = Path(s.path).read_bytes()
                    source_bytes += len(data)
                    add(s, data)
                    labels.append(s.label)
        os.replace(tmp, tar)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    record = {"name": tar.name, "index": index.name, "samples": len(labels), "bytes": tar.stat().st_size,
              "mtime_ns": tar.stat().st_mtime_ns,
              "index_sha256": index_digest(index), "labels": [min(labels), max(labels)] if labels else [0, -1],
              "source_bytes": source_bytes, "plan": task.digest, "skipped": [list(x) for x in skipped]}
    write_json_atomic(_record_path(tar), record)
    return _Outcome("written", record, tuple(skipped))


@contextmanager
def _tar_writer(stream, tmp: Path, index: Path):
    """add(sample, image bytes) into a tar with webdataset's TarWriter; DALI's wds2idx indexes it at the end."""
    from webdataset import TarWriter

    with TarWriter(stream, mtime=TAR_MTIME) as writer:
        def add(s: _Sample, data: bytes) -> None:
            writer.write({"__key__": s.key, image_ext(s.name): data, TEXT_LABEL_EXT: str(s.label).encode(),
                          LABEL_EXT: struct.pack("<i", s.label),
                          META_EXT: json.dumps({"path": s.name, "class": s.name.rsplit("/", 1)[0]},
                                               ensure_ascii=False).encode("utf-8", "surrogateescape")})
        yield add
    stream.flush()
    _index(tmp, index)


@contextmanager
def _tfrecord_writer(stream, index: Path):
    """add(sample, image bytes) as one tf.train.Example record; the index (offset, size per record) at the end."""
    writer = RecordWriter(stream)
    yield lambda s, data: writer.write(data, s.label, s.name.rsplit("/", 1)[0], s.name)
    tmp = temporary_path(index)
    write_index(writer.index, tmp)
    os.replace(tmp, index)


def _index(tar: Path, index: Path) -> None:
    """DALI's wds2idx over the written tar (GNU tar lists the offsets), into a temporary file renamed into place."""
    from wds2idx import IndexCreator

    tmp = temporary_path(index)
    with redirect_stdout(io.StringIO()), IndexCreator(str(tar), str(tmp), verbose=False) as creator:
        creator.create_index()
    os.replace(tmp, index)


def _kept(task: _ShardTask, tar: Path) -> dict | None:
    """The record of a shard an earlier call wrote for this very plan, when its files are whole."""
    try:
        record = json.loads(_record_path(tar).read_text())
        index = tar.with_suffix(INDEX)
        if record.get("plan") == task.digest and tar.stat().st_size == record["bytes"] \
                and index_digest(index) == record["index_sha256"]:
            return record
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return None


# ---- the manifest -----------------------------------------------------------------------------------

def _summarise(src: Path, dst: Path, settings: dict, splits: list[str], labels: LabelMap, tasks: list[_ShardTask],
               outcomes: list[_Outcome], seconds: float) -> tuple[dict, ShardSummary]:
    records: dict[str, dict] = {split: {"samples": 0, "bytes": 0, "shards": []} for split in splits}
    skipped = []
    for task, outcome in zip(tasks, outcomes):
        r = records[task.split]
        entry = {k: v for k, v in outcome.record.items() if k not in ("plan", "skipped")}
        r["shards"].append(entry)
        r["samples"] += entry["samples"]
        r["bytes"] += entry["bytes"]
        prefix = f"{task.split}/" if task.split else ""
        skipped += [FileIssue(prefix + name, reason) for name, reason in outcome.skipped]
    cache = find_cache_manifest(src)
    manifest = {"made_by": "runner data shard", "settings": settings, "source": str(src.resolve()),
                "source_cache": describe_cache(cache[1]) if cache else None, "complete": True,
                "source_fingerprint": {split: fingerprint(src / split) for split in splits},
                "classes": list(labels.classes), "splits": records,
                "skipped": [list(issue) for issue in skipped], "seconds": round(seconds, 3)}
    summary = ShardSummary(
        root=dst, source=src, format=settings["format"], classes=len(labels),
        splits={s: {"samples": r["samples"], "shards": len(r["shards"]), "bytes": r["bytes"]} for s, r in records.items()},
        written=sum(o.status == "written" for o in outcomes), kept=sum(o.status == "kept" for o in outcomes),
        source_bytes=sum(o.record.get("source_bytes", 0) for o in outcomes),
        shard_bytes=sum(r["bytes"] for r in records.values()), seconds=round(seconds, 3), skipped=tuple(skipped))
    return manifest, summary


def _write_skip_list(summary: ShardSummary) -> None:
    lines = [f"# files under {summary.source.resolve()} that do not decode, left out of the shards (runner data shard):",
             f"# {len(summary.skipped)}; one path relative to that folder per line, its reason on the comment line above."]
    for issue in summary.skipped:
        lines += [f"# {issue.reason}", issue.path]
    summary.skip_list.write_text("\n".join(lines) + "\n", encoding="utf-8", errors="surrogateescape")


def describe_summary(s: ShardSummary) -> str:
    parts = ", ".join(f"{name or 'one split'} {v['samples']} in {v['shards']} shard(s)" for name, v in s.splits.items())
    done = f"{s.written} written, {s.kept} already there" if s.kept else f"{s.written} written"
    return (f"sharded {s.samples} images ({parts}), {s.classes} classes, into {display_path(s.root)} as {s.format}: "
            f"{s.shard_bytes / 2**20:.1f} MiB for {s.source_bytes / 2**20:.1f} MiB of source images; {done}, in "
            f"{s.seconds:.1f} s")
