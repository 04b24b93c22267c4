"""Fixtures both tiers share: small real JPEG datasets, a project layout in a temp dir, runner's cache and an
MLflow database to copy, per session."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.helpers import REPO, TINY, TINY_DETERMINISTIC, shared_tmp, write_image_folder

# fixtures a topic's unit and end-to-end tests share
pytest_plugins = [
    "tests.fixtures.accumulate",
    "tests.fixtures.compare",
    "tests.fixtures.data_cache",
    "tests.fixtures.deploy_files",
    "tests.fixtures.determinism",
    "tests.fixtures.dsl_compile",
    "tests.fixtures.epoch_plan",
    "tests.fixtures.finished",
    "tests.fixtures.labels",
    "tests.fixtures.preview",
    "tests.fixtures.shards",
    "tests.fixtures.ui",
]

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
# pytest-xdist's workers inherit COLUMNS=80 from their terminal; runner (rich) then draws tables 80 columns wide,
# unlike the single process, whose output these tests read as a pipe's (150 columns)
for _name in ("COLUMNS", "LINES"):
    os.environ.pop(_name, None)


@pytest.fixture(scope="session")
def image_dataset(tmp_path_factory) -> Path:
    """data/train and data/val, 3 classes, a few dozen small JPEGs."""
    root = tmp_path_factory.mktemp("images")
    write_image_folder(root / "train", classes=3, per_class=8, seed=1)
    write_image_folder(root / "val", classes=3, per_class=3, seed=2)
    return root


@pytest.fixture(scope="session", autouse=True)
def runner_cache(tmp_path_factory) -> Path:
    """runner's user cache (reader file lists, kept facts, fetched checkpoints) in the session's temp folder, not
    the user's ~/.cache/runner; one for all pytest-xdist workers, as one machine's runs share one (its files are
    written whole, under names of their content); the CLI's subprocesses inherit it."""
    path = shared_tmp(tmp_path_factory) / "runner-cache"
    path.mkdir(exist_ok=True)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RUNNER_CACHE", str(path))
        yield path


@pytest.fixture(scope="module")
def module_tmp(tmp_path_factory, request) -> Path:
    """A folder shared by one test module's tests, removed when they are done: trained runs keep checkpoints of
    ~90 MB, and the suite's runs would otherwise fill gigabytes of disk before the session ends."""
    path = tmp_path_factory.mktemp(request.module.__name__.rpartition(".")[2].removeprefix("test_"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def project(tmp_path, monkeypatch) -> Path:
    """A working directory with the shipped pipelines/ and an experiments/ folder; cwd is set to it."""
    shutil.copytree(REPO / "pipelines", tmp_path / "pipelines")
    (tmp_path / "experiments").mkdir()
    monkeypatch.chdir(tmp_path)
    return tmp_path


# ------------------------------------------------------------------------------------- MLflow


@pytest.fixture(scope="session")
def template_db(tmp_path_factory) -> Path:
    """An empty, migrated MLflow database; copying it saves each store the ~2 s of migrations."""
    from mlflow import MlflowClient

    path = tmp_path_factory.mktemp("template") / "mlflow.db"
    MlflowClient(f"sqlite:///{path}").search_experiments()
    return path


@pytest.fixture
def tiny(project, image_dataset) -> Path:
    """experiments/tiny.yaml in the project: helpers.TINY (2 epochs) on the session's images."""
    path = project / "experiments" / "tiny.yaml"
    path.write_text(TINY.format(root=image_dataset))
    return path


@pytest.fixture
def tiny_epoch(project, image_dataset) -> Path:
    """experiments/tiny.yaml in the project: helpers.TINY_DETERMINISTIC (1 epoch) without determinism."""
    path = project / "experiments" / "tiny.yaml"
    path.write_text(TINY_DETERMINISTIC.format(root=image_dataset).replace("deterministic: true", "deterministic: false"))
    return path


# The test files that take longest (`--durations` on a 2-core machine), started first: each file runs on one
# pytest-xdist worker (--dist loadfile), and a long file started last keeps the session going while the other
# workers have nothing left to do.
LONGEST_FIRST = ("test_bench.py", "test_faults.py", "test_sweep_slurm.py", "test_tracking_server.py", "test_recipes.py",
                 "test_accumulate.py", "test_tracking_outage_launch.py", "test_sweep.py", "test_determinism.py",
                 "test_ema.py", "test_epoch_plan.py", "test_repro.py", "test_weights.py", "test_sweep_local.py",
                 "test_evaluate.py", "test_multinode.py", "test_tracking.py", "test_launch.py", "test_budgets.py")


def pytest_collection_modifyitems(session, config, items) -> None:
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    last = len(rank)
    # stable: each file's tests keep their order; the unit tier fills in behind the end-to-end files
    items.sort(key=lambda item: rank.get(item.path.name, last) if "e2e" in item.path.parts else last + 1)
