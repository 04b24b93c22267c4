"""Loader-only images/s on this machine's CPU: the DALI pipeline compiled from experiments/quickstart.yaml
against the torchvision ImageFolder + DataLoader baseline with equivalent transforms.

Two image sizes: the quickstart's own data (80-120 px JPEGs, crop 64) and the same experiment at an
ImageNet-like size (400-640 px JPEGs of ~120 KiB, crop 224). DALI runs with data.num_threads=2, the
DataLoader with 2 and with 1 worker processes (the main process also works: it collates nothing, but
it receives and unpickles every batch). Each measurement builds a fresh loader, takes warm-up batches
untimed, then times a fixed number of batches (crossing epochs as needed); it is repeated and the median
and the spread (min-max) are reported. Nothing else is done with the batches: no model, no copy.

Writes (replaces) the section "CPU loaders on a 2-core machine" of docs/benchmarks.md.

    .venv/bin/python bench/cpu_loaders.py            # from the repository root; data goes to data/synth
"""
from __future__ import annotations

import argparse
import datetime
import gc
import os
import platform
import re
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
EXPERIMENT = REPO / "experiments" / "quickstart.yaml"
SECTION = "CPU loaders on a 2-core machine"
NORMALIZE = "Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225])"


CACHE_MAX_SIDE = 256
RETRY_UNTIL = float("inf")  # time.monotonic() after which runs are not measured again (--retry-for)


@dataclass(frozen=True)
class Size:
    label: str
    crop: int
    overrides: tuple[str, ...]     # on top of quickstart.yaml
    warmup: int                    # batches, untimed
    batches: int                   # batches, timed
    variants: bool = False         # also the fused-decoder pipeline and the pre-decoded cache


SIZES = (
    Size("80-120 px JPEGs, crop 64 (quickstart)", 64, (), warmup=32, batches=300),
    Size("400-640 px JPEGs, crop 224 (ImageNet-like)", 224,
         ("data.synth.min_side=400", "data.synth.max_side=640", "pipelines.train.params.size=224"),
         warmup=10, batches=100, variants=True),
)


def loaders(size: Size, threads: int, cache: Path | None) -> list[tuple[str, str, tuple[str, ...]]]:
    """(loader label, threads/workers label, overrides) for one image size."""
    train = ", ".join(f'"{t}"' for t in (f"RandomResizedCrop({size.crop})", "RandomHorizontalFlip()",
                                           "ToTensor()", NORMALIZE))
    tv = ("data.loader=torchvision", f"data.torchvision.train=[{train}]")
    dali = ("data.loader=dali", f"data.num_threads={threads}")
    rows = [("DALI CPU pipeline (imagenet_train)", f"{threads} threads", dali)]
    for w in sorted({threads, max(1, threads - 1)}, reverse=True):
        rows.append(("torchvision DataLoader", f"{w} worker{'s' if w > 1 else ''}",
                     tv + (f"data.torchvision.num_workers={w}",)))
    if size.variants:
        rows.append(("DALI CPU pipeline (imagenet_train_fused: crop decoded only)", f"{threads} threads",
                     dali + ("pipelines.train.use=imagenet_train_fused",)))
    if size.variants and cache is not None:
        rows.append((f"DALI CPU pipeline (imagenet_train_cache: .npy, longer side {CACHE_MAX_SIDE})",
                     f"{threads} threads", dali + ("pipelines.train.use=imagenet_train_cache", f"data.root={cache}")))
    return rows


def ensure_data(overrides: tuple[str, ...]) -> Path:
    """The experiment's synthetic set (generated once; generate_synthetic returns at once when it exists)."""
    from runner.config.load import load_experiment
    from runner.data.paths import synth_dir
    from runner.data.synth import generate_synthetic

    s = load_experiment(EXPERIMENT, list(overrides)).config.data.synth
    root = synth_dir(s)
    generate_synthetic(root, classes=s.classes, per_class=s.per_class, eval_per_class=s.eval_per_class,
                       min_side=s.min_side, max_side=s.max_side, quality=s.quality)
    return root


