"""Determinism on the CPU: the same YAML gives bit-identical batches and loss curves, run twice, from a
second copy of the working tree (its own working directory and store), with one process and with two
(gloo DDP). Loss values are compared as floats with ==, not approximately."""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from mlflow import MlflowClient

from tests.conftest import REPO, run_cli

pytestmark = pytest.mark.slow

EXPERIMENT = """\
name: det
seed: 5
model: {{name: resnet18, num_classes: 3}}
optimizer: {{lr: 0.02}}
trainer: {{epochs: 2, log_every_n_steps: 1, deterministic: true}}
data: {{root: {root}, batch_size: 4}}
pipelines:
  train: {{use: imagenet_train, params: {{size: 32}}}}
  eval: {{use: imagenet_eval, params: {{size: 32, resize_shorter: 36}}}}
tracking: {{experiment: det}}
"""
# without git: what a fresh checkout lacks (virtualenv, git metadata, datasets, stores, checkpoints)
NOT_IN_A_CHECKOUT = {".venv", ".git", "data", "mlruns", "mlartifacts", "mlflow.db", "checkpoints", "runs",
                     "bench-out", "compare-out", "reproduced", "mlflow-offline", ".pytest_cache"}


def copy_working_tree(dest: Path) -> None:
    """Tracked and untracked-but-not-ignored files: a clone with this working tree's uncommitted work."""
    try:
        listed = subprocess.run(["git", "-C", str(REPO), "ls-files", "-z", "--cached", "--others",
                                 "--exclude-standard"], capture_output=True, check=True).stdout.split(b"\0")
    except (OSError, subprocess.CalledProcessError):
        shutil.copytree(REPO, dest, ignore=lambda src, names: {
            n for n in names if n == "__pycache__" or (Path(src) == REPO and n in NOT_IN_A_CHECKOUT)})
        return
    for name in filter(None, map(os.fsdecode, listed)):
        if (REPO / name).is_file():  # tracked files deleted in the working tree are listed too
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, dest / name)


@pytest.fixture(scope="module")
def checkout(module_tmp, image_dataset) -> Path:
    """A second copy of the working tree, with the experiment; its own working directory and store."""
    root = module_tmp / "runner"
    copy_working_tree(root)
    (root / "experiments" / "det.yaml").write_text(EXPERIMENT.format(root=image_dataset))
    return root


@pytest.fixture
def origin(project, image_dataset) -> Path:
    (project / "experiments" / "det.yaml").write_text(EXPERIMENT.format(root=image_dataset))
    return project


def launch_in(cwd: Path, *overrides: str) -> None:
    """`python -m runner launch` in `cwd`; a copy of the tree there is what `runner` is imported from."""
    env = {**os.environ, "PYTHONPATH": str(cwd)}
    env.pop("MLFLOW_TRACKING_URI", None)
    if (cwd / "runner").is_dir():  # `-m` puts the working directory first on sys.path, before the editable install
        which = subprocess.run([sys.executable, "-c", "import runner; print(runner.__file__)"], cwd=cwd, env=env,
                               capture_output=True, text=True, check=True).stdout.strip()
        assert Path(which).resolve().is_relative_to(cwd.resolve()), which
    run = subprocess.run([sys.executable, "-m", "runner", "launch", "experiments/det.yaml", *overrides], cwd=cwd,
                         env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]


def histories(cwd: Path, experiment: str, *keys: str) -> dict[str, list[tuple[int, float]]]:
    client = MlflowClient(f"sqlite:///{cwd}/mlflow.db")
    exp = client.get_experiment_by_name(experiment)
    (run,) = client.search_runs([exp.experiment_id])
    return {k: sorted((m.step, m.value) for m in client.get_metric_history(run.info.run_id, k)) for k in keys}


def assert_identical(a: dict, b: dict) -> None:
    for key in a:
        assert [s for s, _ in a[key]] == [s for s, _ in b[key]], key
        diff = [(s, x.hex(), y.hex()) for (s, x), (_, y) in zip(a[key], b[key]) if x != y]
        assert not diff, f"{key} differs at (step, here, there): {diff[:3]}"


def test_one_process_same_curves_from_a_second_checkout(origin, checkout, capsys):
    import torch

    try:
        code, _, err = run_cli(["launch", "experiments/det.yaml"], capsys)
    finally:
        torch.use_deterministic_algorithms(False)  # train.configure_torch sets it for the whole process
    assert code == 0, err
    launch_in(checkout)
    here, there = (histories(d, "det", "train/loss", "train/top1", "eval/loss") for d in (origin, checkout))
    assert len(here["train/loss"]) == 12  # 24 images, batch 4, 2 epochs, logged every step
    assert_identical(here, there)


def test_two_processes_same_curves_from_a_second_checkout(origin, checkout):
    launch_in(origin, "trainer.devices=2", "tracking.experiment=det-ddp")
    launch_in(checkout, "trainer.devices=2", "tracking.experiment=det-ddp")
    here, there = (histories(d, "det-ddp", "train/loss", "train/top1", "eval/loss") for d in (origin, checkout))
    assert len(here["train/loss"]) == 6  # 12 images per rank, batch 4, 2 epochs
    assert_identical(here, there)


def batch_digest(overrides: list[str], **validate_args) -> str:
    """sha256 of two epochs of experiments/det.yaml's training batches (images and labels) under `overrides`."""
    from runner.dist import Dist
    from runner.loaders.loader import create_loader
    from runner.run.validate import validate

    loader = create_loader(validate("experiments/det.yaml", overrides, **validate_args), "train", Dist())
    h = hashlib.sha256()
    for _ in range(2):
        for images, labels in loader.epoch():
            h.update(images.numpy().tobytes())
            h.update(labels.numpy().tobytes())
    loader.close()
    return h.hexdigest()


def test_dali_batches_do_not_depend_on_threads_or_prefetch(origin):
    """The DALI CPU pipeline's batches (images and labels, two epochs) are the same bytes whatever the thread
    count and queue depth; only the seed changes them."""
    def digest(*overrides: str) -> str:
        return batch_digest(list(overrides))

    base = digest("data.num_threads=1")
    assert digest("data.num_threads=3", "data.prefetch=1") == base
    assert digest("data.num_threads=2", "data.prefetch=3") == base
    assert digest("data.num_threads=1", "seed=6") != base


def test_torchvision_batches_do_not_depend_on_workers(origin):
    """The torchvision loader's batches (two epochs) are the same bytes with 0, 1 or 2 workers: each sample's
    transforms are seeded from the sample, not from the worker; the training process's RNG is left alone."""
    import torch

    tv = ["data.loader=torchvision", 'data.torchvision.train=["RandomResizedCrop(32)", "RandomHorizontalFlip()", '
                                     '"ColorJitter(0.4, 0.4, 0.4)", "ToTensor()"]']

    def digest(*overrides: str) -> str:
        return batch_digest([*tv, *overrides], accelerator="cpu")

    untouched = torch.rand(3, generator=torch.Generator().manual_seed(0))
    torch.manual_seed(0)
    base = digest("data.torchvision.num_workers=0")  # transforms run in this process
    assert torch.equal(torch.rand(3), untouched)
    assert digest("data.torchvision.num_workers=1") == base
    assert digest("data.torchvision.num_workers=2", "data.torchvision.persistent_workers=false") == base
    assert digest("data.torchvision.num_workers=0", "seed=6") != base
