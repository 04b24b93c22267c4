"""`runner data check` of a shard split: the checks a run makes (runner.data.shardset.check_shard_split), then
every sample's image decoded and every label read, one process per shard."""
from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from runner.data.pool import Progress, map_in_pool
from runner.data.scan import CheckReport, FileIssue, setup_decoder, try_decode_bytes
from runner.data.shardset import (
    IMAGE_EXTS,
    LABEL_EXT,
    META_EXT,
    ShardSplit,
    check_shard_split,
    parse_index,
    read_labels,
)
from runner.data.tfrecord import IMAGE_KEY, LABEL_KEY, NAME_KEY, read_examples
from runner.data.tfrecord import parse_index as parse_records


def check_shard_images(split: ShardSplit, *, workers: int | None = None,
                       progress: Progress | None = None) -> CheckReport:
    """A CheckReport whose `bad` names samples as 'SHARD.tar: KEY (class/file)' with why they fail."""
    check_shard_split(split)
    tasks = [(str(shard), len(split.classes), split.format) for shard in split.shards]
    results = map_in_pool(_check_shard, tasks, workers=workers, progress=progress, initializer=setup_decoder)
    bad, formats, modes, checked = [], Counter(), Counter(), 0
    for issues, fmts, mds, n in results:
        bad += [FileIssue(*issue) for issue in issues]
        formats.update(fmts)
        modes.update(mds)
        checked += n
    return CheckReport(root=split.folder, checked=checked, bad=tuple(bad), ignored=(), formats=dict(formats),
                       modes=dict(modes))


def _check_shard(task: tuple[str, int, str]) -> tuple[list[tuple[str, str]], Counter, Counter, int]:
    """One shard's samples: each label within the classes, each image decoded."""
    shard, classes, format = Path(task[0]), task[1], task[2]
    issues, formats, modes, checked = [], Counter(), Counter(), 0
    for where, label, label_name, image in _tfrecord_samples(shard) if format == "tfrecord" else _tar_samples(shard):
        checked += 1
        if not isinstance(label, int) or not 0 <= label < classes:
            issues.append((where, f"label {label} is beyond the {classes} classes ({label_name})"))
            continue
        reason, fmt, mode = try_decode_bytes(image())
        if reason:
            issues.append((where, reason))
        else:
            formats[fmt] += 1
            modes[mode] += 1
    return issues, formats, modes, checked


def _tar_samples(tar: Path):
    """(where, label, its component, () -> image bytes) for each sample of a WebDataset shard."""
    samples = parse_index(tar.with_suffix(".idx"))
    labels = read_labels(tar, samples)
    with open(tar, "rb") as f:
        for sample, label in zip(samples, labels):
            source = ""
            if META_EXT in sample.components:
                try:
                    source = f" ({json.loads(_read(f, sample, META_EXT))['path']})"
                except (ValueError, KeyError, TypeError):
                    pass
            ext = next(e for e in IMAGE_EXTS if e in sample.components)
            yield (f"{tar.name}: {sample.key}{source}", label, LABEL_EXT,
                   lambda sample=sample, ext=ext: _read(f, sample, ext))


def _tfrecord_samples(shard: Path):
    """(where, label, its feature, () -> image bytes) for each record of a TFRecord shard."""
    for n, example in enumerate(read_examples(shard, parse_records(shard.with_suffix(".idx")))):
        name = example.get(NAME_KEY)
        where = f"{shard.name}: record {n}" + (f" ({name.decode('utf-8', 'replace')})" if isinstance(name, bytes) else "")
        yield where, example.get(LABEL_KEY), LABEL_KEY, lambda example=example: example.get(IMAGE_KEY) or b""


def _read(f, sample, ext: str) -> bytes:
    offset, size, _ = sample.components[ext]
    f.seek(offset)
    return f.read(size)
