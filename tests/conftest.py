"""Shared fixtures: small real JPEG datasets, a project layout in a temp dir, the CLI in-process, a real
MLflow server that can be killed and restarted."""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
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


@pytest.fixture(scope="session", autouse=True)
def runner_cache(tmp_path_factory) -> Path:
    """runner's user cache (reader file lists, fetched checkpoints) in the session's temp folder, not the user's
    ~/.cache/runner; the CLI's subprocesses inherit it."""
    path = tmp_path_factory.mktemp("runner-cache")
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


def run_cli(args: list[str], capsys) -> tuple[int, str, str]:
    """The CLI in this process: (exit code, stdout, stderr)."""
    from runner.cli import main

    code = main([str(a) for a in args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


# ------------------------------------------------------------------------------------- MLflow

MLFLOW = str(Path(sys.executable).with_name("mlflow"))


@pytest.fixture(scope="session")
def template_db(tmp_path_factory) -> Path:
    """An empty, migrated MLflow database; copying it saves each store the ~2 s of migrations."""
    from mlflow import MlflowClient

    path = tmp_path_factory.mktemp("template") / "mlflow.db"
    MlflowClient(f"sqlite:///{path}").search_experiments()
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """`mlflow server` on a sqlite backend in a temp dir; `kill()` is an outage, `start()` a recovery
    (same port, same database, same artifact folder)."""

    def __init__(self, root: Path, template_db: Path):
        self.root, self.port = root, free_port()
        self.db = root / "mlflow.db"
        shutil.copy(template_db, self.db)
        self.uri = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float = 60.0) -> None:
        cmd = [MLFLOW, "server", "--backend-store-uri", f"sqlite:///{self.db}", "--host", "127.0.0.1",
               "--port", str(self.port), "--workers", "1", "--serve-artifacts",
               "--artifacts-destination", str(self.root / "artifacts")]
        env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}  # no job workers: starts 2x faster
        with open(self.root / "server.log", "ab") as log:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=self.root,
                                         start_new_session=True)
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                raise RuntimeError(f"mlflow server exited: {(self.root / 'server.log').read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(f"{self.uri}/health", timeout=1) as r:
                    if r.status == 200:
                        return
            except OSError:
                time.sleep(0.2)
        raise RuntimeError("mlflow server did not answer /health in time")

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)  # the uvicorn worker is in the group too
            self.proc.wait()


@pytest.fixture
def server(tmp_path, template_db):
    (tmp_path / "server").mkdir()
    s = Server(tmp_path / "server", template_db)
    yield s
    s.kill()
