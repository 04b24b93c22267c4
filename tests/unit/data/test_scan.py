"""The reader's view of an ImageFolder (checked against a real DALI pipeline), fingerprints, decode checks."""
from __future__ import annotations

import io
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from runner.data.scan import (
    DEFAULT_SKIP_LIST,
    READER_CASE_SENSITIVE,
    READER_FILE_FILTERS,
    FileIssue,
    check_images,
    default_skip_list,
    fingerprint,
    read_skip_list,
    scan_image_folder,
    write_skip_list,
)
from runner.errors import DataError


def image(mode: str = "RGB", size: tuple[int, int] = (24, 16), seed: int = 0) -> Image.Image:
    pixels = np.random.default_rng(seed).integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)
    return Image.fromarray(pixels).convert(mode)


def save(path: Path, mode: str = "RGB", format: str = "JPEG", seed: int = 0) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    image(mode, seed=seed).save(path, format=format)
    return path


def jpeg_bytes(seed: int = 0) -> bytes:
    buffer = io.BytesIO()
    image(size=(64, 48), seed=seed).save(buffer, format="JPEG", quality=90)
    return buffer.getvalue()


def tricky_folder(root: Path) -> Path:
    """Everything that decides what fn.readers.file reads and how it numbers classes."""
    save(root / "dog" / "b.jpg")
    save(root / "dog" / "a.JPG")                       # upper-case extension: read (filters are case-insensitive)
    save(root / "dog" / "c.png", format="PNG")
    save(root / "dog" / "nested" / "x.jpg")            # below a class folder: not read
    (root / "dog" / "folder.jpg").mkdir()              # a folder named like an image: not read
    (root / "dog" / "notes.txt").write_text("hello")   # other extension: not read
    save(root / "Zebra" / "z.jpeg")                    # upper case sorts before lower case
    save(root / ".hidden" / "h.jpg")                   # hidden folders are classes too
    save(root / "cat" / "1.jpg")
    save(root / "cat" / "10.jpg")                      # byte order: 1, 10, 2
    save(root / "cat" / "2.jpg")
    save(root / "top.jpg")                             # outside every class folder: not read
    return root


def test_scan_lists_classes_files_and_labels(tmp_path):
    scan = scan_image_folder(tricky_folder(tmp_path / "data"))
    assert scan.classes == (".hidden", "Zebra", "cat", "dog")
    assert list(scan.files) == [(".hidden/h.jpg", 0), ("Zebra/z.jpeg", 1), ("cat/1.jpg", 2), ("cat/10.jpg", 2),
                                ("cat/2.jpg", 2), ("dog/a.JPG", 3), ("dog/b.jpg", 3), ("dog/c.png", 3)]
    assert list(scan.ignored) == [
        FileIssue("top.jpg", "outside any class folder"),
        FileIssue("dog/folder.jpg", "a folder named like an image (the reader reads no subfolders of class folders)"),
        FileIssue("dog/nested", "a folder (the reader reads no subfolders of class folders)"),
        FileIssue("dog/notes.txt", "extension not read by DALI's file reader"),
    ]


def test_filters_match_the_installed_dali():
    backend = pytest.importorskip("nvidia.dali.backend")
    schema = backend.GetSchema("readers__File")
    assert schema.GetArgumentDefaultValueString("file_filters") == str(list(READER_FILE_FILTERS))
    assert schema.GetArgumentDefaultValueString("case_sensitive_filter") == str(READER_CASE_SENSITIVE)


def dali_listing(root: Path) -> list[tuple[str, int]]:
    """(path relative to root, label) of every sample of one epoch of fn.readers.file, unshuffled."""
    dali = pytest.importorskip("nvidia.dali")
    from nvidia.dali import fn

    @dali.pipeline_def(batch_size=1, num_threads=1, device_id=None)
    def listing():
        jpegs, labels = fn.readers.file(file_root=str(root), random_shuffle=False, name="reader")
        return fn.get_property(jpegs, key="source_info"), labels

    pipe = listing()
    pipe.build()
    samples = []
    for _ in range(pipe.epoch_size("reader")):
        source, label = pipe.run()
        path = bytes(np.asarray(source.at(0))).decode()
        samples.append((os.path.relpath(os.path.join(root, path), root), int(np.asarray(label.at(0)).item())))
    return samples


def test_labels_and_order_agree_with_dali(tmp_path):
    root = tricky_folder(tmp_path / "data")
    (root / DEFAULT_SKIP_LIST).write_text("# a skip list beside the classes changes nothing\n")
    assert dali_listing(root) == list(scan_image_folder(root).files)


