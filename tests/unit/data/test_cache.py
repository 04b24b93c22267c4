"""The pre-decoded cache (`runner data cache`): layout, arrays, resuming, refusals, bad files, and the shipped
cache pipeline reading it through a real DALI CPU pipeline."""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from runner.data.cache import build_cache, cached_size, read_cache_marker
from runner.data.paths import DEFAULT_SKIP_LIST
from runner.data.scan import fingerprint, read_skip_list, scan_image_folder, try_decode
from runner.errors import DataError
from tests.fixtures.data_cache import MAX_SIDE, ON_THE_JPEG_CACHE
from tests.helpers import run_cli


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
    assert marker["complete"] and marker["settings"] == {"format": 2, "max_side": MAX_SIDE}
    assert marker["summary"]["written"] == 18
    assert marker["source_fingerprint"] == {split: fingerprint(src / split) for split in ("train", "val")}


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
    assert reasons == {p: try_decode(str(src / p))[0] for p in ("train/c1/900.jpg", "val/c2/901.jpg")}
    assert reasons["val/c2/901.jpg"] == "not an image (a text file: 'not an image at all')"
    assert reasons["train/c1/900.jpg"].startswith("truncated JPEG")
    assert s.images == 18 and not (tmp_path / "cache" / "train" / "c1" / "900.jpg.npy").exists()
    assert read_skip_list(tmp_path / "cache" / DEFAULT_SKIP_LIST) == {"train/c1/900.jpg", "val/c2/901.jpg"}


def test_cache_files_without_a_source_are_reported(src, tmp_path):
    build_cache(src, tmp_path / "cache", max_side=MAX_SIDE, workers=1)
    (src / "val" / "c0" / "001.jpg").unlink()
    s = build_cache(src, tmp_path / "cache", max_side=MAX_SIDE, workers=1)
    assert s.stale == ("val/c0/001.jpg.npy",) and s.images == 17


def test_runs_refuse_a_cache_holding_an_image_its_source_no_longer_has_until_it_is_removed(src, project, capsys):
    (project / "experiments" / "exp.yaml").write_text(ON_THE_JPEG_CACHE)
    cache = ["data", "cache", "src", "jpeg", "--format", "jpeg", "--max-side", MAX_SIDE]
    assert run_cli(cache, capsys)[0] == 0
    os.replace(src / "train" / "c0" / "001.jpg", src / "train" / "c2" / "relabelled.jpg")  # the source relabelled
    code, out, err = run_cli(cache, capsys)
    assert code == 0 and "1 written, 17 already there" in out
    assert err == ("note: jpeg holds 1 entry that no source image backs (removed, or moved to another class, since "
                   "cached): train/c0/001.jpg. A run on this cache would read each as an image of the class folder it "
                   "sits in, so runs refuse the cache until they are removed; remove them (paths relative to jpeg), or "
                   "build the cache into a new folder.\n")
    code, _, err = run_cli(["validate", "experiments/exp.yaml"], capsys)
    assert code == 2 and err.startswith("error: experiments/exp.yaml:3: data.root: jpeg holds 1 entry for which its "
                                        f"last build found no image in its source {src.resolve()} (removed")
    (project / "jpeg" / "train" / "c0" / "001.jpg").unlink()
    code, out, err = run_cli(["validate", "experiments/exp.yaml"], capsys)
    assert code == 0 and out.startswith("OK experiments/exp.yaml"), err


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
    from runner.loaders.loader import create_loader
    from runner.run.validate import validate

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
        loader = create_loader(v.loaders, role, Dist())
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


def jpeg_files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and not p.name.startswith("."))


