"""The synthetic ImageFolder: deterministic, ImageNet-like files, learnable classes, safe to call every launch."""
from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
import socket
import time
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from runner.data.synth import MARKER, generate_synthetic
from runner.errors import DataError

SMALL = dict(classes=3, per_class=4, eval_per_class=2, min_side=40, max_side=64, quality=90)


def tree_hash(root: Path) -> str:
    """sha256 over every image's relative path and bytes (the marker records timings, so it is left out)."""
    h = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file() and p.name != MARKER):
        h.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    return h.hexdigest()


def test_layout_counts_and_sizes(tmp_path):
    s = generate_synthetic(tmp_path / "set", **SMALL, workers=2)
    root = tmp_path / "set"
    assert sorted(p.name for p in root.iterdir()) == [MARKER, "train", "val"]
    assert sorted(p.name for p in (root / "train").iterdir()) == ["c0000", "c0001", "c0002"]
    assert sorted(p.name for p in (root / "val" / "c0002").iterdir()) == ["00000.jpg", "00001.jpg"]
    files = sorted(root.rglob("*.jpg"))
    assert (s.train_images, s.val_images, s.images, s.classes) == (12, 6, 18, 3)
    assert s.total_bytes == sum(f.stat().st_size for f in files)
    assert not s.reused
    for f in files:
        with Image.open(f) as im:
            assert im.format == "JPEG" and im.mode == "RGB"
            assert all(40 <= side <= 64 for side in im.size)
    sizes = set()
    for f in files:
        with Image.open(f) as im:
            sizes.add(im.size)
    assert len(sizes) > 5  # width and height are drawn per image
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".set.tmp")]  # no temporary folder left


def test_same_arguments_give_identical_bytes(tmp_path):
    generate_synthetic(tmp_path / "a", **SMALL, seed=7, workers=2)
    generate_synthetic(tmp_path / "b", **SMALL, seed=7, workers=1)  # the worker count does not matter
    generate_synthetic(tmp_path / "c", **SMALL, seed=8, workers=2)
    assert tree_hash(tmp_path / "a") == tree_hash(tmp_path / "b")
    assert tree_hash(tmp_path / "a") != tree_hash(tmp_path / "c")


def test_default_sizes_look_like_imagenet(tmp_path):
    # 40 files at the defaults (400-640 px, quality 90): ImageNet's JPEGs average 100-150 KiB
    s = generate_synthetic(tmp_path / "set", classes=10, per_class=3, eval_per_class=1, min_side=400,
                           max_side=640, quality=90)
    assert 100 <= s.mean_kib <= 150, s.mean_kib