def test_scan_of_a_synthetic_split(tmp_path):
    from runner.data.synth import generate_synthetic

    generate_synthetic(tmp_path / "set", classes=3, per_class=2, eval_per_class=1, min_side=16, max_side=20,
                       quality=80)
    scan = scan_image_folder(tmp_path / "set" / "train")
    assert scan.classes == ("c0000", "c0001", "c0002") and len(scan) == 6
    assert dali_listing(tmp_path / "set" / "train") == list(scan.files)


LAYOUT = r"Expected an ImageFolder: ROOT/<class>/<image>\.jpg, one folder per class with the images directly inside\."


def _missing(root: Path) -> None:
    pass


def _file(root: Path) -> None:
    root.write_text("x")


def _empty(root: Path) -> None:
    root.mkdir()


def _only_files(root: Path) -> None:
    save(root / "a.jpg")
    save(root / "b.jpg")


def _empty_class(root: Path) -> None:
    save(root / "cat" / "1.jpg")
    (root / ".ipynb_checkpoints").mkdir()
    (root / "dog").mkdir()
    (root / "dog" / "readme.txt").write_text("x")


def _splits(root: Path) -> None:
    save(root / "train" / "cat" / "1.jpg")
    save(root / "val" / "cat" / "1.jpg")


def _broken_link(root: Path) -> None:
    save(root / "cat" / "1.jpg")
    os.symlink(root / "gone", root / "dog")


@pytest.mark.parametrize("make, message", [
    (_missing, r"^data: no such folder\. " + LAYOUT),
    (_file, r"^data: is a file, not a folder\. " + LAYOUT),
    (_empty, r"^data: the folder is empty\. " + LAYOUT),
    (_only_files, r"^data: no class folders, only 2 file\(s\) such as 'a\.jpg'\. " + LAYOUT[:-2]
     + r"; put each class's images in a folder named after the class\.$"),
    (_empty_class, r"^data: 2 of 3 class folders hold no images: '\.ipynb_checkpoints', 'dog'\. DALI's reader "
     r"numbers every subfolder as a class \(hidden and empty ones too\), so these would shift the labels; "
     r"remove them or add images\. " + LAYOUT),
    (_splits, r"^data: no images directly inside its subfolders \('train', 'val'\); they hold folders\. If this "
     r"folder holds splits, point at one split, e\.g\. data/train\. " + LAYOUT),
    (_broken_link, r"^data: 'dog' is a broken symbolic link: DALI's reader stops on it \('Could not access \.\.\. "
     r"during directory traversal'\)\. Remove it\.$"),
], ids=lambda v: v.__name__.strip("_") if callable(v) else "")
def test_bad_layouts(tmp_path, monkeypatch, make, message):
    monkeypatch.chdir(tmp_path)
    make(tmp_path / "data")
    with pytest.raises(DataError, match=message):
        scan_image_folder(tmp_path / "data")


def test_fingerprint_depends_on_names_and_sizes_only(tmp_path):
    a = tricky_folder(tmp_path / "a")
    fp = fingerprint(a)
    sizes = [(a / p).stat().st_size for p, _ in scan_image_folder(a).files]
    assert (fp["files"], fp["classes"], fp["bytes"]) == (8, 4, sum(sizes))
    assert len(fp["sha256"]) == 64
    b = tmp_path / "b"
    shutil.copytree(a, b)
    (b / "dog" / "notes.txt").write_text("not read, not counted")
    assert fingerprint(b) == fp                          # another machine, same files
    (b / "cat" / "2.jpg").rename(b / "cat" / "3.jpg")
    assert fingerprint(b)["sha256"] != fp["sha256"]      # a renamed file
    shutil.rmtree(b)
    shutil.copytree(a, b)
    with open(b / "cat" / "2.jpg", "ab") as f:
        f.write(b"\0")
    assert fingerprint(b)["sha256"] != fp["sha256"]      # a file of another size


