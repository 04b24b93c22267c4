"""`runner data synth|check|fingerprint|cache|shard`: make a synthetic ImageFolder, find files that do not decode,
print what a run would train on, decode a dataset once into a cache of arrays, write it as WebDataset shards."""
from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from rich.markup import escape

from runner import console
from runner.config.sections import SynthConfig
from runner.data.paths import DEFAULT_SKIP_LIST
from runner.errors import DataError, counted, display_path, first_names
from runner.progress import progress_bar

if TYPE_CHECKING:
    from rich.table import Table

    from runner.data.cache import CacheSummary
    from runner.data.scan import CheckReport, FileIssue

TABLE_ROWS = 50  # longer lists are in the skip list file


FOLDER_OF_SPLITS = "an ImageFolder ({root}/<class>/<image>) or a folder of splits ({root}/train, ...)"


def register(sub) -> None:
    p = sub.add_parser("data", help="dataset tools: synthetic ImageFolder, decode check, fingerprint, "
                                    "decoded or JPEG cache")
    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    defaults = SynthConfig()

    s = actions.add_parser("synth", help="write a synthetic ImageNet-like ImageFolder (DIR/train, DIR/val)")
    s.add_argument("dir", metavar="DIR", help="folder to create (nothing happens when it holds this set already)")
    s.add_argument("--classes", type=_positive, default=defaults.classes, metavar="N",
                   help="classes (default: %(default)s)")
    s.add_argument("--per-class", type=_positive, default=defaults.per_class, metavar="N",
                   help="training images per class (default: %(default)s)")
    s.add_argument("--eval-per-class", type=_positive, default=defaults.eval_per_class, metavar="N",
                   help="validation images per class (default: %(default)s)")
    s.add_argument("--min-side", type=_positive, default=defaults.min_side, metavar="PX",
                   help="smallest width or height (default: %(default)s)")
    s.add_argument("--max-side", type=_positive, default=defaults.max_side, metavar="PX",
                   help="largest width or height (default: %(default)s)")
    s.add_argument("--quality", type=_positive, default=defaults.quality, metavar="Q",
                   help="JPEG quality, 1-100 (default: %(default)s)")
    s.add_argument("--seed", type=int, default=0, help="same seed, same bytes (default: %(default)s)")
    s.add_argument("--workers", type=_positive, metavar="N", help="processes (default: the cores this process may use)")
    s.set_defaults(handler=run_synth)

    c = actions.add_parser("check", help="decode every image of an ImageFolder (each split of a folder of splits); "
                                         "write a skip list of bad files")
    c.add_argument("dir", metavar="DIR", help=FOLDER_OF_SPLITS.format(root="DIR"))
    c.add_argument("-o", "--output", metavar="FILE",
                   help=f"skip list to write, for one ImageFolder (default: DIR/{DEFAULT_SKIP_LIST}, in each split)")
    c.add_argument("--workers", type=_positive, metavar="N", help="processes (default: the cores this process may use)")
    c.set_defaults(handler=run_check)

    f = actions.add_parser("fingerprint", help="file count, bytes and a hash of names and sizes of an ImageFolder "
                                               "(each split of a folder of splits)")
    f.add_argument("dir", metavar="DIR", help=FOLDER_OF_SPLITS.format(root="DIR"))
    f.set_defaults(handler=run_fingerprint)

    k = actions.add_parser("cache", help="decode every image once into uint8 .npy arrays (a pre-decoded cache), "
                                         "or re-encode it as a smaller JPEG (--format jpeg)")
    k.add_argument("src", metavar="SRC", help=FOLDER_OF_SPLITS.format(root="SRC"))
    k.add_argument("dst", metavar="DST", help="cache folder to create or resume; mirrors SRC's folders")
    k.add_argument("--format", choices=("raw", "jpeg"), default="raw",
                   help="raw: decoded .npy arrays, read by pipelines/imagenet_*_cache.yaml; jpeg: an ImageFolder of "
                        "smaller JPEGs, read by the JPEG pipelines as they are (default: %(default)s)")
    k.add_argument("--max-side", type=_whole, metavar="PX",
                   help="shrink so that the longer side is at most PX, never enlarge (default: 256 raw, 320 jpeg)")
    k.add_argument("--quality", type=_whole, metavar="Q", help="JPEG quality of --format jpeg, 1-100 (default: 90)")
    k.add_argument("--workers", type=_positive, metavar="N", help="processes (default: the cores this process may use)")
    k.set_defaults(handler=run_cache)

    h = actions.add_parser("shard", help="write an ImageFolder (each split of a folder of splits, or a JPEG cache) as "
                                         "WebDataset (or TFRecord) shards with DALI's index files, read by pipelines/imagenet_*_wds "
                                         "(imagenet_*_tfrecord)")
    h.add_argument("src", metavar="SRC", help=FOLDER_OF_SPLITS.format(root="SRC"))
    h.add_argument("dst", metavar="DST", help="folder of shards to create or resume; one folder per split of SRC")
    h.add_argument("--format", choices=("webdataset", "tfrecord"), default="webdataset",
                   help="webdataset: tar shards, read by pipelines/imagenet_*_wds; tfrecord: TFRecord files of "
                        "tf.train.Example, read by pipelines/imagenet_*_tfrecord; each with DALI's .idx index "
                        "(default: %(default)s)")
    h.add_argument("--shard-size", type=_megabytes, default=256, metavar="MB",
                   help="about this many MB (10^6 bytes) of images per shard (default: %(default)s)")
    h.add_argument("--shuffle-seed", type=_seed, default=0, metavar="S",
                   help="shuffle the train split's images with this seed before dealing them into shards, so that "
                        "a reader going through the shards in turn sees the classes mixed; 'none' keeps the order "
                        "DALI's file reader reads the folder in (default: %(default)s)")
    h.add_argument("--train-split", default="train", metavar="NAME",
                   help="the split whose class folders define the labels (default: %(default)s)")
    h.add_argument("--workers", type=_positive, metavar="N", help="processes (default: the cores this process may use)")
    h.set_defaults(handler=run_shard)


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _whole(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a whole number") from None


def _megabytes(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a number of MB") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be more than 0, got {text}")
    return value


def _seed(text: str) -> int | None:
    if text.lower() == "none":
        return None
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a whole number or 'none'") from None


def run_synth(args) -> int:
    from runner.data.synth import generate_synthetic

    with progress_bar("generating") as progress:
        s = generate_synthetic(Path(args.dir), classes=args.classes, per_class=args.per_class,
                               eval_per_class=args.eval_per_class, min_side=args.min_side,
                               max_side=args.max_side, quality=args.quality, seed=args.seed,
                               workers=args.workers, progress=progress)
    where = escape(display_path(s.root))
    sizes = (f"{s.images} images ({s.train_images} train, {s.val_images} val, {s.classes} classes), "
             f"{s.total_bytes / 2**20:.1f} MiB, mean {s.mean_kib:.0f} KiB")
    if s.reused:
        console.out.print(f"{where} already holds this dataset: {sizes}. Nothing to do.")
    else:
        console.out.print(f"wrote {where}: {sizes}, in {s.seconds:.1f} s")
    return 0


def run_check(args) -> int:
    """Each split of DIR, or DIR itself, checked as one ImageFolder; exit 1 when any file does not decode."""
    root = Path(args.dir)
    from runner.data.shardset import shard_splits

    shards = shard_splits(root)
    if shards is not None:
        return _check_shards(shards, args)
    splits = _splits(root)
    if args.output and splits != [""]:
        raise DataError(f"holds splits ({', '.join(splits)}), each with its own skip list in its folder; --output "
                        f"names one file, so give it with one split (e.g. {display_path(root / splits[0])}), or leave "
                        "it out.", file=root)
    worst = 0
    for split in splits:
        if split:
            console.out.print(f"[bold]split {escape(split)}[/bold]")
        worst = max(worst, _check_one(root / split, args))
    return worst


def _check_shards(shards, args) -> int:
    """Each split of a shard set: the run's checks (a broken shard stops here), then every sample decoded."""
    from runner.data.shard_check import check_shard_images

    if args.output:
        raise DataError("names a skip list for an ImageFolder; a shard set lists the files its build left out in "
                        "its manifest, and a bad sample here means rebuilding its shard.", where="--output")
    worst = 0
    for split in shards:
        if split.split:
            console.out.print(f"[bold]split {escape(split.split)}[/bold]")
        with progress_bar("decoding") as progress:
            report = check_shard_images(split, workers=args.workers, progress=progress)
        if report.bad:
            console.out.print(_issues_table(f"{len(report.bad)} sample(s) that do not decode or are mislabelled",
                                            report.bad))
        console.out.print(_decoded_line(report).replace(" files decode", " samples decode")
                          + f" {len(split.shards)} shard(s) and their indexes whole.")
        worst = max(worst, 0 if report.ok else 1)
    return worst


def _splits(root: Path) -> list[str]:
    """ROOT's splits ([""]: ROOT is one ImageFolder), each scanned first: a layout mistake stops before any output
    (listing is cheap next to decoding every file)."""
    from runner.data.cache import find_splits
    from runner.data.scan import scan_data_folder

    splits = find_splits(root)
    for split in splits:
        scan_data_folder(root / split)
    return splits


def _check_one(folder: Path, args) -> int:
    from runner.data.scan import check_images, default_skip_list, write_skip_list

    with progress_bar("decoding") as progress:
        report = check_images(folder, workers=args.workers, progress=progress)
    if report.bad:
        console.out.print(_issues_table(f"{len(report.bad)} file(s) that do not decode", report.bad))
    if report.ignored:
        console.out.print(_issues_table(f"{counted(len(report.ignored), 'entry', 'entries')} ignored by the reader",
                                        report.ignored))
    console.out.print(_decoded_line(report))
    output = Path(args.output) if args.output else default_skip_list(report.root)
    try:
        write_skip_list(report, output)
    except OSError as e:
        raise DataError(f"cannot write the skip list ({e.strerror or e}); choose another file with --output FILE.",
                        file=output) from None
    console.out.print(f"skip list: {escape(display_path(output))} ({len(report.bad)} file(s))")
    return 0 if report.ok else 1


def _issues_table(title: str, issues: Sequence[FileIssue]) -> Table:
    rows = [[escape(issue.path), escape(issue.reason)] for issue in issues[:TABLE_ROWS]]
    if len(issues) > TABLE_ROWS:
        rows.append([f"... {len(issues) - TABLE_ROWS} more", ""])
    return console.table(title, ["file", "reason"], rows, justify_numbers=False)


def _decoded_line(report: CheckReport) -> str:
    decoded = report.checked - len(report.bad)
    formats = ", ".join(f"{fmt} {n}" for fmt, n in sorted(report.formats.items(), key=lambda kv: -kv[1]))
    notes = [f"{n} {what}" for n, what in ((report.greyscale, "greyscale"), (report.cmyk, "CMYK")) if n]
    line = f"{decoded} of {report.checked} files decode" + (f" ({formats})" if formats else "")
    if notes:
        line += f"; {', '.join(notes)} (DALI converts them to RGB)"
    return line + "."


def run_fingerprint(args) -> int:
    from runner.data.cache import find_splits
    from runner.data.manifest import find_manifest
    from runner.data.scan import fingerprint

    folder = Path(args.dir)
    from runner.data.shardset import shard_fingerprint, shard_splits

    shards = shard_splits(folder)
    if shards is not None:
        for split in shards:
            fp = shard_fingerprint(split)
            console.out.print(f"{escape(display_path(split.folder))}: {escape(split.describe())}; {fp['files']} "
                              f"samples in {len(split.shards)} shard(s), {fp['classes']} classes, {fp['bytes']} bytes")
            console.out.print(f"sha256 {fp['sha256']}")
        manifest = shards[0].manifest
        console.out.print(f"made from {escape(str(manifest.get('source')))}"
                          + (f" ({escape(manifest['source_cache'])})" if manifest.get("source_cache") else ""))
        for split, fp in (manifest.get("source_fingerprint") or {}).items():
            console.out.print(f"  source {split or '(one split)'}: {fp['files']} files in {fp['classes']} classes, "
                              f"{fp['bytes']} bytes, sha256 {fp['sha256']}")
        return 0
    found = find_manifest(folder)
    if found and found[0] == folder:  # a cache root: its splits, as the runs read them
        splits = list((found[1].get("summary") or {}).get("splits") or [""])
    else:
        splits = find_splits(folder)
    prints = {split: fingerprint(folder / split) for split in splits}  # all before any output: one may not scan
    if found:
        _print_manifest(*found)
    for split, fp in prints.items():
        console.out.print(f"{escape(display_path(folder / split))}: {fp['files']} files in {fp['classes']} classes, "
                          f"{fp['bytes']} bytes")
        console.out.print(f"sha256 {fp['sha256']}")
    return 0


def _print_manifest(root: Path, manifest: dict) -> None:
    from runner.data.manifest import describe, manifest_problem, source_now

    console.out.print(f"{escape(display_path(root))}: {escape(describe(manifest))}")
    console.out.print(f"made from {escape(str(manifest.get('source')))}")
    for split, fp in (manifest.get("source_fingerprint") or {}).items():
        now = source_now(root, manifest, split)
        console.out.print(f"  source {split or '(one split)'}: {fp['files']} files in {fp['classes']} classes, "
                          f"{fp['bytes']} bytes, sha256 {fp['sha256']}; {escape(now)}")
    s = manifest.get("summary")
    problem = manifest_problem(root, manifest)
    if problem:
        console.out.print(f"  {escape(problem)}")
    if s and "bytes_out" in s:
        console.out.print(f"  {s['images']} images ({s['copied']} copied as they are), {len(s['skipped'])} left "
                          f"out as undecodable; {_mib(s['bytes_out'])} for {_mib(s['bytes_in'])} of source images, "
                          f"{s['ratio']:.2f}x the disk")


def run_cache(args) -> int:
    from runner.data.cache import build_cache

    if args.format == "jpeg":
        return run_jpeg_cache(args)
    if args.quality is not None:
        raise DataError("applies to --format jpeg; the raw cache stores decoded pixels, without loss.",
                        where="--quality")
    max_side = 256 if args.max_side is None else args.max_side
    if max_side < 1:
        raise DataError(f"{max_side}: the longer side of a cached image is at least 1 px.", where="--max-side")
    with progress_bar("caching") as progress:
        s = build_cache(Path(args.src), Path(args.dst), max_side=max_side, workers=args.workers, progress=progress)
    _cache_notes(s)
    console.out.print(_cache_line(s))
    return 0


def run_jpeg_cache(args) -> int:
    from runner.data.jpeg_cache import build_jpeg_cache, jpeg_settings

    max_side = 320 if args.max_side is None else args.max_side
    quality = 90 if args.quality is None else args.quality
    jpeg_settings(max_side, quality)  # a bad value stops before the progress bar
    with progress_bar("encoding") as progress:
        s = build_jpeg_cache(Path(args.src), Path(args.dst), max_side=max_side, quality=quality,
                             workers=args.workers, progress=progress)
    _cache_notes(s)
    console.out.print(_cache_line(s, f"as JPEG (longer side <= {s.max_side} px, quality {s.quality}, {s.copied} "
                                     "small JPEGs copied as they are)"))
    return 0


def run_shard(args) -> int:
    from runner.data.shard_write import build_shards, describe_summary, shard_settings

    shard_settings(args.format, args.shard_size, args.shuffle_seed)  # a bad value stops before the progress bar
    with progress_bar("sharding") as progress:
        s = build_shards(Path(args.src), Path(args.dst), format=args.format, shard_mb=args.shard_size,
                         shuffle_seed=args.shuffle_seed, train_split=args.train_split, workers=args.workers,
                         progress=progress)
    if s.skipped:
        console.out.print(_issues_table(f"{len(s.skipped)} file(s) that do not decode, left out", s.skipped))
        console.out.print(f"skip list: {escape(display_path(s.skip_list))} ({len(s.skipped)} file(s))")
    console.out.print(escape(describe_summary(s)))
    return 0


def _cache_notes(s: CacheSummary) -> None:
    if s.skipped:
        console.out.print(_issues_table(f"{len(s.skipped)} file(s) that do not decode, left out", s.skipped))
        console.out.print(f"skip list: {escape(display_path(s.skip_list))} ({len(s.skipped)} file(s))")
    if s.stale:
        console.note(f"{display_path(s.root)} holds {counted(len(s.stale), 'entry', 'entries')} that no source image "
                     f"backs (removed, or moved to another class, since cached): {first_names(s.stale, 3)}. A run on "
                     "this cache would read each as an image of the class folder it sits in, so runs refuse the cache "
                     f"until they are removed; remove them (paths relative to {display_path(s.root)}), or build the "
                     "cache into a new folder.")


def _cache_line(s: CacheSummary, how: str | None = None) -> str:
    splits = ", ".join(f"{name} {n}" for name, n in s.splits.items() if name)
    what = f"{s.images} images" + (f" ({splits})" if splits else "") + f", {s.classes} classes"
    done = f"{s.written} written, {s.kept} already there" if s.kept else f"{s.written} written"
    how = how or f"(longer side <= {s.max_side} px)"
    return (f"cached {what} into {escape(display_path(s.root))} {how}: "
            f"{_mib(s.cache_bytes)} for {_mib(s.jpeg_bytes)} of source images, {s.ratio:.2f}x the disk; "
            f"{done}, in {s.seconds:.1f} s")


def _mib(n: int) -> str:
    if n >= 2**30:
        return f"{n / 2**30:.2f} GiB"
    return f"{n / 2**20:.1f} MiB" if n >= 2**20 else f"{n / 2**10:.0f} KiB"
