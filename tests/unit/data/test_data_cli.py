"""`runner data synth|check|fingerprint`, run in-process: exit codes, files written, what is printed."""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from runner import console
from runner.cli import main
from runner.data.scan import fingerprint, read_skip_list

SMALL = ["--classes", "3", "--per-class", "4", "--eval-per-class", "2", "--min-side", "32", "--max-side", "48"]


LAYOUT = ("Expected an ImageFolder: ROOT/<class>/<image>.jpg, one folder per class with the images directly "
          "inside.")



@pytest.fixture(autouse=True)
def in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # paths in messages are shown relative to the working directory


def save_jpeg(path: Path, seed: int = 0) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    pixels = np.random.default_rng(seed).integers(0, 256, (16, 24, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(path, format="JPEG")


def test_synth_writes_the_set_then_reuses_it(capsys):
    assert main(["data", "synth", "set", *SMALL, "--workers", "2"]) == 0
    out = capsys.readouterr().out
    assert "generating: 0/18" in out and "generating: 18/18" in out  # plain lines: stdout is not a terminal
    last = out.strip().splitlines()[-1]
    assert last.startswith("wrote set: 18 images (12 train, 6 val, 3 classes), ")
    assert len(list(Path("set/train").rglob("*.jpg"))) == 12 and len(list(Path("set/val").rglob("*.jpg"))) == 6
    assert Path("set/.runner-synth.json").is_file()

    assert main(["data", "synth", "set", *SMALL]) == 0
    out = capsys.readouterr().out
    assert out.startswith("set already holds this dataset: 18 images (12 train, 6 val, 3 classes), ")
    assert out.strip().endswith("Nothing to do.") and "generating" not in out


def test_synth_refuses_a_folder_it_did_not_make(capsys):
    save_jpeg(Path("photos/cats/1.jpg"))
    assert main(["data", "synth", "photos", *SMALL]) == 2
    assert capsys.readouterr().err == (
        "error: photos: exists and is a folder without .runner-synth.json, not a synthetic dataset made by runner. "
        "runner does not write into (or delete) data it did not make: choose a new or empty folder, or remove "
        "this one.\n")
    assert [p.name for p in Path("photos").rglob("*")] == ["cats", "1.jpg"]


def test_synth_refuses_other_settings(capsys):
    assert main(["data", "synth", "set", *SMALL]) == 0
    assert main(["data", "synth", "set", *SMALL, "--seed", "3"]) == 2
    assert capsys.readouterr().err == (
        "error: set: holds a synthetic dataset made with other settings: seed 0 (wanted 3). Remove it or choose "
        "another folder (data.synth.dir keeps one folder per setting).\n")


def test_synth_rejects_bad_sides(capsys):
    assert main(["data", "synth", "set", "--min-side", "200", "--max-side", "100"]) == 2
    assert capsys.readouterr().err == "error: synthetic data: min_side (200) is larger than max_side (100).\n"
    assert not Path("set").exists()


def test_check_of_a_clean_folder(capsys):
    assert main(["data", "synth", "set", *SMALL]) == 0
    capsys.readouterr()
    assert main(["data", "check", "set/train", "--workers", "2"]) == 0
    out = capsys.readouterr().out
    assert "12 of 12 files decode (JPEG 12)." in out
    assert "skip list: set/train/.runner-bad-files.txt (0 file(s))" in out
    assert read_skip_list("set/train/.runner-bad-files.txt") == set()


def test_check_lists_bad_files_and_exits_1(capsys, monkeypatch):
    save_jpeg(Path("data/cat/good.jpg"))
    Image.new("L", (20, 10), 128).save("data/cat/grey.jpg")
    Path("data/dog").mkdir()
    whole = Path("data/cat/good.jpg").read_bytes()
    Path("data/dog/cut.jpg").write_bytes(whole[: len(whole) // 2])
    Path("data/dog/zero.jpg").write_bytes(b"")
    Path("data/dog/readme.txt").write_text("about the dogs")
    os.symlink("elsewhere.jpg", "data/dog/link.jpg")

    monkeypatch.setattr(console.out, "_width", 200)  # wide enough that no table cell wraps
    assert main(["data", "check", "data", "--output", "lists/bad.txt"]) == 1
    out = capsys.readouterr().out
    assert "3 file(s) that do not decode" in out
    cut = len(Path("data/dog/cut.jpg").read_bytes())
    rows = [" ".join(line.strip("│ ").split(" │ ")[:2]) for line in out.splitlines() if line.startswith("│")]
    rows = [" ".join(r.split()) for r in rows]
    assert rows == [f"dog/cut.jpg truncated JPEG (ends after {cut} bytes)",
                    "dog/link.jpg unreadable: broken symbolic link (to elsewhere.jpg)",
                    "dog/zero.jpg zero bytes",
                    "dog/readme.txt extension not read by DALI's file reader"]
    assert "1 entry ignored by the reader" in out
    assert out.endswith("2 of 5 files decode (JPEG 2); 1 greyscale (DALI converts them to RGB).\n"
                        "skip list: lists/bad.txt (3 file(s))\n")
    assert read_skip_list("lists/bad.txt") == {"dog/cut.jpg", "dog/zero.jpg", "dog/link.jpg"}
    assert not Path("data/.runner-bad-files.txt").exists()


@pytest.mark.parametrize("make, message", [
    (lambda: None, f"data: no such folder. {LAYOUT}"),
    (lambda: Path("data").mkdir(), f"data: the folder is empty. {LAYOUT}"),
    (lambda: save_jpeg(Path("data/a.jpg")),
     f"data: no class folders, only 1 file(s) such as 'a.jpg'. {LAYOUT[:-1]}; put each class's images in a "
     "folder named after the class."),
    (lambda: (save_jpeg(Path("data/cat/1.jpg")), Path("data/dog").mkdir()),
     "data: 1 of 2 class folders hold no images: 'dog'. DALI's reader numbers every subfolder as a class (hidden "
     f"and empty ones too), so these would shift the labels; remove them or add images. {LAYOUT}"),
    (lambda: save_jpeg(Path("data/train/cat/more/1.jpg")),  # a split's own mistakes are reported as its
     "data/train: no images directly inside its subfolders ('cat'); they hold folders. If this folder holds splits, "
     f"point at one split, e.g. data/train/cat. {LAYOUT}"),
], ids=["missing", "empty", "no-classes", "empty-class", "nested-too-deep"])
@pytest.mark.parametrize("command", ["check", "fingerprint"])
def test_bad_layouts_exit_2_with_one_paragraph(capsys, command, make, message):
    make()
    assert main(["data", command, "data"]) == 2
    captured = capsys.readouterr()
    assert captured.err == f"error: {message}\n"
    assert captured.out == ""
    assert not Path("data/.runner-bad-files.txt").exists()


def test_check_and_fingerprint_of_a_folder_of_splits_take_each_split(capsys):
    assert main(["data", "synth", "set", *SMALL]) == 0
    whole = Path("set/val/c0001/00000.jpg").read_bytes()
    Path("set/val/c0001/00000.jpg").write_bytes(whole[:100])
    capsys.readouterr()
    assert main(["data", "check", "set"]) == 1  # a file in val does not decode
    out = capsys.readouterr().out
    train, val = out.split("split val\n")
    assert train.startswith("split train\n") and "12 of 12 files decode (JPEG 12)." in train
    assert "skip list: set/train/.runner-bad-files.txt (0 file(s))" in train
    assert "5 of 6 files decode (JPEG 5)." in val and "skip list: set/val/.runner-bad-files.txt (1 file(s))" in val
    assert read_skip_list("set/val/.runner-bad-files.txt") == {"c0001/00000.jpg"}
    assert read_skip_list("set/train/.runner-bad-files.txt") == set()

    assert main(["data", "fingerprint", "set"]) == 0
    train, val = fingerprint("set/train"), fingerprint("set/val")
    assert capsys.readouterr().out == (f"set/train: 12 files in 3 classes, {train['bytes']} bytes\n"
                                       f"sha256 {train['sha256']}\n"
                                       f"set/val: 6 files in 3 classes, {val['bytes']} bytes\nsha256 {val['sha256']}\n")


def test_one_skip_list_file_for_a_folder_of_splits_is_refused(capsys):
    assert main(["data", "synth", "set", *SMALL]) == 0
    capsys.readouterr()
    assert main(["data", "check", "set", "--output", "bad.txt"]) == 2
    assert capsys.readouterr().err == (
        "error: set: holds splits (train, val), each with its own skip list in its folder; --output names one file, "
        "so give it with one split (e.g. set/train), or leave it out.\n")
    assert not Path("bad.txt").exists() and not Path("set/train/.runner-bad-files.txt").exists()


def test_fingerprint_prints_the_hash(capsys):
    assert main(["data", "synth", "set", *SMALL]) == 0
    capsys.readouterr()
    assert main(["data", "fingerprint", "set/val"]) == 0
    fp = fingerprint("set/val")
    assert capsys.readouterr().out == (f"set/val: 6 files in 3 classes, {fp['bytes']} bytes\n"
                                       f"sha256 {fp['sha256']}\n")


def test_bad_number_is_an_argparse_error(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["data", "synth", "set", "--classes", "0"])
    assert exit_.value.code == 2
    assert "argument --classes: must be at least 1, got 0" in capsys.readouterr().err


def test_paths_are_printed_as_they_are(capsys, monkeypatch):
    monkeypatch.setattr(console.out, "_width", 200)
    save_jpeg(Path("data/[red]cat/1.jpg"))
    Path("data/[red]cat/[b]zero.jpg").write_bytes(b"")
    assert main(["data", "check", "data"]) == 1
    assert "│ [red]cat/[b]zero.jpg │ zero bytes │" in capsys.readouterr().out  # not taken for rich markup


def test_unwritable_skip_list_is_an_error(capsys):
    save_jpeg(Path("data/cat/1.jpg"))
    Path("taken").write_text("a file, not a folder")
    assert main(["data", "check", "data", "--output", "taken/bad.txt"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: taken/bad.txt: cannot write the skip list (")
    assert err.endswith("); choose another file with --output FILE.\n")