def corrupt_folder(root: Path) -> Path:
    """One of each kind of file a real dataset holds, good and bad."""
    save(root / "a" / "good.jpg")
    save(root / "a" / "grey.jpg", mode="L")
    save(root / "a" / "cmyk.jpg", mode="CMYK")
    save(root / "a" / "picture.png", format="PNG")
    save(root / "a" / "gif.jpg", format="GIF")
    whole = jpeg_bytes()
    (root / "b").mkdir()
    (root / "b" / "truncated.jpg").write_bytes(whole[: len(whole) // 2])
    (root / "b" / "empty.jpg").write_bytes(b"")
    (root / "b" / "text.jpg").write_text("<html><body>404 Not Found</body></html>")
    (root / "b" / "binary.jpg").write_bytes(bytes(range(256)) * 4)
    os.symlink(root / "b" / "moved-away.jpg", root / "b" / "link.jpg")
    (root / "b" / "folder.jpg").mkdir()
    (root / "b" / "labels.csv").write_text("x,y\n")
    return root


def test_check_reports_each_kind_of_bad_file(tmp_path):
    root = corrupt_folder(tmp_path / "data")
    report = check_images(root, workers=2)
    reasons = dict(report.bad)
    assert sorted(reasons) == ["a/gif.jpg", "b/binary.jpg", "b/empty.jpg", "b/link.jpg", "b/text.jpg",
                               "b/truncated.jpg"]
    assert reasons["a/gif.jpg"] == "GIF image: DALI's decoder does not read GIF (convert it to JPEG or PNG)"
    assert reasons["b/empty.jpg"] == "zero bytes"
    assert reasons["b/text.jpg"] == "not an image (a text file: '<html><body>404 Not Found</bod...')"
    assert reasons["b/binary.jpg"] == "not an image (unknown format, starts with 00 01 02 03)"
    assert reasons["b/link.jpg"] == f"unreadable: broken symbolic link (to {root / 'b' / 'moved-away.jpg'})"
    assert reasons["b/truncated.jpg"] == f"truncated JPEG (ends after {len(jpeg_bytes()) // 2} bytes)"
    assert [i.path for i in report.ignored] == ["b/folder.jpg", "b/labels.csv"]
    assert (report.checked, report.ok) == (10, False)
    assert report.formats == {"JPEG": 3, "PNG": 1}
    assert (report.greyscale, report.cmyk, report.png) == (1, 1, 1)


def test_check_of_good_files(tmp_path):
    root = tmp_path / "data"
    for i in range(6):
        save(root / f"c{i % 2}" / f"{i}.jpg", seed=i)
    calls = []
    report = check_images(root, progress=lambda done, total: calls.append((done, total)))
    assert report.ok and report.bad == () and report.checked == 6
    assert calls[0] == (0, 6) and calls[-1] == (6, 6)


def test_skip_list_round_trip(tmp_path):
    root = corrupt_folder(tmp_path / "data")
    report = check_images(root)
    path = write_skip_list(report, default_skip_list(root))
    assert path == root / ".runner-bad-files.txt"
    lines = path.read_text().splitlines()
    assert lines[0] == f"# files under {root.resolve()} that do not decode (runner data check):"
    assert lines[1] == "# 6 of 10; one path relative to that folder per line."
    assert read_skip_list(path) == {issue.path for issue in report.bad}
    assert scan_image_folder(root).classes == ("a", "b")  # the list beside the classes is not a class


def test_missing_skip_list(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(DataError, match=r"^nope\.txt: no such skip list; `runner data check ROOT` writes one\.$"):
        read_skip_list(tmp_path / "nope.txt")


def test_runner_cache_holds_reader_file_lists_cached_skip_lists_and_fetched_weights(tmp_path, monkeypatch):
    from runner.data.skips import skip_list_locations, write_file_list
    from runner.weights.store import cache_dir

    split = tmp_path / "data" / "train"
    monkeypatch.setenv("RUNNER_CACHE", str(tmp_path / "rc"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    listed = write_file_list(split, [("c0/a.jpg", 0), ("c1/b.jpg", 1)])
    assert listed.parent == tmp_path / "rc" / "file-lists" and listed.read_text() == "c0/a.jpg 0\nc1/b.jpg 1\n"
    key = listed.name[:16]  # the split's key, which names its lists in the cache
    assert skip_list_locations(split) == [split / DEFAULT_SKIP_LIST, tmp_path / "rc" / "skip-lists" / f"{key}.txt"]
    assert cache_dir() == tmp_path / "rc" / "weights"
    monkeypatch.delenv("RUNNER_CACHE")
    assert cache_dir() == tmp_path / "xdg" / "runner" / "weights"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_dir() == tmp_path / "home" / ".cache" / "runner" / "weights"


def test_check_reports_a_32_bit_integer_tiff_that_dali_stops_on(tmp_path):
    from nvidia.dali import fn, pipeline_def, types

    path = tmp_path / "data" / "a" / "deep.tif"
    path.parent.mkdir(parents=True)
    Image.fromarray(np.arange(12, dtype=np.int32).reshape(3, 4) * 5000).save(path)

    @pipeline_def(batch_size=1, num_threads=1, device_id=None)
    def decode():
        encoded, _ = fn.readers.file(files=[str(path)])
        return fn.decoders.image(encoded, device="cpu", output_type=types.RGB)

    with pytest.raises(RuntimeError, match="Invalid sample_type"):  # why the check lists it
        decode().run()
    report = check_images(tmp_path / "data", workers=1)
    assert dict(report.bad) == {"a/deep.tif": "32-bit integer TIFF: DALI's decoder stops on it ('Invalid "
                                              "sample_type'); save it with 8 or 16 bits a sample"}
