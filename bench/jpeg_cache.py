"""The compact JPEG cache (`runner data cache --format jpeg`): resize filter, chroma subsampling, size and quality.

    .venv/bin/python bench/jpeg_cache.py options [--data DIR] [--images 300] [--runs 3]
    .venv/bin/python bench/jpeg_cache.py sizes   [--data DIR] [--images 300] [--runs 3]
    .venv/bin/python bench/jpeg_cache.py small   [--data DIR] [--images 300]

`options`: at longer side 320 and quality 90, each resize filter (Pillow's LANCZOS, BICUBIC, BILINEAR with
reducing_gap=2, and JPEG draft mode, libjpeg's DCT scaling, before LANCZOS) with 4:2:0 and 4:4:4 chroma.
`sizes`: the source JPEGs, the decoded cache (.npy, longer side 256) and the JPEG cache at several sizes and
qualities with the chosen filter. `small`: images already within the longer side, copied or re-encoded.

For every row: encode CPU ms per image (one process: open, decode, orient, resize, encode, as a build worker does
it), bytes per image, DALI CPU decode img/s per core (a loader-only pipeline on ONE DALI thread: readers.file +
decoders.image(device="cpu"), or decoders.numpy for .npy; batch 32, 2 untimed batches). Times are CPU time
(time.process_time), not wall time, so that other processes sharing the cores do not count; each is the best of
--runs passes, taken in turn over the rows. Then PSNR of the cached image
(decoded by Pillow) against a float LANCZOS resize of the decoded original to the same size: the loss the
cache adds to what training would see if it resized the original itself. Writes
bench/results/jpeg-cache-WHAT-cpuN.csv and .md (N: the cores this process may use).
"""
from __future__ import annotations

import argparse
import csv
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
DEFAULT_DATA = ROOT / "data" / "synth" / "v1-c10-n100-e20-s400-640-q90"
RESULTS = ROOT / "bench" / "results"
BATCH = 32

OPTIONS = [(f, s) for f in ("lanczos", "bicubic", "bilinear-rg2", "draft-lanczos") for s in ("4:2:0", "4:4:4")]
SIZES = [(256, 90), (320, 90), (384, 95)]


