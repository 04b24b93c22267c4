"""Shared fixtures: small real JPEG datasets, a project layout in a temp dir, the CLI in-process."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

REPO = Path(__file__).resolve().parents[1]

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")


def write_image_folder(root: Path, classes: int = 3, per_class: int = 6, seed: int = 0,
                       size: tuple[int, int] = (40, 56)) -> Path:
    """ROOT/c{k}/{i}.jpg with random content: a tiny ImageFolder for pipeline tests."""
    rng = np.random.default_rng(seed)
    for c in range(classes):
        d = root / f"c{c}"
        d.mkdir(parents=True, exist_ok=True)
        for i in range(per_class):
            h, w = size[0] + int(rng.integers(0, 16)), size[1] + int(rng.integers(0, 16))
            pixels = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
            Image.fromarray(pixels).save(d / f"{i:03d}.jpg", quality=90)
    return root


@pytest.fixture(scope="session")
def image_dataset(tmp_path_factory) -> Path:
    """data/train and data/val, 3 classes, a few dozen small JPEGs."""
    root = tmp_path_factory.mktemp("images")
    write_image_folder(root / "train", classes=3, per_class=8, seed=1)
    write_image_folder(root / "val", classes=3, per_class=3, seed=2)
    return root


@pytest.fixture
def project(tmp_path, monkeypatch) -> Path:
    """A working directory with the shipped pipelines/ and an experiments/ folder; cwd is set to it."""
    shutil.copytree(REPO / "pipelines", tmp_path / "pipelines")
    (tmp_path / "experiments").mkdir()
    monkeypatch.chdir(tmp_path)
    return tmp_path


def run_cli(args: list[str], capsys) -> tuple[int, str, str]:
    """The CLI in this process: (exit code, stdout, stderr)."""
    from runner.cli import main

    code = main([str(a) for a in args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err
