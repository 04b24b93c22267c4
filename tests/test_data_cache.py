"""The pre-decoded cache (`runner data cache`): layout, arrays, resuming, refusals, bad files, and the shipped
cache pipeline reading it through a real DALI CPU pipeline."""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from runner.data.cache import build_cache, cached_size, read_cache_marker
from runner.data.scan import DEFAULT_SKIP_LIST, _decode, read_skip_list, scan_image_folder
from runner.errors import DataError
from tests.conftest import run_cli

MAX_SIDE = 48
COLOURS = ((200, 40, 40), (40, 200, 40), (40, 40, 200))   # class k: channel k dominates
SIZES = ((100, 60), (30, 70), (40, 20), (48, 48), (64, 30))  # (w, h): larger and smaller than MAX_SIDE


def write_split(root: Path, per_class: int) -> None:
    for label, colour in enumerate(COLOURS):
        folder = root / f"c{label}"
        folder.mkdir(parents=True)
        for i in range(per_class):
            Image.new("RGB", SIZES[(label + i) % len(SIZES)], colour).save(folder / f"{i:03d}.jpg", quality=95)


@pytest.fixture
def src(tmp_path) -> Path:
    """SRC/train (3 classes x 4) and SRC/val (3 x 2), solid-colour JPEGs of several sizes."""
    root = tmp_path / "src"
    write_split(root / "train", 4)
    write_split(root / "val", 2)
    return root


def npy_files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*.npy"))


def test_cache_mirrors_splits_class_folders_and_files(src, tmp_path):
    s = build_cache(src, tmp_path / "cache", max_side=MAX_SIDE, workers=2)
    for split in ("train", "val"):
        cached = sorted(p.name for p in (tmp_path / "cache" / split).iterdir())
        assert cached == list(scan_image_folder(src / split).classes)
    assert npy_files(tmp_path / "cache") == sorted(str(p.relative_to(src)) + ".npy" for p in src.rglob("*.jpg"))
    assert (s.images, s.written, s.kept, s.splits, s.classes) == (18, 18, 0, {"train": 12, "val": 6}, 3)
    assert s.jpeg_bytes == sum(p.stat().st_size for p in src.rglob("*.jpg"))
    assert s.cache_bytes == sum(p.stat().st_size for p in (tmp_path / "cache").rglob("*.npy"))
    assert s.ratio == pytest.approx(s.cache_bytes / s.jpeg_bytes)
    marker = read_cache_marker(tmp_path / "cache")
    assert marker["complete"] and marker["settings"] == {"format": 1, "max_side": MAX_SIDE}
    assert marker["summary"]["written"] == 18


def test_a_single_split_is_cached_into_dst_directly(src, tmp_path):
    s = build_cache(src / "val", tmp_path / "cache", max_side=MAX_SIDE, workers=1)
    assert s.splits == {"": 6}
    assert npy_files(tmp_path / "cache") == [f"c{k}/{i:03d}.jpg.npy" for k in range(3) for i in range(2)]


def test_arrays_are_uint8_hwc_rgb_shrunk_never_enlarged(src, tmp_path):
    build_cache(src, tmp_path / "cache", max_side=MAX_SIDE, workers=2)
    for jpeg in src.rglob("*.jpg"):
        array = np.load(tmp_path / "cache" / (str(jpeg.relative_to(src)) + ".npy"))
        with Image.open(jpeg) as image:
            w, h = image.size
            decoded = np.asarray(image.convert("RGB"))
        assert array.dtype == np.uint8 and array.ndim == 3 and array.shape[2] == 3
        assert max(array.shape[:2]) == min(MAX_SIDE, max(w, h))
        assert (array.shape[1], array.shape[0]) == cached_size(w, h, MAX_SIDE)
        if max(w, h) <= MAX_SIDE:
            np.testing.assert_array_equal(array, decoded)  # untouched: the decoder's own pixels
        else:
            np.testing.assert_allclose(array.reshape(-1, 3).mean(0), decoded.reshape(-1, 3).mean(0), atol=2)


def test_cached_size():
    assert cached_size(640, 480, 256) == (256, 192)
    assert cached_size(480, 640, 256) == (192, 256)
    assert cached_size(200, 100, 256) == (200, 100)
    assert cached_size(3000, 2, 256) == (256, 1)