def _colour_histogram(pixels: np.ndarray) -> np.ndarray:
    q = (pixels // 64).reshape(-1, 3).astype(np.int64)
    return np.bincount(q[:, 0] * 16 + q[:, 1] * 4 + q[:, 2], minlength=64) / len(q)


def _random_crop_flip(pixels: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """A random crop of half the area, flipped half of the time (what training augmentation does)."""
    h, w = pixels.shape[:2]
    ch, cw = int(h * 0.5 ** 0.5), int(w * 0.5 ** 0.5)
    y, x = rng.integers(0, h - ch + 1), rng.integers(0, w - cw + 1)
    crop = pixels[y:y + ch, x:x + cw]
    return crop[:, ::-1] if rng.random() < 0.5 else crop


def test_classes_are_learnable_from_random_crops(tmp_path):
    root = tmp_path / "set"
    generate_synthetic(root, classes=10, per_class=10, eval_per_class=5, min_side=64, max_side=96, quality=90)
    rng = np.random.default_rng(0)

    def features(split: str) -> tuple[np.ndarray, np.ndarray]:
        x, y = [], []
        for label, folder in enumerate(sorted((root / split).iterdir())):
            for f in sorted(folder.iterdir()):
                with Image.open(f) as im:
                    pixels = np.asarray(im.convert("RGB"))
                x.append(_colour_histogram(_random_crop_flip(pixels, rng)))
                y.append(label)
        return np.array(x), np.array(y)

    x_train, y_train = features("train")
    x_val, y_val = features("val")
    means = np.stack([x_train[y_train == c].mean(0) for c in range(10)])
    predicted = ((x_val[:, None] - means[None]) ** 2).sum(-1).argmin(1)
    accuracy = (predicted == y_val).mean()
    assert accuracy >= 0.6, accuracy  # chance is 0.1


def test_small_images_are_fast(tmp_path):
    start = time.perf_counter()
    s = generate_synthetic(tmp_path / "set", classes=10, per_class=100, eval_per_class=20, min_side=80,
                           max_side=120, quality=90)
    assert s.images == 1200
    assert time.perf_counter() - start < 15  # ~1 s on 2 idle cores; the margin is for busy machines


def test_progress_counts_up_to_the_total(tmp_path):
    calls = []
    generate_synthetic(tmp_path / "set", **SMALL, progress=lambda done, total: calls.append((done, total)))
    assert calls[0] == (0, 18) and calls[-1] == (18, 18)
    assert [d for d, _ in calls] == sorted(d for d, _ in calls)


def test_second_call_reuses_the_set(tmp_path):
    root = tmp_path / "set"
    first = generate_synthetic(root, **SMALL)
    before = {p: p.stat().st_mtime_ns for p in root.rglob("*")}
    calls = []
    again = generate_synthetic(root, **SMALL, progress=lambda *a: calls.append(a))
    assert again.reused and not calls
    assert (again.images, again.total_bytes) == (first.images, first.total_bytes)
    assert {p: p.stat().st_mtime_ns for p in root.rglob("*")} == before
    marker = json.loads((root / MARKER).read_text())
    assert marker["settings"]["classes"] == 3 and marker["summary"]["total_bytes"] == first.total_bytes


def test_other_settings_are_refused(tmp_path):
    root = tmp_path / "set"
    generate_synthetic(root, **SMALL)
    with pytest.raises(DataError, match=r"set: holds a synthetic dataset made with other settings: classes 3 "
                                        r"\(wanted 5\), quality 90 \(wanted 80\)\. Remove it or choose another folder"):
        generate_synthetic(root, **{**SMALL, "classes": 5, "quality": 80})


def test_user_data_is_never_touched(tmp_path):
    root = tmp_path / "photos"
    (root / "cats").mkdir(parents=True)
    (root / "cats" / "1.jpg").write_bytes(b"mine")
    with pytest.raises(DataError, match=r"photos: exists and is a folder without \.runner-synth\.json, not a "
                                        r"synthetic dataset made by runner\. runner does not write into"):
        generate_synthetic(root, **SMALL)
    assert (root / "cats" / "1.jpg").read_bytes() == b"mine"
    assert sorted(p.name for p in root.iterdir()) == ["cats"]


def test_an_empty_folder_is_filled(tmp_path):
    (tmp_path / "set").mkdir()
    assert generate_synthetic(tmp_path / "set", **SMALL).images == 18


def test_interrupted_generation_leaves_nothing(tmp_path):
    def interrupt(done: int, total: int) -> None:
        if done == 5:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        generate_synthetic(tmp_path / "set", **SMALL, progress=interrupt)
    assert list(tmp_path.iterdir()) == []
    assert generate_synthetic(tmp_path / "set", **SMALL).images == 18  # and the next launch starts over


def test_a_killed_generation_is_cleaned_up(tmp_path):
    dead_pid = 2 ** 22 + 12345  # above Linux's pid_max: no such process
    stale = tmp_path / f".set.tmp-{socket.gethostname()}-{dead_pid}"
    (stale / "train").mkdir(parents=True)
    generate_synthetic(tmp_path / "set", **SMALL)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["set"]


@pytest.mark.parametrize("change, message", [
    ({"min_side": 100, "max_side": 50}, r"synthetic data: min_side \(100\) is larger than max_side \(50\)\."),
    ({"classes": 0}, r"synthetic data: classes must be at least 1 \(got 0\)\."),
    ({"quality": 101}, r"synthetic data: quality must be 1-100 \(got 101\)\."),
])
def test_bad_arguments(tmp_path, change, message):
    with pytest.raises(DataError, match=message):
        generate_synthetic(tmp_path / "set", **{**SMALL, **change})
    assert not os.path.exists(tmp_path / "set")


def _generate_in_child(root: str, queue) -> None:
    s = generate_synthetic(Path(root), **SMALL)
    queue.put((s.reused, s.total_bytes))


def test_concurrent_launches_generate_once(tmp_path):
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    children = [ctx.Process(target=_generate_in_child, args=(str(tmp_path / "set"), queue)) for _ in range(3)]
    for child in children:
        child.start()
    results = sorted(queue.get(timeout=60) for _ in children)
    for child in children:
        child.join()
    assert [reused for reused, _ in results] == [False, True, True]  # one wrote it, two found it
    assert len({total for _, total in results}) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["set"]


def test_a_damaged_marker_is_reported(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    generate_synthetic(tmp_path / "set", **SMALL)
    (tmp_path / "set" / MARKER).write_text("{not json")
    with pytest.raises(DataError, match=r"^set/\.runner-synth\.json: cannot read this marker \(JSONDecodeError: "
                                        r".*\); remove the folder to generate the set again\.$"):
        generate_synthetic(tmp_path / "set", **SMALL)
