"""Determinism on the CPU: the same YAML gives bit-identical batches and loss curves, run twice, from a
second copy of the working tree (its own working directory and store), with one process and with two
(gloo DDP). Loss values are compared as floats with ==, not approximately."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from mlflow import MlflowClient

from tests.fixtures.determinism import EXPERIMENT
from tests.helpers import REPO, run_cli

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