def test_exif_orientation_is_applied_as_dali_applies_it(tmp_path):
    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90 degrees: stored 60 x 20, shown 20 x 60
    (tmp_path / "src" / "a").mkdir(parents=True)
    Image.new("RGB", (60, 20), (10, 20, 30)).save(tmp_path / "src" / "a" / "r.jpg", exif=exif)
    build_cache(tmp_path / "src", tmp_path / "cache", max_side=30, workers=1)
    assert np.load(tmp_path / "cache" / "a" / "r.jpg.npy").shape == (30, 10, 3)


def test_a_rerun_rebuilds_only_missing_or_broken_files(src, tmp_path):
    dst = tmp_path / "cache"
    build_cache(src, dst, max_side=MAX_SIDE, workers=2)
    files = sorted(dst.rglob("*.npy"))
    (files[0]).unlink()
    (files[5]).unlink()
    files[7].write_bytes(files[7].read_bytes()[:-10])   # cut short, as by a full disk
    leftover = files[1].with_name(f".{files[1].name}.tmp-{os.uname().nodename}-4194300")  # a killed build's
    leftover.write_bytes(b"partial")
    before = {p: p.stat().st_mtime_ns for p in files if p.exists()}

    s = build_cache(src, dst, max_side=MAX_SIDE, workers=2)
    assert (s.written, s.kept, s.images) == (3, 15, 18)
    assert npy_files(dst) == sorted(str(p.relative_to(dst)) for p in files)
    assert [p for p in files if p.stat().st_mtime_ns != before.get(p)] == [files[0], files[5], files[7]]
    assert np.load(files[7]).shape[2] == 3
    assert not leftover.exists()
    assert build_cache(src, dst, max_side=MAX_SIDE, workers=1).written == 0


def test_a_changed_source_image_is_rebuilt(src, tmp_path):
    dst = tmp_path / "cache"
    build_cache(src, dst, max_side=MAX_SIDE, workers=1)
    Image.new("RGB", (90, 90), (1, 2, 3)).save(src / "train" / "c0" / "000.jpg")
    os.utime(src / "train" / "c0" / "000.jpg", (1, 1))  # an old mtime: the new size alone gives it away
    s = build_cache(src, dst, max_side=MAX_SIDE, workers=1)
    assert s.written == 1 and np.load(dst / "train" / "c0" / "000.jpg.npy").shape == (48, 48, 3)


