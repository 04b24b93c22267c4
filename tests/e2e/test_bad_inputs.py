"""The bad inputs that are found only once training starts, each through the real CLI, each message pinned: files
that do not decode, partner processes and stores that fail, and the odd but valid folders and files that must train.
tests/unit/run/test_bad_inputs.py holds the catalog the checks refuse before any work.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from tests.fixtures.bad_inputs import (
    EXP,
    EXP_MINE,
    LAUNCH,
    PIPE,
    VALIDATE,
    Case,
    check_bad_input,
    images,
    train_and_val,
)
from tests.helpers import REPO, run_cli

MODEL_IMAGES = ("the trainer takes floating-point images with the channels first (N, C, H, W) or last (N, H, W, C), "
                "at most 4 channels and sides longer than 4 px. End the pipeline with crop_mirror_normalize(..., "
                'dtype=FLOAT, output_layout="CHW") (or "HWC", or dtype=FLOAT16), as the shipped pipelines do.')


def mixed_formats(p: Path) -> None:
    rng = np.random.default_rng(0)
    images(p / "data" / "train", classes=2, per_class=3)
    images(p / "data" / "val")
    Image.fromarray(rng.integers(0, 256, (30, 40), dtype=np.uint8), "L").save(p / "data/train/c0/grey.jpg")
    Image.fromarray(rng.integers(0, 256, (30, 40, 4), dtype=np.uint8), "CMYK").save(p / "data/train/c0/cmyk.jpg")
    Image.fromarray(rng.integers(0, 256, (30, 40, 3), dtype=np.uint8)).save(p / "data/train/c1/rgb.png")
    Image.fromarray(rng.integers(0, 256, (30, 40, 4), dtype=np.uint8), "RGBA").save(p / "data/train/c1/rgba.png")
    Image.fromarray(rng.integers(0, 256, (30, 40), dtype=np.uint8), "L").save(p / "data/val/c1/grey.png")


@pytest.mark.parametrize("loader", ["dali", "torchvision"])
def test_greyscale_cmyk_and_png_files_train(project, capsys, loader):
    mixed_formats(project)
    (project / "experiments" / "exp.yaml").write_text(EXP)
    tv = ["data.torchvision.train=[RandomResizedCrop(32), ToTensor()]",
          "data.torchvision.eval=[Resize(36), CenterCrop(32), ToTensor()]", "data.torchvision.num_workers=0"]
    code, out, err = run_cli([*LAUNCH, f"data.loader={loader}", *(tv if loader == "torchvision" else [])], capsys)
    assert code == 0, err
    assert "epochs / steps" in out and "FINISHED" in out


def test_a_truncated_jpeg_is_named_listed_then_skipped(project, capsys):
    """DALI stops on a JPEG cut in the middle of its data; the run names it, lists it, and the next run trains
    without it (the skip list is the runner's: data.skip_bad_files)."""
    images(project / "data" / "train", classes=2, per_class=3)
    images(project / "data" / "val")
    bad = project / "data" / "train" / "c0" / "001.jpg"
    data = bad.read_bytes()
    bad.write_bytes(data[:len(data) // 2])
    (project / "experiments" / "exp.yaml").write_text(EXP)

    code, _, err = run_cli(LAUNCH, capsys)
    assert (code, err) == (2, "error: data/train: the train pipeline failed to decode an image (Failed to decode "
                              f"sample #1 : c0/001.jpg). 1 file(s) here do not decode: c0/001.jpg (truncated JPEG "
                              f"(ends after {len(data) // 2} bytes)). They are now listed in "
                              "data/train/.runner-bad-files.txt, so the next run leaves them out: run the same command "
                              "again.\n")
    code, out, err = run_cli(LAUNCH, capsys)
    assert code == 0, err
    assert "epochs / steps │ 1 / 2" in " ".join(out.split())  # 5 of 6 images left, batch 2


def zero_bytes(p: Path) -> None:
    (p / "data" / "train" / "c0" / "001.jpg").write_bytes(b"")


def broken_link(p: Path) -> None:
    os.symlink(p / "data" / "gone.jpg", p / "data" / "train" / "c0" / "zz.jpg")


@pytest.mark.parametrize("damage, why", [(zero_bytes, "c0/001.jpg (zero bytes)"),
                                         (broken_link, "c0/zz.jpg (unreadable: broken symbolic link")],
                         ids=["zero bytes", "broken link"])
def test_a_file_the_reader_cannot_map_is_named(project, capsys, damage, why):
    images(project / "data" / "train", classes=2, per_class=3)
    images(project / "data" / "val")
    damage(project)
    (project / "experiments" / "exp.yaml").write_text(EXP)
    code, _, err = run_cli(LAUNCH, capsys)
    assert code == 2 and err.startswith("error: data/train: ") and why in err


def test_a_truncated_jpeg_with_the_torchvision_loader_is_named(project, capsys):
    images(project / "data" / "train", classes=2, per_class=3)
    images(project / "data" / "val")
    bad = project / "data" / "train" / "c0" / "001.jpg"
    bad.write_bytes(bad.read_bytes()[:len(bad.read_bytes()) // 2])
    (project / "experiments" / "exp.yaml").write_text(EXP)
    code, _, err = run_cli([*LAUNCH, "data.loader=torchvision", "data.torchvision.num_workers=0",
                            "data.torchvision.train=[RandomResizedCrop(32), ToTensor()]",
                            "data.torchvision.eval=[Resize(36), CenterCrop(32), ToTensor()]"], capsys)
    assert code == 2 and err.startswith("error: cannot decode data/train/c0/001.jpg (OSError: image file is "
                                        "truncated") and err.count("\n") == 1


def one_val_image_per_class(p: Path) -> None:
    images(p / "data" / "train", per_class=4)
    images(p / "data" / "val", per_class=1)


CPU4 = ["trainer.accelerator=cpu", "trainer.devices=4"]


PARTNER_CASES = [
    Case("compile mode without compile", args=[*VALIDATE, "trainer.compile_mode=max-autotune"],
         expected="command line 'trainer.compile_mode=max-autotune': trainer.compile_mode: 'max-autotune' is set but "
                  "trainer.compile is false, so the model would run without torch.compile; set trainer.compile=true, "
                  "or remove trainer.compile_mode."),
    Case("nesterov without momentum", exp=EXP + "optimizer: {momentum: 0, nesterov: true}\n",
         expected="experiments/exp.yaml:8: optimizer.nesterov: true needs momentum, but optimizer.momentum is 0 "
                  "(torch's SGD refuses Nesterov momentum without it); set optimizer.momentum above 0, e.g. 0.9, or "
                  "nesterov=false."),
    Case("adam beta of 1 or more", exp=EXP + "optimizer:\n  name: adamw\n  betas:\n    - 0.9\n    - 1.0\n",
         expected="experiments/exp.yaml:12: optimizer.betas[1]: 1.0 is out of range; it must be at least 0 and less "
                  "than 1."),
    Case("empty MLflow experiment name", args=[*VALIDATE, "tracking.enabled=true", "tracking.experiment=''"],
         expected="command line 'tracking.experiment=''': tracking.experiment: an empty name; MLflow files every run "
                  "under a named experiment, e.g. tracking.experiment=resnet50 (the default: runner)."),
    Case("mapping for a pair in the file", exp=EXP + "optimizer:\n  betas: {b1: 0.9}\n",
         expected="experiments/exp.yaml:9: optimizer.betas: {'b1': 0.9} is not valid; expected a list of numbers."),
    Case("list for a mapping in the file", exp=EXP.replace("num_classes: 2}", "num_classes: 2, kwargs: [0.2]}"),
         expected="experiments/exp.yaml:1: model.kwargs: [0.2] is not valid; expected a mapping."),
    Case("train batch larger than the train split", args=[*LAUNCH, "data.batch_size=8"], setup=train_and_val,
         expected="command line 'data.batch_size=8': data.batch_size: 8 images per process for 1 process(es) need "
                  "at least 8 training images, but data/train holds 4 that the reader reads; lower data.batch_size "
                  "to at most 4, or add images."),
    Case("train split under a batch per process", args=[*LAUNCH, *CPU4], setup=train_and_val,
         expected="experiments/exp.yaml:3: data.batch_size: 2 images per process for 4 process(es) need at least 8 "
                  "training images, but data/train holds 4 that the reader reads; lower data.batch_size to at most 1, "
                  "or add images."),
    Case("pipeline that makes uint8 images", args=LAUNCH, setup=train_and_val, exp=EXP_MINE,
         pipe=PIPE.replace('  - images = crop_mirror_normalize(images, dtype=FLOAT, output_layout="CHW")\n', ""),
         expected="pipelines/mine.yaml:6: outputs: the train pipeline's images are torch.uint8 of shape [2, 32, 32, "
                  f"3]; {MODEL_IMAGES}"),
    Case("pipeline that makes one image as a batch of rows", args=LAUNCH, setup=train_and_val, exp=EXP_MINE,
         pipe=PIPE.replace('output_layout="CHW"', 'output_layout="CHW")\n  - images = reshape(images, shape=[3, 1024]'),
         expected="pipelines/mine.yaml:8: outputs: the train pipeline's images are torch.float32 of shape [2, 3, "
                  f"1024]; {MODEL_IMAGES}"),
    Case("fewer eval images than processes", args=[*LAUNCH, *CPU4], setup=one_val_image_per_class,
         expected="experiments/exp.yaml:3: data.eval_split: data/val holds 2 image(s) that the reader reads, fewer "
                  "than the 4 processes that each evaluate a share of them (DALI's reader needs at least one per "
                  "process); add images, or run fewer processes."),
]


@pytest.mark.parametrize("case", PARTNER_CASES, ids=[c.id for c in PARTNER_CASES])
def test_bad_partner(case: Case, project, capsys, monkeypatch):
    check_bad_input(case, project, capsys, monkeypatch)


def _copy_image(p: Path, src: str, dst: str | bytes) -> None:
    dst = dst if isinstance(dst, bytes) else os.fsencode(p / dst)
    Path(os.fsdecode(dst)).write_bytes((p / src).read_bytes())


def os_litter(p: Path) -> None:
    for where in ("data/train", "data/train/c0", "data/val"):
        (p / where / ".DS_Store").write_bytes(b"\0\0\0\1Bud1\0")


def notebook_checkpoints_in_a_class(p: Path) -> None:
    (p / "data/train/c0/.ipynb_checkpoints").mkdir()
    _copy_image(p, "data/train/c0/000.jpg", "data/train/c0/.ipynb_checkpoints/000-checkpoint.jpg")


def nested_folder_in_a_class(p: Path) -> None:
    (p / "data/train/c1/more").mkdir()
    _copy_image(p, "data/train/c1/000.jpg", "data/train/c1/more/x.jpg")


def upper_case_extensions(p: Path) -> None:
    for f, suffix in zip(sorted((p / "data/train").rglob("*.jpg")), (".JPG", ".JPEG", ".Jpg", ".jpeg")):
        f.rename(f.with_suffix(suffix))
    Image.open(p / "data/train/c0/000.JPG").save(p / "data/train/c0/extra.PNG")


def linked_file_and_class(p: Path) -> None:
    os.symlink(p / "data/train/c0/000.jpg", p / "data/train/c0/linked.jpg")
    (p / "data/train/c1").rename(p / "data/c1-elsewhere")
    os.symlink(p / "data/c1-elsewhere", p / "data/train/c1")
    os.symlink(p / "data/train", p / "data/train/c0/loop")  # a link to a folder inside a class: not read


def odd_names(p: Path) -> None:
    _copy_image(p, "data/train/c0/000.jpg", "data/train/c0/my photo 1.jpg")
    _copy_image(p, "data/train/c0/000.jpg", "data/train/c1/café ü.jpg")
    _copy_image(p, "data/train/c0/000.jpg", os.fsencode(p / "data/train/c1") + b"/latin1-\xe9.jpg")
    for split in ("train", "val"):
        (p / "data" / split / "c1").rename(p / "data" / split / "chat noir é")


# (folder set-up, extra overrides, images the reader reads in data/train)
TRAINING_FOLDERS = {
    "OS litter (.DS_Store)": (os_litter, [], 4),
    "notebook checkpoints in a class folder": (notebook_checkpoints_in_a_class, [], 4),
    "nested folder in a class folder": (nested_folder_in_a_class, [], 4),
    "upper-case extensions": (upper_case_extensions, [], 5),
    "linked file, linked class, link loop": (linked_file_and_class, [], 5),
    "spaces, unicode and non-UTF-8 names": (odd_names, [], 7),
    "train and val the same folder": (lambda p: None, ["data.eval_split=train"], 4),
}


@pytest.mark.parametrize("name", TRAINING_FOLDERS)
def test_an_odd_but_valid_folder_trains_on_the_reader_files(project, capsys, name):
    setup, overrides, files = TRAINING_FOLDERS[name]
    train_and_val(project)
    setup(project)
    (project / "experiments" / "exp.yaml").write_text(EXP)
    code, out, err = run_cli(["data", "check", "data/train"], capsys)
    assert code == 0 and f"{files} of {files} files decode" in out, out + err
    code, out, err = run_cli([*LAUNCH, *overrides], capsys)
    assert code == 0 and "Traceback" not in err, err
    assert f"epochs / steps │ 1 / {files // 2}" in " ".join(out.split()), out


def test_a_hidden_image_copy_in_a_class_folder_is_checked_and_skipped(project, capsys):
    """macOS leaves ._NAME.jpg AppleDouble files beside copied images: the reader reads them, the decode check
    lists them, and the run leaves them out."""
    train_and_val(project)
    (project / "data/train/c1/._000.jpg").write_bytes(b"\0\5\26\7\0\2\0\0Mac OS X        ")
    (project / "experiments" / "exp.yaml").write_text(EXP)
    code, out, _ = run_cli(["data", "check", "data/train"], capsys)
    assert code == 1 and "4 of 5 files decode" in out and "c1/._000.jpg" in out
    code, out, err = run_cli(LAUNCH, capsys)
    assert code == 0, err
    assert "epochs / steps │ 1 / 2" in " ".join(out.split())


def val_with_another_class(p: Path) -> None:
    images(p / "data" / "train", classes=2)
    images(p / "data" / "val", classes=3)


def checkpoint_images_at_the_root(p: Path) -> None:
    train_and_val(p)
    (p / "data/train/.ipynb_checkpoints").mkdir()
    _copy_image(p, "data/train/c0/000.jpg", "data/train/.ipynb_checkpoints/000-checkpoint.jpg")


def test_splits_whose_class_folders_differ_stop_or_train_on_labels_by_class_name(project, capsys):
    """Each split used to be numbered by its own folders. A val class that train lacks now stops the run; a
    hidden folder of images in train is a class of the train map (as DALI's reader counts it), absent from val,
    and the other classes keep their labels in both splits."""
    val_with_another_class(project)
    (project / "experiments" / "exp.yaml").write_text(EXP.replace("num_classes: 2", "num_classes: 3"))
    code, _, err = run_cli(LAUNCH, capsys)
    assert code == 2 and err.startswith("error: ") and err.count("\n") == 1, err
    assert "holds 1 class folder(s) that the train split data/train lacks: 'c2'" in err

    shutil.rmtree(project / "data")
    checkpoint_images_at_the_root(project)
    code, _, err = run_cli(LAUNCH, capsys)
    assert code == 0, err
    assert "'.ipynb_checkpoints'" in err and "note:" in err


# ---- model names and kwargs: timm's models (model.name: timm/<name>), torchvision's fixed and runner-set arguments
TIMM_ONLY = ("experiments/exp.yaml:1: model.name: timm/resnet18 is one of timm's models, and timm is not installed. "
             "Install it: pip install 'timm>=1.0' (a dependency of runner); "
             "`runner models timm/` then lists its models.")


HIDE_TIMM = """\
import sys


class HideTimm:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "timm":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)


sys.meta_path.insert(0, HideTimm())
"""


def test_without_timm_its_models_are_named_with_the_extra_that_brings_them(project, tmp_path):
    (tmp_path / "hide").mkdir()
    (tmp_path / "hide" / "sitecustomize.py").write_text(HIDE_TIMM)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path / "hide"), str(REPO)])}
    (project / "experiments" / "exp.yaml").write_text(EXP.replace("resnet18", "timm/resnet18"))
    hidden = subprocess.run([sys.executable, "-c", "import timm"], env=env, capture_output=True, text=True)
    assert hidden.returncode == 1 and "No module named 'timm'" in hidden.stderr  # timm is hidden indeed
    runner = [sys.executable, "-m", "runner"]
    done = subprocess.run([*runner, "validate", "experiments/exp.yaml"], env=env, capture_output=True, text=True)
    assert (done.returncode, done.stdout, done.stderr) == (2, "", f"error: {TIMM_ONLY}\n")
    listed = subprocess.run([*runner, "models"], env=env, capture_output=True, text=True)
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert lines[0].startswith("80 models (") and sum(line.startswith("│") for line in lines) == 80
    assert "timm/" not in "".join(lines[1:-1])
    assert lines[-1] == ("timm's models (model.name: timm/<name>) are listed once timm is installed: pip install "
                         "'timm>=1.0' (a dependency of runner).")
