"""Files against shards: the time to list a split, open every file of it, and read all of its bytes.

    .venv/bin/python bench/shard_listing.py FOLDER SHARDS [SHARDS ...] [--split train] [--repeat 3] [--name WHAT]

FOLDER is an ImageFolder of splits (e.g. `runner data synth` output), each SHARDS the same images as `runner data
shard FOLDER SHARDS [--format tfrecord]` wrote them. Per layout and page-cache state, the median of `--repeat` runs of:

- list: what a reader does before its first sample: the folder's class folders scanned for their files (as DALI's
  file reader and runner's scan do), or the shard folder's tars listed and their DALI indexes parsed;
- open: every file opened and closed (the images, or the tars and indexes);
- read: every byte read once, in reading order (an epoch's I/O, no decode).

Cold runs drop the page cache first: `echo 3 > /proc/sys/vm/drop_caches` where this process may write it, else
posix_fadvise(DONTNEED) on every file of the split (it drops clean pages of those files only; the table says
which was used). Warm runs follow a read of everything. Writes bench/results/shard-listing-WHAT.csv and .md.
"""
from __future__ import annotations

import argparse
import csv
import os
import platform
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
RESULTS = ROOT / "bench" / "results"
CHUNK = 1 << 20


def folder_files(split: Path) -> list[str]:
    from runner.data.scan import scan_image_folder

    scan = scan_image_folder(split)
    return [str(split / rel) for rel, _ in scan.files]


def shard_files(split: Path) -> list[str]:
    from runner.data import tfrecord
    from runner.data.shardset import find_shard_split, parse_index

    shards = find_shard_split(split)
    parse = tfrecord.parse_index if shards.format == "tfrecord" else parse_index
    for index in shards.indexes:
        parse(index)
    return [str(p) for pair in zip(shards.shards, shards.indexes) for p in pair]


def open_all(files: list[str]) -> None:
    for path in files:
        os.close(os.open(path, os.O_RDONLY))


def read_all(files: list[str]) -> int:
    total = 0
    for path in files:
        with open(path, "rb", buffering=0) as f:
            while chunk := f.read(CHUNK):
                total += len(chunk)
    return total


def drop_cache(files: list[str]) -> str:
    os.sync()
    try:
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
        return "drop_caches"
    except OSError:
        for path in files:
            fd = os.open(path, os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)
        return "fadvise"


def timed(fn, *args) -> float:
    start = time.perf_counter()
    fn(*args)
    return time.perf_counter() - start


def measure(split: Path, lister, repeat: int) -> list[dict]:
    files = lister(split)
    nbytes = sum(os.stat(p).st_size for p in files)
    rows = []
    for cache in ("cold", "warm"):
        times = {"list": [], "open": [], "read": []}
        how = "-"
        for _ in range(repeat):
            if cache == "cold":
                how = drop_cache(files)
                times["list"].append(timed(lister, split))
                how = drop_cache(files)
                times["open"].append(timed(open_all, files))
                how = drop_cache(files)
                times["read"].append(timed(read_all, files))
            else:
                read_all(files)
                times["list"].append(timed(lister, split))
                times["open"].append(timed(open_all, files))
                times["read"].append(timed(read_all, files))
        read = statistics.median(times["read"])
        rows.append({"files": len(files), "bytes": nbytes, "cache": cache, "dropped_by": how,
                     "list_s": round(statistics.median(times["list"]), 4),
                     "open_s": round(statistics.median(times["open"]), 4),
                     "read_s": round(read, 4), "read_mb_per_s": round(nbytes / 1e6 / read, 1)})
    return rows


def machine() -> str:
    return f"{platform.node()} {platform.processor() or platform.machine()}, {os.cpu_count()} cores"


def markdown(rows: list[dict], images: int) -> str:
    lines = [f"{images} images; median of the runs; list = scan (folder) or shards + DALI indexes", "",
             "| layout | cache | files | MB | list s | open s | read s | read MB/s | cold by |",
             "|---|---|---:|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        lines.append(f"| {r['layout']} | {r['cache']} | {r['files']:,} | {r['bytes'] / 1e6:,.0f} | {r['list_s']:.3f} | "
                     f"{r['open_s']:.3f} | {r['read_s']:.3f} | {r['read_mb_per_s']:,.0f} | {r['dropped_by']} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("folder", type=Path)
    p.add_argument("shards", type=Path, nargs="+")
    p.add_argument("--split", default="train")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--name", default=f"cpu{os.cpu_count()}")
    p.add_argument("--out", type=Path, default=RESULTS)
    args = p.parse_args()
    rows = []
    from runner.data.shardset import find_shard_split

    layouts = [("files", args.folder, folder_files)]
    layouts += [(f"shards ({find_shard_split(root / args.split).format})", root, shard_files) for root in args.shards]
    for layout, root, lister in layouts:
        for row in measure(root / args.split, lister, args.repeat):
            rows.append({"layout": layout, **row})
    images = len(folder_files(args.folder / args.split))
    args.out.mkdir(parents=True, exist_ok=True)
    stem = args.out / f"shard-listing-{args.name}"
    with open(stem.with_suffix(".csv"), "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    table = markdown(rows, images)
    shards = " ".join(str(s) for s in args.shards)
    stem.with_suffix(".md").write_text(f"`bench/shard_listing.py {args.folder} {shards} --split {args.split} "
                                       f"--repeat {args.repeat}` on {machine()}\n\n" + table)
    print(table)
    print(f"wrote {stem}.csv, {stem}.md")


if __name__ == "__main__":
    main()
