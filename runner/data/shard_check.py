"""`runner data check` of a shard split: the checks a run makes (runner.data.shardset.check_shard_split), then
every sample's image decoded and every label read, one process per shard."""
from __future__ import annotations

import io
from collections import Counter
from pathlib import Path

from runner.data.pool import Progress, map_in_pool
from runner.data.scan import CheckReport, FileIssue, setup_decoder
from runner.data.shardset import (
    IMAGE_EXTS,
    LABEL_EXT,
    META_EXT,
    ShardSplit,
    check_shard_split,
    parse_index,
    read_labels,
)


def check_shard_images(split: ShardSplit, *, workers: int | None = None,
                       progress: Progress | None = None) -> CheckReport:
    """A CheckReport whose `bad` names samples as 'SHARD.tar: KEY (class/file)' with why they fail."""
    check_shard_split(split)
    tasks = [(str(tar), len(split.classes)) for tar in split.shards]
    check = _check_tfrecord if split.format == "tfrecord" else _check_shard
    results = map_in_pool(check, tasks, workers=workers, progress=progress, initializer=setup_decoder)
    bad, formats, modes, checked = [], Counter(), Counter(), 0
    for issues, fmts, mds, n in results:
        bad += [FileIssue(*issue) for issue in issues]
        formats.update(fmts)
        modes.update(mds)
        checked += n
    return CheckReport(root=split.folder, checked=checked, bad=tuple(bad), ignored=(), formats=dict(formats),
                       modes=dict(modes))


def _check_shard(task: tuple[str, int]) -> tuple[list[tuple[str, str]], Counter, Counter, int]:
    import json

    tar, classes = Path(task[0]), task[1]
    samples = parse_index(tar.with_suffix(".idx"))
    labels = read_labels(tar, samples)
    issues, formats, modes = [], Counter(), Counter()
    with open(tar, "rb") as f:
        for sample, label in zip(samples, labels):
            source = ""
            if META_EXT in sample.components:
                try:
                    source = f" ({json.loads(_read(f, sample, META_EXT))['path']})"
                except (ValueError, KeyError, TypeError):
                    pass
            where = f"{tar.name}: {sample.key}{source}"
            if not 0 <= label < classes:
                issues.append((where, f"label {label} is beyond the {classes} classes ({LABEL_EXT})"))
                continue
            ext = next(e for e in IMAGE_EXTS if e in sample.components)
            reason, fmt, mode = decode_bytes(_read(f, sample, ext))
            if reason:
                issues.append((where, reason))
            else:
                formats[fmt] += 1
                modes[mode] += 1
    return issues, formats, modes, len(samples)


def _check_tfrecord(task: tuple[str, int]) -> tuple[list[tuple[str, str]], Counter, Counter, int]:
    from runner.data.tfrecord import IMAGE_KEY, LABEL_KEY, NAME_KEY, read_examples
    from runner.data.tfrecord import parse_index as parse_records

    shard, classes = Path(task[0]), task[1]
    examples = read_examples(shard, parse_records(shard.with_suffix(".idx")))
    issues, formats, modes = [], Counter(), Counter()
    for n, example in enumerate(examples):
        name = example.get(NAME_KEY)
        where = f"{shard.name}: record {n}" + (f" ({name.decode('utf-8', 'replace')})" if isinstance(name, bytes) else "")
        label = example.get(LABEL_KEY)
        if not isinstance(label, int) or not 0 <= label < classes:
            issues.append((where, f"label {label} is beyond the {classes} classes ({LABEL_KEY})"))
            continue
        reason, fmt, mode = decode_bytes(example.get(IMAGE_KEY) or b"")
        if reason:
            issues.append((where, reason))
        else:
            formats[fmt] += 1
            modes[mode] += 1
    return issues, formats, modes, len(examples)


def _read(f, sample, ext: str) -> bytes:
    offset, size, _ = sample.components[ext]
    f.seek(offset)
    return f.read(size)


def decode_bytes(data: bytes) -> tuple[str | None, str | None, str | None]:
    """runner.data.scan.try_decode for an image held in memory."""
    from PIL import Image, UnidentifiedImageError

    from runner.data.pixels import dali_refuses, rgb_as_dali

    if not data:
        return "zero bytes", None, None
    try:
        with Image.open(io.BytesIO(data)) as image:
            fmt, mode = image.format, image.mode
            image.load()
            rgb_as_dali(image)
    except UnidentifiedImageError:
        return "not an image", None, None
    except Exception as e:  # noqa: BLE001 - any decoder failure is a bad sample, reported with its reason
        message = str(e).splitlines()[0] if str(e) else type(e).__name__
        return f"does not decode: {message}", None, None
    return dali_refuses(fmt, mode), fmt, mode