def test_another_max_side_into_the_same_folder_is_refused(src, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    build_cache(src, Path("cache"), max_side=MAX_SIDE, workers=1)
    listing = npy_files(tmp_path / "cache")
    with pytest.raises(DataError) as e:
        build_cache(src, Path("cache"), max_side=64, workers=1)
    assert str(e.value) == (
        "cache: holds a cache made with other settings: max_side 48 (wanted 64). runner does not overwrite or "
        "delete it: choose another folder for these settings, or remove this one yourself.")
    assert npy_files(tmp_path / "cache") == listing


def test_folders_runner_did_not_make_are_refused(src, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me")
    with pytest.raises(DataError, match=r"^mine: exists and is a folder without \.runner-cache\.json, not a cache "
                                        r"made by runner\. runner does not write into \(or delete\) data it did not "
                                        r"make: choose a new or empty folder\.$"):
        build_cache(src, Path("mine"), max_side=MAX_SIDE)
    with pytest.raises(DataError, match=r"^src/cache: is inside the source folder src; the reader would take its "
                                        r"folders for classes\. Put the cache outside the dataset\.$"):
        build_cache(Path("src"), Path("src/cache"), max_side=MAX_SIDE)
    assert [p.name for p in (tmp_path / "mine").iterdir()] == ["notes.txt"]
    (src / "val" / "empty").mkdir()  # SRC's own mistakes come first, before DST is created
    with pytest.raises(DataError, match=r"^src/val: 1 of 4 class folders hold no images: 'empty'\."):
        build_cache(Path("src"), Path("new"), max_side=MAX_SIDE)
    assert not Path("new").exists()


def test_files_that_do_not_decode_are_skipped_and_listed(src, tmp_path):
    good = (src / "train" / "c1" / "000.jpg").read_bytes()
    (src / "train" / "c1" / "900.jpg").write_bytes(good[: len(good) // 2])   # truncated
    (src / "val" / "c2" / "901.jpg").write_text("not an image at all")
    s = build_cache(src, tmp_path / "cache", max_side=MAX_SIDE, workers=2)
    reasons = {issue.path: issue.reason for issue in s.skipped}
    assert reasons == {p: _decode(str(src / p))[0] for p in ("train/c1/900.jpg", "val/c2/901.jpg")}
    assert reasons["val/c2/901.jpg"] == "not an image (a text file: 'not an image at all')"
    assert reasons["train/c1/900.jpg"].startswith("truncated JPEG")
    assert s.images == 18 and not (tmp_path / "cache" / "train" / "c1" / "900.jpg.npy").exists()
    assert read_skip_list(tmp_path / "cache" / DEFAULT_SKIP_LIST) == {"train/c1/900.jpg", "val/c2/901.jpg"}


def test_cache_files_without_a_source_are_reported(src, tmp_path):
    build_cache(src, tmp_path / "cache", max_side=MAX_SIDE, workers=1)
    (src / "val" / "c0" / "001.jpg").unlink()
    s = build_cache(src, tmp_path / "cache", max_side=MAX_SIDE, workers=1)
    assert s.stale == ("val/c0/001.jpg.npy",) and s.images == 17


def test_cli_prints_sizes_and_the_ratio(src, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli(["data", "cache", "src", "cache", "--max-side", MAX_SIDE, "--workers", 2], capsys)
    assert code == 0 and err == ""
    assert "caching: 0/18" in out and "caching: 18/18" in out
    s = read_cache_marker(tmp_path / "cache")["summary"]
    assert out.strip().splitlines()[-1] == (
        f"cached 18 images (train 12, val 6), 3 classes into cache (longer side <= 48 px): "
        f"{s['cache_bytes'] / 1024:.0f} KiB for {s['jpeg_bytes'] / 1024:.0f} KiB of source images, "
        f"{s['cache_bytes'] / s['jpeg_bytes']:.2f}x the disk; 18 written, in {s['seconds']:.1f} s")
    code, out, err = run_cli(["data", "cache", "src", "cache", "--max-side", 64], capsys)
    assert code == 2 and err.startswith("error: cache: holds a cache made with other settings: max_side 48 (wanted 64).")


def test_the_shipped_cache_pipelines_read_the_cache_with_the_labels_of_the_class_folders(src, tmp_path, project):
    from runner.dist import Dist
    from runner.loaders import create_loader
    from runner.validate import validate

    build_cache(src, tmp_path / "cache", max_side=MAX_SIDE, workers=2)
    (project / "experiments" / "cache.yaml").write_text(f"""
name: cache
model: {{name: resnet18, num_classes: 3}}
data: {{loader: dali, root: {tmp_path / "cache"}, batch_size: 4, num_threads: 1}}
pipelines:
  train: {{use: imagenet_train_cache, params: {{size: 32}}}}
  eval: {{use: imagenet_eval_cache, params: {{size: 32, resize_shorter: 36}}}}
""")
    v = validate(project / "experiments" / "cache.yaml", accelerator="cpu")
    mean, std = np.array([0.485, 0.456, 0.406]) * 255, np.array([0.229, 0.224, 0.225]) * 255
    for role, samples in (("train", 12), ("eval", 6)):
        loader = create_loader(v, role, Dist())
        seen = []
        for images, labels in loader.epoch():
            assert images.dtype.is_floating_point and tuple(images.shape[1:]) == (3, 32, 32)
            colours = images.numpy().mean(axis=(2, 3)) * std + mean   # back to 0-255 RGB
            np.testing.assert_array_equal(colours.argmax(1), labels.numpy())  # class k is colour k
            seen += labels.tolist()
        assert sorted(seen) == sorted([k for k in range(3) for _ in range(samples // 3)])[:len(seen)]
        assert len(seen) == (12 if role == "train" else 6)
        loader.close()


def test_check_and_fingerprint_read_a_cache_as_its_pipeline_does(src, tmp_path, capsys):
    build_cache(src, tmp_path / "cache", max_side=MAX_SIDE, workers=1)
    train = tmp_path / "cache" / "train"
    code, out, _ = run_cli(["data", "fingerprint", train], capsys)
    assert code == 0 and ": 12 files in 3 classes," in out
    np.save(train / "c0" / "float.npy", np.zeros((4, 4), np.float32))
    (train / "c1" / "cut.npy").write_bytes((train / "c1" / "000.jpg.npy").read_bytes()[:100])
    code, out, _ = run_cli(["data", "check", train, "--workers", 1], capsys)
    assert code == 1
    assert "an array of float32 (4, 4); the cache pipelines take uint8 HxWx3" in out
    assert "not a readable .npy array: EOF: reading array header" in out
    assert "12 of 14 files decode (NPY 12)." in out
    assert read_skip_list(train / DEFAULT_SKIP_LIST) == {"c0/float.npy", "c1/cut.npy"}
