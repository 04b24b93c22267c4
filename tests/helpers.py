"""What the test modules of both tiers share: the repository, small image folders and experiments, the CLI in
this process or in one of its own, a real MLflow server that can be killed and restarted, and store readers."""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import time
import urllib.request
from pathlib import Path

import numpy as np
import torch
from mlflow import MlflowClient
from PIL import Image

REPO = Path(__file__).resolve().parents[1]


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


def run_cli(args: list[str], capsys) -> tuple[int, str, str]:
    """The CLI in this process: (exit code, stdout, stderr)."""
    from runner.cli import main

    code = main([str(a) for a in args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def write(project, text, name="exp.yaml"):
    path = project / "experiments" / name
    path.write_text(textwrap.dedent(text))
    return path


def free_port() -> int:
    """A port nothing listens on, never handed to another test of the session: each pytest-xdist worker takes its
    ports in turn from a range of its own, below the kernel's ephemeral ports. (A port from the kernel can be handed
    out again as soon as it is free: a server one test stops could be replaced by another test's, on another worker,
    while the first test's clients still talk to that port.)"""
    return next(_PortRange.of_this_worker())


class _PortRange:
    _mine: _PortRange | None = None

    @classmethod
    def of_this_worker(cls) -> _PortRange:
        if cls._mine is None:
            worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
            cls._mine = cls(20000 + 500 * (int(worker) if worker.isdigit() else 0))
        return cls._mine

    def __init__(self, start: int):
        self.next, self.end = start, start + 500

    def __next__(self) -> int:
        while self.next < self.end:
            port, self.next = self.next, self.next + 1
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", port))
                except OSError:
                    continue
                return port
        raise RuntimeError(f"no free port left below {self.end}")


MLFLOW = str(Path(sys.executable).with_name("mlflow"))


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


TINY = """\
name: tiny
seed: 3
model: {{name: resnet18, num_classes: 3}}
optimizer: {{lr: 0.02}}
scheduler: {{name: cosine}}
trainer: {{epochs: 2, log_every_n_steps: 2}}
data: {{root: {root}, batch_size: 4}}
pipelines:
  train: {{use: imagenet_train, params: {{size: 32}}}}
  eval: {{use: imagenet_eval, params: {{size: 32, resize_shorter: 36}}}}
tracking: {{experiment: tiny}}
"""


TINY_DETERMINISTIC = """\
name: tiny
seed: 3
model: {{name: resnet18, num_classes: 3}}
optimizer: {{lr: 0.02}}
trainer: {{epochs: 1, log_every_n_steps: 1, deterministic: true}}
data: {{root: {root}, batch_size: 4}}
pipelines:
  train: {{use: imagenet_train, params: {{size: 32}}}}
  eval: {{use: imagenet_eval, params: {{size: 32, resize_shorter: 36}}}}
tracking: {{experiment: tiny}}
"""


def shared_tmp(tmp_path_factory) -> Path:
    """The session's temp folder that every pytest-xdist worker sees (a worker's own basetemp is a child of it)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if base.name.startswith("popen-gw") else base


def runs_tagged(uri: str, tag: str, value: str) -> list:
    client = MlflowClient(uri)
    ids = [e.experiment_id for e in client.search_experiments()]
    return list(client.search_runs(ids, f"tags.`{tag}` = '{value}'"))


def runner_env() -> dict[str, str]:
    """The environment of a `python -m runner` a test starts: this checkout's runner, output unbuffered (its
    children's too), and the store of its working directory unless its arguments name another."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1"}
    env.pop("MLFLOW_TRACKING_URI", None)
    return env


def launched(workdir, *args: str) -> str:
    """`runner launch ARGS` in a process of its own (MLflow keeps a store per process), its output."""
    done = subprocess.run([sys.executable, "-m", "runner", "launch", *args], cwd=workdir, env=runner_env(), text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:]
    return done.stdout


def runner_process(workdir, *args, **popen) -> subprocess.Popen:
    """`python -m runner ARGS` started in `workdir`, its stdout and stderr one text pipe; `popen` goes to Popen
    (start_new_session=True, ...)."""
    return subprocess.Popen([sys.executable, "-m", "runner", *map(str, args)], cwd=workdir, env=runner_env(),
                            text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, **popen)


def output_of(proc: subprocess.Popen, code: int = 0) -> str:
    """All a runner_process printed, once it has exited with `code`."""
    out = proc.stdout.read()
    assert proc.wait(timeout=600) == code, out[-3000:]
    return out


def wait_for_text(path: Path, text: str, timeout: float = 300) -> None:
    """Wait until the file at `path` holds `text` (a log another process writes)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if path.exists() and text in path.read_text(errors="replace"):
            return
        time.sleep(0.3)
    raise AssertionError(f"{text!r} never appeared in {path}:\n" + (path.read_text()[-3000:] if path.exists() else ""))


# a pipeline whose "images" are the file paths, so tests can see which samples each rank read
PATHS = """\
data: {{root: {root}, batch_size: {batch}}}
pipelines:
  train:
    steps:
      - jpegs, labels = readers.file(file_root=$data_root, shuffle_after_epoch=True)
      - paths = get_property(jpegs, key="source_info")
    outputs: [paths, labels]
    params: {{data_root: null}}
  eval:
    steps:
      - jpegs, labels = readers.file(file_root=$data_root)
      - paths = get_property(jpegs, key="source_info")
    outputs: [paths, labels]
    params: {{data_root: null}}
"""


def names(batch: torch.Tensor) -> list[str]:
    return [bytes(row.tolist()).decode().rstrip("\0") for row in batch.to(torch.uint8)]


# the same images, normalized, laid out as the pipeline's params say
LAYOUTS = """\
data: {{root: {root}, batch_size: 4}}
pipelines:
  train:
    steps:
      - jpegs, labels = readers.file(file_root=$data_root)
      - images = decoders.image(jpegs, output_type=RGB)
      - images = resize(images, resize_x=32, resize_y=24)
      - images = crop_mirror_normalize(images, dtype=$dtype, output_layout=$layout, mean=[120.0, 110.0, 100.0],
          std=[60.0, 50.0, 40.0])
    outputs: [images, labels]
    params: {{data_root: null, dtype: FLOAT, layout: CHW}}
"""


PLAIN, RANDAUG = "imagenet_train", "imagenet_train_randaugment"  # two train pipelines a sweep crosses