def ensure_cache(root: Path) -> Path:
    """`runner data cache ROOT ROOT-cache-mMAX_SIDE` (resumes: returns at once when complete)."""
    from runner.data.cache import build_cache

    dst = root.parent.parent / "cache" / f"{root.name}-m{CACHE_MAX_SIDE}"
    build_cache(root, dst, max_side=CACHE_MAX_SIDE)
    return dst


def images_per_second(overrides: tuple[str, ...], warmup: int, batches: int) -> tuple[float, float]:
    """(images/s, share of the machine's CPU time that other processes used meanwhile)."""
    busy, own, wall = _machine_busy(), _own_cpu(), time.perf_counter()
    rate = _rate(overrides, warmup, batches)
    gc.collect()  # the DataLoader's workers are joined (and their CPU time counted) when it is collected
    others = (_machine_busy() - busy) - (_own_cpu() - own)  # workers are reaped by now: children's times count
    return rate, max(0.0, others / ((time.perf_counter() - wall) * (os.cpu_count() or 1)))


def quiet_run(overrides: tuple[str, ...], warmup: int, batches: int, max_others: float,
              retries: int = 2) -> tuple[float, float]:
    """images_per_second, taken again (up to `retries` times, after waiting for a quiet moment) when other
    processes took more than `max_others` of the CPU: on a shared 2-core machine they halve a result."""
    for _ in range(retries + 1):
        _wait_for_quiet(max_others, timeout=min(30, max(0, RETRY_UNTIL - time.monotonic())))
        rate, others = images_per_second(overrides, warmup, batches)
        if others <= max_others or time.monotonic() > RETRY_UNTIL:
            break
        print(f"    other processes took {100 * others:.0f}% of the CPU; measuring again", file=sys.stderr)
    return rate, others


def _wait_for_quiet(max_others: float, timeout: float) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        before = _machine_busy()
        time.sleep(1)
        if (_machine_busy() - before) / (os.cpu_count() or 1) <= max_others / 2:
            return


