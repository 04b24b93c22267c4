"""DALI's CPU JPEG decode alone, with libjpeg-turbo's accurate IDCT and with its fast one (DALI's use_fast_idct).

    .venv/bin/python bench/cpu_decode.py [--data DIR] [--runs 3] [--batches 15]

Times `decoders.image_random_crop(device="cpu")` (the fused pipelines' decode: only the crop is decoded) on one
DALI thread, batch 64, after 3 untimed batches, the two settings alternated `--runs` times; then decodes the
first 32 files whole both ways and compares the pixels. Nothing else runs in the pipeline, so this is the decode's
share of a CPU copy's work, not a loader's speed (bench/cpu_loaders.py measures whole loaders). The data default
to `runner data synth`'s ImageNet-like set (10 classes x 100, 400-640 px, q90), made when missing.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
DEFAULT_DATA = ROOT / "data" / "synth" / "v1-c10-n100-e20-s400-640-q90"
BATCH = 64


def ms_per_image(files: Path, fast: bool, batches: int) -> float:
    from nvidia.dali import fn, pipeline_def, types

    @pipeline_def(batch_size=BATCH, num_threads=1, device_id=None, seed=1)
    def decode():
        jpegs, _ = fn.readers.file(file_root=str(files), random_shuffle=True, seed=1)
        return fn.decoders.image_random_crop(jpegs, device="cpu", output_type=types.RGB, use_fast_idct=fast,
                                             random_area=[0.08, 1.0], random_aspect_ratio=[3 / 4, 4 / 3])

    pipe = decode()
    for _ in range(3):
        pipe.run()
    t = time.perf_counter()
    for _ in range(batches):
        pipe.run()
    return (time.perf_counter() - t) / (batches * BATCH) * 1e3


def pixel_difference(files: Path) -> tuple[float, int]:
    """(mean, max) absolute difference in 8-bit levels between the two IDCTs, whole images."""
    import numpy as np
    from nvidia.dali import fn, pipeline_def, types

    @pipeline_def(batch_size=32, num_threads=1, device_id=None)
    def both():
        jpegs, _ = fn.readers.file(file_root=str(files))
        return (fn.decoders.image(jpegs, device="cpu", output_type=types.RGB),
                fn.decoders.image(jpegs, device="cpu", output_type=types.RGB, use_fast_idct=True))

    accurate, fast = both().run()
    diffs = [np.abs(np.asarray(a, dtype=np.int16) - np.asarray(f, dtype=np.int16))
             for a, f in zip(accurate, fast)]
    return float(np.mean([d.mean() for d in diffs])), int(max(d.max() for d in diffs))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA, help="an ImageFolder root with train/")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--batches", type=int, default=15, help="timed batches of 64 per run")
    args = ap.parse_args()
    if args.data == DEFAULT_DATA:
        from runner.data.synth import generate_synthetic

        generate_synthetic(DEFAULT_DATA, classes=10, per_class=100, eval_per_class=20, min_side=400, max_side=640,
                           quality=90)
    files = args.data / "train"
    times: dict[bool, list[float]] = {False: [], True: []}
    for _ in range(args.runs):
        for fast in (False, True):
            times[fast].append(ms_per_image(files, fast, args.batches))
    mean_diff, max_diff = pixel_difference(files)
    for fast, label in ((False, "accurate IDCT"), (True, "fast IDCT")):
        print(f"{label:14s} ms per image: median {statistics.median(times[fast]):.2f}, runs "
              + ", ".join(f"{t:.2f}" for t in times[fast]))
    saved = 1 - statistics.median(times[True]) / statistics.median(times[False])
    print(f"fast IDCT: {100 * saved:.0f}% less time per image (medians); pixels differ by {mean_diff:.2f} levels on "
          f"average, at most {max_diff} (32 whole images)")


if __name__ == "__main__":
    main()