def source_images(data: Path, n: int) -> list[Path]:
    from runner.data.scan import scan_image_folder

    scan = scan_image_folder(data / "train")
    step = max(1, len(scan.files) // n)  # spread over the classes
    return [scan.root / path for path, _ in scan.files[::step][:n]]


def upright(path: Path, draft_to: int | None = None):
    from PIL import Image, ImageOps

    with Image.open(path) as image:
        if draft_to is not None:
            from runner.data.cache import cached_size

            image.draft("RGB", cached_size(image.width, image.height, draft_to))  # DCT scaling, >= the target
        image.load()
        return ImageOps.exif_transpose(image).convert("RGB")


def resized(image, max_side: int, method: str):
    from PIL import Image

    from runner.data.cache import cached_size

    size = cached_size(image.width, image.height, max_side)
    if size == image.size:
        return image
    if method == "bilinear-rg2":
        return image.resize(size, Image.Resampling.BILINEAR, reducing_gap=2.0)
    return image.resize(size, {"lanczos": Image.Resampling.LANCZOS, "bicubic": Image.Resampling.BICUBIC,
                               "draft-lanczos": Image.Resampling.LANCZOS}[method])


def reference(path: Path, size: tuple[int, int]):
    """A float LANCZOS resize of the decoded original, channel by channel (no rounding)."""
    import numpy as np
    from PIL import Image

    image = upright(path)
    channels = [np.asarray(Image.fromarray(np.asarray(image)[..., c].astype(np.float32), mode="F")
                           .resize(size, Image.Resampling.LANCZOS)) for c in range(3)]
    return np.stack(channels, axis=-1)


def psnr(decoded, ref) -> float:
    import numpy as np

    mse = float(np.mean((np.asarray(decoded, dtype=np.float64) - ref) ** 2))
    return float("inf") if mse == 0 else float(10 * np.log10(255.0**2 / mse))


def encode_one(path: Path, target: Path, max_side: int, quality: int, method: str, subsampling: str,
               copy_small: bool) -> None:
    from PIL import Image

    from runner.data.jpeg_cache import SUBSAMPLING

    with Image.open(path) as probe:
        small = max(probe.size) <= max_side and probe.mode == "RGB"
    if small and copy_small:
        shutil.copyfile(path, target)
    else:
        image = upright(path, max_side if method.startswith("draft") else None)
        resized(image, max_side, method).save(target, format="JPEG", quality=quality,
                                              subsampling=SUBSAMPLING[subsampling])


def write_jpeg_cache(files: list[Path], out: Path, max_side: int, quality: int, method: str, subsampling: str,
                     copy_small: bool = True) -> float:
    """Encode every file into out/<class>/; encode CPU ms per image."""
    t = time.process_time()
    for path in files:
        target = out / path.parent.name / path.name
        target.parent.mkdir(parents=True, exist_ok=True)
        encode_one(path, target, max_side, quality, method, subsampling, copy_small)
    return 1e3 * (time.process_time() - t) / len(files)


def fidelity(files: list[Path], out: Path) -> list[float]:
    """PSNR of each cached file (decoded by Pillow) against the float reference resize of its source."""
    import numpy as np
    from PIL import Image

    quality_db = []
    for path in files:
        with Image.open(out / path.parent.name / path.name) as cached:
            decoded = np.asarray(cached.convert("RGB"))
        quality_db.append(psnr(decoded, reference(path, (decoded.shape[1], decoded.shape[0]))))
    return quality_db


def measured(files: list[Path], work: Path, variants: dict[str, tuple], runs: int) -> dict[str, dict]:
    """Per variant (name -> write_jpeg_cache's arguments after the folder): encode ms and DALI img/s, each the best
    of `runs` passes taken in turn over the variants (so a busy spell on a shared machine hits them alike), plus
    bytes and PSNR."""
    best: dict[str, dict] = {name: {"encode": float("inf"), "decode": 0.0} for name in variants}
    for _ in range(runs):
        for name, args in variants.items():
            out = work / name
            shutil.rmtree(out, ignore_errors=True)
            best[name]["encode"] = min(best[name]["encode"], write_jpeg_cache(files, out, *args))
            best[name]["decode"] = max(best[name]["decode"], dali_decode_rate(out, 1))
    for name in variants:
        db = fidelity(files, work / name)
        best[name].update(bytes=folder_bytes(work / name), psnr_mean=sum(db) / len(db), psnr_min=min(db))
    return best


def write_raw_cache(files: list[Path], out: Path, max_side: int) -> float:
    import numpy as np

    from runner.data.cache import load_resized

    t = time.process_time()
    for path in files:
        target = out / path.parent.name / (path.name + ".npy")
        target.parent.mkdir(parents=True, exist_ok=True)
        np.save(target, load_resized(path, max_side), allow_pickle=False)
    return 1e3 * (time.process_time() - t) / len(files)


def dali_decode_rate(folder: Path, runs: int, numpy: bool = False) -> float:
    """Images per CPU second (this process's, DALI's one thread and the caller's) through readers.file + the CPU
    decoder: img/s on one core, whatever else shares the machine. The best of `runs` passes."""
    from nvidia.dali import fn, pipeline_def, types

    count = sum(1 for p in folder.rglob("*") if p.is_file())

    @pipeline_def(batch_size=BATCH, num_threads=1, device_id=None, seed=1, prefetch_queue_depth=1)
    def decode():
        data, _ = fn.readers.file(file_root=str(folder), file_filters=["*.npy"] if numpy else None, seed=1,
                                  random_shuffle=False)
        return fn.decoders.numpy(data) if numpy else fn.decoders.image(data, device="cpu", output_type=types.RGB)

    pipe = decode()
    for _ in range(2):
        pipe.run()
    batches = max(1, count // BATCH)
    best = 0.0
    for _ in range(runs):
        t = time.process_time()
        for _ in range(batches):
            pipe.run()
        best = max(best, batches * BATCH / (time.process_time() - t))
    return best


def folder_bytes(folder: Path) -> float:
    files = [p for p in folder.rglob("*") if p.is_file()]
    return sum(p.stat().st_size for p in files) / len(files)


def machine() -> str:
    import nvidia.dali
    from PIL import Image, features

    from runner.machine import cpu_cores

    cpu = platform.processor() or platform.machine()
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                   if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    return (f"{cpu}, {cpu_cores()} cores for this process; Pillow {Image.__version__} (libjpeg-turbo "
            f"{features.version_feature('libjpeg_turbo')}), DALI {nvidia.dali.__version__}; "
            f"{time.strftime('%Y-%m-%d')}, commit {commit}")


def run_options(files: list[Path], work: Path, runs: int) -> list[dict]:
    variants = {f"{m}-{sub}": (320, 90, m, sub) for m, sub in OPTIONS}
    got = measured(files, work, variants, runs)
    return [{"filter": m, "subsampling": sub, "max_side": 320, "quality": 90,
             "encode_ms_per_image": round(got[f"{m}-{sub}"]["encode"], 2),
             "bytes_per_image": round(got[f"{m}-{sub}"]["bytes"]),
             "dali_cpu_img_per_s_1_thread": round(got[f"{m}-{sub}"]["decode"], 1),
             "psnr_db_mean": round(got[f"{m}-{sub}"]["psnr_mean"], 2),
             "psnr_db_min": round(got[f"{m}-{sub}"]["psnr_min"], 2)} for m, sub in OPTIONS]


def run_sizes(files: list[Path], work: Path, runs: int, method: str, subsampling: str) -> list[dict]:
    src, raw = work / "source", work / "raw-256"
    for path in files:
        (src / path.parent.name).mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, src / path.parent.name / path.name)
    raw_ms = min(write_raw_cache(files, raw, 256) for _ in range(runs))
    rates = {"source": 0.0, "raw": 0.0}
    for _ in range(runs):
        rates["source"] = max(rates["source"], dali_decode_rate(src, 1))
        rates["raw"] = max(rates["raw"], dali_decode_rate(raw, 1, numpy=True))
    rows = [{"data": "source JPEGs", "max_side": "", "quality": "", "encode_ms_per_image": "",
             "bytes_per_image": round(folder_bytes(src)), "dali_cpu_img_per_s_1_thread": round(rates["source"], 1),
             "psnr_db_mean": ""},
            {"data": "decoded cache (.npy)", "max_side": 256, "quality": "", "encode_ms_per_image": round(raw_ms, 2),
             "bytes_per_image": round(folder_bytes(raw)), "dali_cpu_img_per_s_1_thread": round(rates["raw"], 1),
             "psnr_db_mean": ""}]
    variants = {f"jpeg-{side}-q{q}": (side, q, method, subsampling) for side, q in SIZES}
    got = measured(files, work, variants, runs)
    for side, q in SIZES:
        g = got[f"jpeg-{side}-q{q}"]
        rows.append({"data": "JPEG cache", "max_side": side, "quality": q, "encode_ms_per_image": round(g["encode"], 2),
                     "bytes_per_image": round(g["bytes"]), "dali_cpu_img_per_s_1_thread": round(g["decode"], 1),
                     "psnr_db_mean": round(g["psnr_mean"], 2)})
    return rows


def run_small(files: list[Path], work: Path, runs: int, subsampling: str) -> list[dict]:
    """Sources already within the longer side (1024 here): copied as they are, or re-encoded at quality 90."""
    variants = {"copied": (1024, 90, "lanczos", subsampling, True),
                "re-encoded q90": (1024, 90, "lanczos", subsampling, False)}
    got = measured(files, work, variants, runs)
    return [{"small_jpegs": name, "encode_ms_per_image": round(g["encode"], 2), "bytes_per_image": round(g["bytes"]),
             "dali_cpu_img_per_s_1_thread": round(g["decode"], 1), "psnr_db_mean": round(g["psnr_mean"], 2)}
            for name, g in got.items()]


def markdown(rows: list[dict]) -> str:
    keys = list(rows[0])
    lines = ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    lines += ["| " + " | ".join(str(r[k]) for k in keys) + " |" for r in rows]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("what", choices=("options", "sizes", "small"))
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA, help="an ImageFolder root with train/")
    ap.add_argument("--images", type=int, default=300)
    ap.add_argument("--runs", type=int, default=3, help="timed passes of the decode; the best counts")
    ap.add_argument("--filter", default="lanczos", help="sizes: the resize filter")
    ap.add_argument("--subsampling", default="4:2:0", help="sizes, small: the chroma subsampling")
    args = ap.parse_args()
    if args.data == DEFAULT_DATA:
        from runner.data.synth import generate_synthetic

        generate_synthetic(DEFAULT_DATA, classes=10, per_class=100, eval_per_class=20, min_side=400, max_side=640,
                           quality=90)
    from runner.machine import cpu_cores

    files = source_images(args.data, args.images)
    with tempfile.TemporaryDirectory() as tmp:
        if args.what == "options":
            rows = run_options(files, Path(tmp), args.runs)
        elif args.what == "sizes":
            rows = run_sizes(files, Path(tmp), args.runs, args.filter, args.subsampling)
        else:
            rows = run_small(files, Path(tmp), args.runs, args.subsampling)
    RESULTS.mkdir(parents=True, exist_ok=True)
    stem = RESULTS / f"jpeg-cache-{args.what}-cpu{cpu_cores()}"
    with open(stem.with_suffix(".csv"), "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    command = "python bench/jpeg_cache.py " + " ".join(sys.argv[1:])
    table = (f"{machine()}; {len(files)} images of {args.data.name}/train.\n\n`{command}`\n\n{markdown(rows)}\n")
    stem.with_suffix(".md").write_text(table)
    print(table)


if __name__ == "__main__":
    main()
