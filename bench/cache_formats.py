"""Which reader arrangement suits the pre-decoded cache, on DALI's CPU operators (loader only).

  (a) readers.file(file_filters=["*.npy"]) + decoders.numpy   -- pipelines/imagenet_train_cache.yaml
  (b) readers.numpy                                           -- its own reader; it has no label output
  (c) readers.file + decoders.image_random_crop (JPEG, fused) -- pipelines/imagenet_train_fused.yaml

Each arrangement is timed twice: reading only (reader + decoder/parse: what the format changes) and the
whole training pipeline to float CHW (random resized crop 224, mirror, normalize). Batches/s after a
warm-up, median and spread of `--repeats` runs.

    python bench/cache_formats.py --jpeg data/synth/v1-c10-n100-e20-s400-640-q90/train \
        --cache data/cache/v1-c10-n100-e20-s400-640-q90-m256/train
"""
from __future__ import annotations

import argparse
import statistics
import time

from cpu_loaders import _machine_busy, _own_cpu, _wait_for_quiet  # bench/ is the script's folder
from nvidia.dali import fn, pipeline_def, types

MEAN = [0.485 * 255, 0.456 * 255, 0.406 * 255]
STD = [0.229 * 255, 0.224 * 255, 0.225 * 255]


def augment(images, size):
    images = fn.random_resized_crop(images, size=[size, size])
    return fn.crop_mirror_normalize(images, mirror=fn.random.coin_flip(probability=0.5), dtype=types.FLOAT,
                                    output_layout="CHW", mean=MEAN, std=STD)


def source(kind: str, root: str, size: int, full: bool):
    if kind == "file+numpy":
        raw, labels = fn.readers.file(file_root=root, file_filters=["*.npy"], shuffle_after_epoch=True, name="r")
        images = fn.decoders.numpy(raw)
        return (augment(images, size) if full else images), labels
    if kind == "readers.numpy":
        images = fn.readers.numpy(file_root=root, file_filter="*.npy", shuffle_after_epoch=True, name="r")
        return (augment(images, size) if full else images), None
    jpegs, labels = fn.readers.file(file_root=root, shuffle_after_epoch=True, name="r")
    if not full:
        return fn.decoders.image(jpegs, device="cpu", output_type=types.RGB), labels
    images = fn.decoders.image_random_crop(jpegs, device="cpu", output_type=types.RGB,
                                           random_area=[0.08, 1.0], random_aspect_ratio=[3 / 4, 4 / 3])
    images = fn.resize(images, resize_x=size, resize_y=size, interp_type=types.INTERP_TRIANGULAR)
    return fn.crop_mirror_normalize(images, mirror=fn.random.coin_flip(probability=0.5), dtype=types.FLOAT,
                                    output_layout="CHW", mean=MEAN, std=STD), labels


def build(kind: str, root: str, args, full: bool):
    @pipeline_def(batch_size=args.batch, num_threads=args.threads, device_id=None, seed=1,
                  prefetch_queue_depth=2)
    def pipe():
        images, labels = source(kind, root, args.size, full)
        return (images,) if labels is None else (images, labels)

    p = pipe()
    p.build()
    return p


def quiet_rate(kind: str, root: str, args, full: bool) -> tuple[float, float]:
    """(batches/s, share of the CPU other processes took meanwhile), measured again (twice at most) when
    they took more than 10%."""
    for _ in range(3):
        _wait_for_quiet(0.1, timeout=20)
        busy, own, wall = _machine_busy(), _own_cpu(), time.perf_counter()
        r = rate(kind, root, args, full)
        others = ((_machine_busy() - busy) - (_own_cpu() - own)) / ((time.perf_counter() - wall) * 2)
        if others <= 0.1:
            break
    return r, max(0.0, others)


def rate(kind: str, root: str, args, full: bool) -> float:
    p = build(kind, root, args, full)
    for _ in range(args.warmup):
        p.run()
    start = time.perf_counter()
    for _ in range(args.batches):
        p.run()
    seconds = time.perf_counter() - start
    del p
    return args.batches / seconds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jpeg", required=True, help="a JPEG ImageFolder split")
    ap.add_argument("--cache", required=True, help="the same split, cached (`runner data cache`)")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--batches", type=int, default=200)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--only", nargs="*", default=["file+numpy", "readers.numpy", "jpeg"])
    args = ap.parse_args()
    print("| arrangement | stage | batches/s median | spread (min-max) | img/s | other processes |")
    print("|---|---|---:|---:|---:|---:|")
    for full in (False, True):
        for kind in args.only:
            root = args.jpeg if kind == "jpeg" else args.cache
            results = [quiet_rate(kind, root, args, full) for _ in range(args.repeats)]
            runs = sorted(r for r, _ in results)
            others = max(o for _, o in results)
            med = statistics.median(runs)
            stage = "full pipeline (crop 224, flip, normalize)" if full else "read + decode only"
            print(f"| {kind} | {stage} | {med:.1f} | {runs[0]:.1f}-{runs[-1]:.1f} | {med * args.batch:.0f} "
                  f"| {100 * others:.0f}% |", flush=True)


if __name__ == "__main__":
    main()