def _machine_busy() -> float:
    """CPU seconds all processes spent so far (/proc/stat: everything but idle and iowait)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = fields
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def _own_cpu() -> float:
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def _rate(overrides: tuple[str, ...], warmup: int, batches: int) -> float:
    from runner.dist import Dist
    from runner.loaders.loader import create_loader
    from runner.run.validate import validate

    loader = create_loader(validate(EXPERIMENT, list(overrides), accelerator="cpu"), "train", Dist())
    stream = _forever(loader)
    for _ in range(warmup):
        next(stream)
    images = 0
    start = time.perf_counter()
    for _ in range(batches):
        images += next(stream)[0].shape[0]
    seconds = time.perf_counter() - start
    stream.close()
    loader.close()
    return images / seconds


def _forever(loader):
    while True:
        yield from loader.epoch()


def measure(repeats: int, threads: int, max_others: float) -> list[list[str]]:
    rows = []
    for size in SIZES:
        root = ensure_data(size.overrides)
        cache = ensure_cache(root) if size.variants else None
        print(f"{size.label}: {root}", file=sys.stderr)
        for name, workers, extra in loaders(size, threads, cache):
            results = [quiet_run(size.overrides + extra, size.warmup, size.batches, max_others)
                       for _ in range(repeats)]
            runs = sorted(rate for rate, _ in results)
            others = f"{100 * max(share for _, share in results):.0f}%"
            median = statistics.median(runs)
            spread = f"{runs[0]:.0f}-{runs[-1]:.0f} (±{50 * (runs[-1] - runs[0]) / median:.0f}%)"
            rows.append([name, size.label, workers, f"{median:.0f}", spread, others])
            print(f"  {name}, {workers}: {median:.0f} img/s, {spread}, others {others}", file=sys.stderr)
    return rows


# ---- docs/benchmarks.md ------------------------------------------------------------------------------

def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def versions() -> str:
    import nvidia.dali
    import PIL
    import torch
    import torchvision

    return (f"DALI {nvidia.dali.__version__}, torch {torch.__version__}, torchvision {torchvision.__version__}, "
            f"Pillow {PIL.__version__}, Python {platform.python_version()}")


def section(rows: list[list[str]], args, command: str, load: tuple[float, ...]) -> str:
    table = ["| loader | image size | threads/workers | img/s (median) | spread (min-max) | other processes |",
             "|---|---|---|---:|---:|---:|"] + ["| " + " | ".join(r) + " |" for r in rows]
    sizes = "; ".join(f"{s.label}: {s.warmup} warm-up + {s.batches} timed batches" for s in SIZES)
    return "\n".join([
        f"## {SECTION}",
        "",
        f"- date: {datetime.date.today().isoformat()}",
        f"- command: `{command}`",
        f"- machine: `nproc` = {os.cpu_count()}, {cpu_model()}; 1-minute load average at the start "
        f"{load[0]:.2f} (a shared machine: read the spread)",
        f"- software: {versions()}",
        f"- what: experiments/quickstart.yaml's training loader only (no model), batch 32, {args.repeats} runs "
        f"each, a fresh loader per run; {sizes}. Images/s counts the batches handed to the loop. "
        "'other processes': the largest share of the machine's CPU time that other processes took during one "
        "of the kept runs (from /proc/stat); a run where they took more than "
        f"{100 * args.max_others:.0f}% is measured again (up to twice, after waiting for a quiet moment, during "
        f"the first {args.retry_for:.0f} s).",
        "",
        *table,
        "",
        "DALI: the quickstart's train pipeline (`imagenet_train`: decoders.image, random_resized_crop, "
        "crop_mirror_normalize with a random mirror) compiled for the CPU (the mixed decoder runs on the CPU), "
        "through runner.loaders.loader.create_loader. torchvision: ImageFolder + DataLoader with RandomResizedCrop, "
        "RandomHorizontalFlip, ToTensor, Normalize (data.loader=torchvision). The data are "
        "`runner data synth` sets (10 classes, 1000 training images). At the ImageNet-like size two more DALI "
        "rows: `imagenet_train_fused` (decoders.image_random_crop decodes only the crop) and "
        f"`imagenet_train_cache` reading `runner data cache --max-side {CACHE_MAX_SIDE}` output (no JPEG decode).",
        "",
    ])


def write_section(path: Path, text: str) -> None:
    old = path.read_text() if path.exists() else "# Benchmarks\n"
    pattern = re.compile(rf"^## {re.escape(SECTION)}\n.*?(?=^## |\Z)", re.S | re.M)
    if pattern.search(old):
        new = pattern.sub(lambda _: text + "\n", old, count=1).rstrip("\n") + "\n"
    else:
        new = old.rstrip("\n") + "\n\n" + text
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(new)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2, help="DALI threads and DataLoader workers (default: 2)")
    ap.add_argument("--max-others", type=float, default=0.1, metavar="SHARE",
                    help="measure a run again when other processes took more of the CPU (default: %(default)s)")
    ap.add_argument("--retry-for", type=float, default=420, metavar="S",
                    help="measure again only during the first S seconds, to bound the run (default: %(default)s)")
    ap.add_argument("--out", type=Path, default=REPO / "docs" / "benchmarks.md")
    args = ap.parse_args()
    os.chdir(REPO)  # data.synth.dir (data/synth) is relative to the working directory
    command = "python " + " ".join([os.path.relpath(sys.argv[0], REPO)] + sys.argv[1:])
    load = os.getloadavg()
    global RETRY_UNTIL
    RETRY_UNTIL = time.monotonic() + args.retry_for
    rows = measure(args.repeats, args.threads, args.max_others)
    text = section(rows, args, command, load)
    write_section(args.out, text)
    print(text)


if __name__ == "__main__":
    main()