def test_jpeg_cache_is_an_image_folder_of_smaller_jpegs_with_a_manifest(src, tmp_path):
    from runner.data.jpeg_cache import build_jpeg_cache
    from runner.data.scan import fingerprint

    good = (src / "train" / "c1" / "000.jpg").read_bytes()
    (src / "train" / "c1" / "900.jpg").write_bytes(good[: len(good) // 2])   # truncated
    (src / "val" / "c2" / "901.jpg").write_text("not an image at all")
    source_fp = {split: fingerprint(src / split) for split in ("train", "val")}  # bad files are read too
    dst = tmp_path / "jpeg"
    s = build_jpeg_cache(src, dst, max_side=MAX_SIDE, quality=80, workers=2)

    assert jpeg_files(dst) == sorted(str(p.relative_to(src)) for p in src.rglob("*.jpg")
                                     if p.name not in ("900.jpg", "901.jpg"))
    assert {issue.path: issue.reason for issue in s.skipped} == {
        p: try_decode(str(src / p))[0] for p in ("train/c1/900.jpg", "val/c2/901.jpg")}
    assert read_skip_list(dst / DEFAULT_SKIP_LIST) == {"train/c1/900.jpg", "val/c2/901.jpg"}
    copied = 0
    for name in jpeg_files(dst):
        with Image.open(src / name) as original, Image.open(dst / name) as cached:
            (w, h), (cw, ch) = original.size, cached.size
            assert cached.format == "JPEG" and cached.mode == "RGB"
        assert max(cw, ch) == min(MAX_SIDE, max(w, h))
        scale = max(cw, ch) / max(w, h)
        assert abs(min(cw, ch) - min(w, h) * scale) <= 1  # the aspect ratio kept: the shorter side within 1 px
        if max(w, h) <= MAX_SIDE:  # an RGB JPEG within the limit: the same bytes
            assert (dst / name).read_bytes() == (src / name).read_bytes()
            copied += 1
    assert (s.images, s.written, s.copied, s.splits) == (18, 18, copied, {"train": 12, "val": 6}) and copied == 9
    marker = read_cache_marker(dst)
    assert marker["complete"] and {k: marker["settings"][k] for k in ("format", "max_side", "quality", "filter",
                                                                       "subsampling", "small_jpegs")} == {
        "format": "jpeg", "max_side": MAX_SIDE, "quality": 80, "filter": "lanczos", "subsampling": "4:2:0",
        "small_jpegs": "copied"}
    assert marker["settings"]["pillow"] == Image.__version__ and marker["settings"]["libjpeg"].startswith("libjpeg")
    assert marker["source_fingerprint"] == source_fp
    summary = marker["summary"]
    assert (summary["images"], summary["copied"], len(summary["skipped"])) == (18, 9, 2)
    assert summary["bytes_out"] == sum((dst / n).stat().st_size for n in jpeg_files(dst)) == s.cache_bytes
    assert summary["bytes_in"] == sum((src / n).stat().st_size for n in jpeg_files(dst)) == s.jpeg_bytes


def dali_decoded(paths: list[Path]) -> list[np.ndarray]:
    """Each file as DALI's CPU decoder gives it (output_type=RGB)."""
    from nvidia.dali import fn, pipeline_def, types

    @pipeline_def(batch_size=len(paths), num_threads=1, device_id=None)
    def decode():
        encoded, _ = fn.readers.file(files=[str(p) for p in paths])
        return fn.decoders.image(encoded, device="cpu", output_type=types.RGB)

    return [np.asarray(t) for t in decode().run()[0]]


def test_jpeg_cache_writes_rgb_jpegs_upright_for_greyscale_cmyk_png_and_rotated_sources(tmp_path):
    from runner.data.jpeg_cache import build_jpeg_cache

    folder = tmp_path / "src" / "a"
    folder.mkdir(parents=True)
    Image.new("L", (40, 30), 128).save(folder / "grey.jpg")
    Image.new("CMYK", (40, 30), (0, 200, 200, 0)).save(folder / "cmyk.jpg")
    Image.new("RGBA", (40, 30), (200, 10, 10, 255)).save(folder / "p.png")
    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90 degrees: stored 60 x 20, shown 20 x 60
    Image.new("RGB", (60, 20), (10, 20, 30)).save(folder / "r.jpg", exif=exif)
    Image.new("RGB", (30, 20), (10, 20, 30)).save(folder / "small.jpg", exif=exif)  # within the side, yet rotated
    s = build_jpeg_cache(tmp_path / "src", tmp_path / "jpeg", max_side=30, quality=90, workers=1)
    assert (s.images, s.copied) == (5, 0)
    assert jpeg_files(tmp_path / "jpeg") == ["a/cmyk.jpg", "a/grey.jpg", "a/p.png.jpg", "a/r.jpg", "a/small.jpg"]

    def decoded(root):  # in the reader's order: sorted names
        return dali_decoded(sorted((root / "a").iterdir()))

    originals, cached = decoded(tmp_path / "src"), decoded(tmp_path / "jpeg")
    for o, c in zip(originals, cached):  # DALI applies EXIF orientation to the source; the cache holds it applied
        assert (o.shape[0] > o.shape[1]) == (c.shape[0] > c.shape[1]) and c.shape[2] == 3
        np.testing.assert_allclose(c.reshape(-1, 3).mean(0), o.reshape(-1, 3).mean(0), atol=6)
    for name in ("grey.jpg", "cmyk.jpg", "p.png.jpg", "r.jpg"):
        with Image.open(tmp_path / "jpeg" / "a" / name) as image:
            assert (image.format, image.mode, dict(image.getexif())) == ("JPEG", "RGB", {})
    assert [c.shape[:2] for c in cached] == [(22, 30), (22, 30), (22, 30), (30, 10), (30, 20)]


def test_an_interrupted_jpeg_build_continues_where_it_stopped(src, tmp_path):
    from runner.data.jpeg_cache import build_jpeg_cache

    dst = tmp_path / "jpeg"

    def stop_after_6(done: int, total: int) -> None:
        if done == 6:
            raise KeyboardInterrupt  # as Ctrl-C in the parent: the pool is terminated

    with pytest.raises(KeyboardInterrupt):
        build_jpeg_cache(src, dst, max_side=MAX_SIDE, quality=90, workers=1, progress=stop_after_6)
    assert not read_cache_marker(dst)["complete"]
    done = {p: p.stat().st_mtime_ns for p in dst.rglob("*.jpg")}
    assert len(done) >= 6

    s = build_jpeg_cache(src, dst, max_side=MAX_SIDE, quality=90, workers=2)
    assert (s.kept, s.written, s.images) == (len(done), 18 - len(done), 18)
    assert all(p.stat().st_mtime_ns == t for p, t in done.items())
    files = sorted(dst.rglob("*.jpg"))
    big = next(p for p in files[1:] if max(Image.open(p).size) == MAX_SIDE)
    files[0].unlink()
    big.write_bytes(big.read_bytes()[:-10])  # cut short, as by a full disk
    s = build_jpeg_cache(src, dst, max_side=MAX_SIDE, quality=90, workers=2)
    assert (s.kept, s.written) == (16, 2) and read_cache_marker(dst)["complete"]
    with Image.open(big) as image:
        image.load()


def test_a_jpeg_cache_with_other_settings_is_refused(src, tmp_path, monkeypatch):
    from runner.data.jpeg_cache import build_jpeg_cache

    monkeypatch.chdir(tmp_path)
    build_jpeg_cache(src, Path("jpeg"), max_side=MAX_SIDE, quality=90, workers=1)
    with pytest.raises(DataError) as e:
        build_jpeg_cache(src, Path("jpeg"), max_side=MAX_SIDE, quality=75, workers=1)
    assert str(e.value) == (
        "jpeg: holds a cache made with other settings: quality 90 (wanted 75). runner does not overwrite or "
        "delete it: choose another folder for these settings, or remove this one yourself.")
    with pytest.raises(DataError, match=r"^jpeg: holds a cache made with other settings: format jpeg \(wanted 2\)\. "
                                        r"runner does not overwrite"):
        build_cache(src, Path("jpeg"), max_side=MAX_SIDE, workers=1)


@pytest.mark.parametrize("args, message", [
    (["--quality", "0"], "--quality: 0 is not a JPEG quality: give 1-100 (90 is the measured default; above 95 "
                         "Pillow's files grow fast for little fidelity)."),
    (["--quality", "101"], "--quality: 101 is not a JPEG quality: give 1-100 (90 is the measured default; above 95 "
                           "Pillow's files grow fast for little fidelity)."),
    (["--max-side", "8"], "--max-side: 8 is too small: the longer side of a cached image is at least 16 px (FFCV's "
                          "ImageNet caches use 256-512; 320 fed a compiled ResNet-50 at 99% of its ceiling)."),
])
def test_bad_jpeg_settings_exit_2_with_one_paragraph(src, tmp_path, capsys, monkeypatch, args, message):
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli(["data", "cache", "src", "jpeg", "--format", "jpeg", *args], capsys)
    assert (code, out, err) == (2, "", f"error: {message}\n")
    assert not (tmp_path / "jpeg").exists()


def test_quality_is_refused_for_the_raw_cache(src, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli(["data", "cache", "src", "raw", "--quality", "90"], capsys)
    assert (code, out, err) == (2, "", "error: --quality: applies to --format jpeg; the raw cache stores decoded "
                                       "pixels, without loss.\n")


def test_jpeg_cache_cli_and_fingerprint_show_the_manifest(src, tmp_path, capsys, monkeypatch):
    from runner.data.scan import fingerprint

    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli(["data", "cache", "src", "jpeg", "--format", "jpeg", "--max-side", MAX_SIDE,
                              "--quality", 85, "--workers", 2], capsys)
    assert code == 0 and err == "" and "encoding: 18/18" in out
    s = read_cache_marker(tmp_path / "jpeg")["summary"]
    assert out.strip().splitlines()[-1] == (
        f"cached 18 images (train 12, val 6), 3 classes into jpeg as JPEG (longer side <= 48 px, quality 85, 9 small "
        f"JPEGs copied as they are): {s['bytes_out'] / 1024:.0f} KiB for {s['bytes_in'] / 1024:.0f} KiB of source "
        f"images, {s['ratio']:.2f}x the disk; 18 written, in {s['seconds']:.1f} s")
    code, out, err = run_cli(["data", "fingerprint", "jpeg"], capsys)
    lines = out.splitlines()
    settings = read_cache_marker(tmp_path / "jpeg")["settings"]
    assert code == 0 and lines[0] == (
        f"jpeg: JPEG cache, longer side <= 48 px, quality 85 (lanczos filter, 4:2:0 chroma, small JPEGs copied; "
        f"Pillow {settings['pillow']}, {settings['libjpeg']})")
    train = fingerprint(src / "train")
    assert f"  source train: 12 files in 3 classes, {train['bytes']} bytes, sha256 {train['sha256']}; " \
           "unchanged" in lines
    assert f"sha256 {fingerprint(tmp_path / 'jpeg' / 'val')['sha256']}" in lines
    code, out, _ = run_cli(["data", "fingerprint", "jpeg/train"], capsys)
    assert out.splitlines()[0] == lines[0] and "jpeg/train: 12 files in 3 classes," in out

    os.replace(src / "val" / "c0" / "000.jpg", src / "val" / "c1" / "moved.jpg")  # the source relabelled since
    val = fingerprint(src / "val")
    code, out, _ = run_cli(["data", "fingerprint", "jpeg"], capsys)
    assert code == 0 and (f"  source val: 6 files in 3 classes, {val['bytes']} bytes, sha256 " in out
                          and f"; changed since (now 6 files in 3 classes, {val['bytes']} bytes): `runner data cache "
                          f"{src.resolve()} jpeg --format jpeg --max-side 48 --quality 85` brings the cache up to "
                          "date" in out.replace("\n", ""))


def test_a_run_on_a_jpeg_cache_records_its_settings_and_source(src, tmp_path):
    from runner.data import manifest
    from runner.data.jpeg_cache import build_jpeg_cache
    from runner.data.scan import fingerprint

    build_jpeg_cache(src, tmp_path / "jpeg", max_side=MAX_SIDE, quality=90, workers=1)
    params = manifest.run_params("train", tmp_path / "jpeg" / "train")
    source = fingerprint(src / "train")
    assert {k: params[f"data.cache.train.{k}"] for k in ("format", "max_side", "quality", "complete")} == {
        "format": "jpeg", "max_side": "48", "quality": "90", "complete": "True"}
    assert params["data.cache.train.source_fingerprint.sha256"] == source["sha256"]
    assert manifest.run_tags({"eval": tmp_path / "jpeg" / "val"})["data.eval_cache"].startswith(
        "JPEG cache, longer side <= 48 px, quality 90 (lanczos filter, 4:2:0 chroma")
    assert manifest.run_params("train", src / "train") == {}


def test_the_shipped_jpeg_pipelines_read_the_jpeg_cache_with_the_class_labels(src, tmp_path, project):
    from runner.data.jpeg_cache import build_jpeg_cache
    from runner.dist import Dist
    from runner.loaders.loader import create_loader
    from runner.run.validate import validate

    build_jpeg_cache(src, tmp_path / "jpeg", max_side=MAX_SIDE, quality=90, workers=2)
    mean, std = np.array([0.485, 0.456, 0.406]) * 255, np.array([0.229, 0.224, 0.225]) * 255
    for train_pipeline in ("imagenet_train", "imagenet_train_fused"):
        (project / "experiments" / "jpeg.yaml").write_text(f"""
name: jpeg
model: {{name: resnet18, num_classes: 3}}
data: {{loader: dali, root: {tmp_path / "jpeg"}, batch_size: 4, num_threads: 1}}
pipelines:
  train: {{use: {train_pipeline}, params: {{size: 32}}}}
  eval: {{use: imagenet_eval, params: {{size: 32, resize_shorter: 36}}}}
""")
        v = validate(project / "experiments" / "jpeg.yaml", accelerator="cpu")
        for role, samples in (("train", 12), ("eval", 6)):
            loader = create_loader(v.loaders, role, Dist())
            seen = []
            for images, labels in loader.epoch():
                assert images.dtype.is_floating_point and tuple(images.shape[1:]) == (3, 32, 32)
                colours = images.numpy().mean(axis=(2, 3)) * std + mean   # back to 0-255 RGB
                np.testing.assert_array_equal(colours.argmax(1), labels.numpy())  # class k is colour k
                seen += labels.tolist()
            assert sorted(seen) == [k for k in range(3) for _ in range(samples // 3)]
            loader.close()


def write_deep_images(folder: Path) -> None:
    """A 16-bit grey PNG, TIFF and PGM and a float TIFF (0-1): ramps over their whole range."""
    folder.mkdir(parents=True)
    ramp = np.tile(np.linspace(0, 65535, 40).astype(np.uint16), (30, 1))
    Image.fromarray(ramp).save(folder / "grey16.png")
    Image.fromarray(ramp).save(folder / "grey16.tif")
    (folder / "grey16.pgm").write_bytes(b"P5\n40 30\n65535\n" + ramp.astype(">u2").tobytes())
    Image.fromarray(ramp.astype(np.float32) / 65535).save(folder / "float.tif")


def test_caches_scale_16_bit_and_float_images_to_8_bits_as_dali_does(tmp_path):
    from runner.data.jpeg_cache import build_jpeg_cache

    write_deep_images(tmp_path / "src" / "a")
    names = ["float.tif", "grey16.pgm", "grey16.png", "grey16.tif"]
    originals = dali_decoded([tmp_path / "src" / "a" / n for n in names])
    assert all(o[0, -1].tolist() == [255, 255, 255] and o[0, 0].tolist() == [0, 0, 0] for o in originals)
    assert originals[2][0, 20, 0] == round(int(np.linspace(0, 65535, 40).astype(np.uint16)[20]) / 257) == 131

    build_cache(tmp_path / "src", tmp_path / "raw", max_side=64, workers=1)  # no resize: the very pixels
    for name, original in zip(names, originals):
        np.testing.assert_array_equal(np.load(tmp_path / "raw" / "a" / f"{name}.npy"), original, err_msg=name)

    build_jpeg_cache(tmp_path / "src", tmp_path / "jpeg", max_side=64, quality=95, workers=1)
    cached = dali_decoded([tmp_path / "jpeg" / "a" / f"{n}.jpg" for n in names])
    for name, original, jpeg in zip(names, originals, cached):  # JPEG's loss only, not a white image
        assert np.abs(jpeg.astype(int) - original).mean() < 2, name


def test_a_builds_temporary_name_is_one_a_rerun_removes_once_its_process_is_gone(monkeypatch, tmp_path):
    from runner.data.cache import dead_temporary, temporary_path

    shard_index = tmp_path / "train" / "shard-000003.idx"
    alive = temporary_path(shard_index)
    assert alive.parent == shard_index.parent and alive.name.startswith(".shard-000003.idx.tmp-")
    assert not dead_temporary(alive.name)  # this process is still writing it
    monkeypatch.setattr(os, "getpid", lambda: 4194300)  # a pid no process here holds (near pid_max)
    assert dead_temporary(temporary_path(shard_index).name)
    assert not dead_temporary("shard-000003.idx") and not dead_temporary(".shard-000003.idx.tmp-4194300")
