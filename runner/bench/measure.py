"""One benchmark measurement in a fresh process: `python -m runner.bench.measure SPEC.json OUT.json`.

Each variant runs in its own process (as a hand-written benchmark script would) so DataLoader forks, DALI
threads and GPU memory of one variant never affect the next. Clocks are read after a device
synchronisation; warm-up steps (cuDNN autotuning, torch.compile, filling prefetch queues) are
excluded; the measured stretch is long enough to drain the prefetch queues several times over.
"""
from __future__ import annotations

import json
import sys
import threading
import time
from dataclasses import fields
from itertools import chain, repeat
from pathlib import Path
from typing import Any

import torch

from runner.augment.mix import Mixer
from runner.bench.stats import PART_WAIT_KEY
from runner.bench.variants import variants
from runner.dist import Dist, setup
from runner.errors import RunnerError
from runner.loaders.config import LoaderConfig
from runner.loaders.loader import create_loader
from runner.loaders.slots import MicroBatch, global_batch
from runner.models.device import build_model
from runner.run.processes import configure_torch, torch_threads
from runner.run.record import run_params
from runner.run.validate import validate
from runner.tracking import MlflowTracker, resolve_tracking_uri
from runner.tracking.base import NullTracker
from runner.train.loop import train
from runner.train.step import build_step, train_step, training_stream
from runner.train.telemetry import PART_WAIT, STREAM_WAIT, GpuSampler, LaunchThreadsWindow


def sync_device(d: Dist) -> None:
    if d.device.type == "cuda":
        torch.cuda.synchronize(d.device)


def _batches(loader):
    """Endless batches over epochs."""
    return chain.from_iterable(loader.epoch() for _ in repeat(None))


def loader_only(cfg: LoaderConfig, d: Dist, warmup: int, steps: int) -> dict[str, Any]:
    """The train loader alone, read as fast as it yields (no model): its images per second."""
    loader = create_loader(cfg, "train", d, feeds_model=False)
    batches = _batches(loader)
    for _ in range(warmup):
        images, _ = next(batches)
    sync_device(d)
    with GpuSampler([d.local_rank]) if d.device.type == "cuda" else _Nothing() as gpu:
        t = time.perf_counter()
        for _ in range(steps):
            images, _ = next(batches)
        sync_device(d)
        dt = time.perf_counter() - t
    util = gpu.summary() if gpu else None
    batch = images.shape[0]
    return {"images_per_s": steps * batch / dt, "gpu_util_pct": util.util_pct if util else None,
            "seconds": dt, "steps": steps, "batch": batch, "shape": list(images.shape), "dtype": str(images.dtype)}


class _Nothing:
    def __enter__(self):
        return None

    def __exit__(self, *a):
        return None


class CaptureTracker:
    """Keeps the interval metrics the training loop logs; forwards them to a real tracker too."""

    def __init__(self, inner=None):
        self.inner, self.windows = inner if inner is not None else NullTracker(), []

    def log_metrics(self, metrics, step):
        if "loader/images_per_s" in metrics:
            self.windows.append((step, dict(metrics)))
        self.inner.log_metrics(metrics, step)

    def __getattr__(self, name):
        return getattr(self.inner, name)


def end_to_end(v, d: Dist, warmup: int, steps: int, tracker) -> dict[str, Any]:
    """Training through runner's own loop (telemetry, tracking, progress on), warm-up windows dropped."""
    capture = CaptureTracker(tracker)
    result = train(v, d, capture, run_id=f"bench-{int(time.time())}")
    kept = [m for step, m in capture.windows if step > warmup]
    if not kept:
        raise RuntimeError("no measured window: steps must exceed the warm-up")
    batch = v.config.data.batch_size * d.world
    # equal images per window: the rate over all of them is the harmonic mean of the window rates
    ips = len(kept) / sum(1 / m["loader/images_per_s"] for m in kept)
    utils = [m["gpu/util_pct"] for m in kept if "gpu/util_pct" in m]
    cpu = [m["cpu/system_pct"] for m in kept if "cpu/system_pct" in m]  # all cores: is the host out of CPU?
    # a hybrid's wait per pipeline (its base, then what its copy adds): which one is late
    part_keys = dict.fromkeys(k for m in kept for k in m if k.startswith(PART_WAIT))  # in the order they are read
    parts = {k.replace(PART_WAIT, PART_WAIT_KEY, 1): _mean([m[k] for m in kept if k in m]) for k in part_keys}
    # the threads that launch the step's CUDA work: busy near 100% or queued, and the GPU waits for them
    launch = {f.name: _mean([m[f"cpu/{f.name}"] for m in kept if f"cpu/{f.name}" in m])
              for f in fields(LaunchThreadsWindow)}
    return {"images_per_s": ips, "data_wait_share": sum(m["loader/data_wait_share"] for m in kept) / len(kept),
            "stream_wait_share": _mean([m[STREAM_WAIT] for m in kept if STREAM_WAIT in m]), **parts,
            "gpu_util_pct": _mean(utils), "cpu_busy_pct": _mean(cpu), "windows": len(kept), **launch,
            "steps": result.steps - warmup, "batch": batch, "final_loss": kept[-1]["train/loss"]}


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


class BareStep:
    """train()'s own step (runner.train.step.train_step: forward, backward, clipping, loss scaling, optimizer,
    schedule) on the same loader and model, in the plainest loop: what runner's loop around it is compared with.
    Calling it runs one training step; `wait` accumulates the seconds spent in `next()`."""

    def __init__(self, v, d: Dist):
        configure_torch(v.config, d)
        model = build_model(v.config, d)
        loader = create_loader(v.loaders, "train", d)
        cfg = v.config
        mixer = Mixer.create(cfg.pipelines.train.mix, num_classes=cfg.model.num_classes,
                             label_smoothing=cfg.trainer.label_smoothing, seed=cfg.seed)
        self.step = build_step(model, d, optimizer=cfg.optimizer, scheduler=cfg.scheduler, trainer=cfg.trainer,
                               global_batch=global_batch(cfg, d.world), steps_per_epoch=loader.steps_per_epoch,
                               mixer=mixer)
        self.train_step = train_step
        self.batches = _batches(loader)
        self.d, self.wait, self.steps = d, 0.0, 0

    def warm_up(self, steps: int) -> None:
        """Run `steps` unmeasured steps, let the device finish them, and forget their data wait."""
        for _ in range(steps):
            self()
        sync_device(self.d)
        self.wait = 0.0

    def __call__(self) -> torch.Tensor:
        t0 = time.perf_counter()
        images, labels = next(self.batches)
        self.wait += time.perf_counter() - t0
        out = self.train_step(self.step, [MicroBatch(self.d.rank, images, labels)], step=self.steps)
        self.steps += 1
        return out[0].loss


def bare_loop(v, d: Dist, warmup: int, steps: int) -> dict[str, Any]:
    with training_stream(v.config.trainer, d.device):  # the stream train() runs on
        step = BareStep(v, d)
        step.warm_up(warmup)
        t = time.perf_counter()
        for _ in range(steps):
            loss = step()
        sync_device(d)
        dt = time.perf_counter() - t
    return {"images_per_s": steps * v.config.data.batch_size / dt, "data_wait_share": step.wait / dt,
            "seconds": dt, "steps": steps, "final_loss": loss.item()}


def beside_the_loader(v, v_synthetic, d: Dist, warmup: int, steps: int) -> dict[str, Any]:
    """The ceiling's model trains on random tensors while the experiment's training loader runs beside it on
    another thread, kept at most data.prefetch batches ahead of the model and its batches dropped: what the
    loader's CPU and GPU work costs training when nothing waits for it. Set against the ceiling (no loader) and
    end to end (the model waits for the loader's batches), it splits the loss between the two."""
    ahead, drawn, failed = max(1, v.config.data.prefetch), [0], []
    turn, stop = threading.Condition(), threading.Event()
    with training_stream(v.config.trainer, d.device):  # the stream train() runs on
        step = BareStep(v_synthetic, d)
        stream = torch.cuda.current_stream(d.device) if d.device.type == "cuda" else None

        def draw() -> None:  # the loader's batches as the training thread would take them, on its stream
            try:
                with torch.cuda.stream(stream) if stream is not None else _Nothing():
                    batches = _batches(create_loader(v.loaders, "train", d))
                    while not stop.is_set():
                        with turn:
                            turn.wait_for(lambda: stop.is_set() or drawn[0] < step.steps + ahead)
                        if not stop.is_set():
                            next(batches)
                            drawn[0] += 1
            except BaseException as e:  # noqa: BLE001 (reported by the training thread)
                failed.append(e)

        worker = threading.Thread(target=draw, name="runner-beside", daemon=True)
        worker.start()

        def advance() -> torch.Tensor:
            loss = step()
            with turn:
                turn.notify()
            if failed:
                raise failed[0]
            return loss

        try:
            for _ in range(warmup):
                advance()
            sync_device(d)
            with GpuSampler([d.local_rank]) if d.device.type == "cuda" else _Nothing() as gpu:
                first, t = drawn[0], time.perf_counter()
                for _ in range(steps):
                    loss = advance()
                sync_device(d)
                dt, last = time.perf_counter() - t, drawn[0]
        finally:
            stop.set()
            with turn:
                turn.notify()
            worker.join(timeout=60)
    util = gpu.summary() if gpu else None
    batch = v.config.data.batch_size
    return {"images_per_s": steps * batch / dt, "gpu_util_pct": util.util_pct if util else None,
            "loader_images_per_s": (last - first) * batch / dt, "seconds": dt, "steps": steps,
            "final_loss": loss.item()}


def run(spec: dict[str, Any]) -> dict[str, Any]:
    mode, warmup, steps = spec["mode"], spec["warmup"], spec["steps"]
    overrides = list(spec["overrides"])
    if mode in ("e2e", "bare", "beside"):  # one schedule: the bare loop's only difference is runner's loop
        overrides += [f"trainer.max_steps={warmup + steps}", f"trainer.log_every_n_steps={spec['window']}",
                      "trainer.epochs=100000", "trainer.eval_every_n_epochs=0", "trainer.checkpoint_every_n_epochs=0",
                      "trainer.checkpoint_best=null",
                      f"trainer.checkpoint_dir={spec['scratch']}"]
    v = validate(spec["experiment"], overrides)
    d = setup(v.target.accelerator)

    torch_threads(d)
    if mode == "loader":
        return loader_only(v.loaders, d, warmup, steps)
    if mode == "bare":
        return bare_loop(v, d, warmup, steps)
    if mode == "beside":
        v_synthetic = validate(spec["experiment"], [*overrides, *variants(v.loaded, ["synthetic"])[0].overrides])
        return beside_the_loader(v, v_synthetic, d, warmup, steps)
    tracker = None
    if spec.get("parent_run_id") and v.config.tracking.enabled:
        tracker = MlflowTracker(resolve_tracking_uri(v.config.tracking.uri), v.config.tracking.experiment,
                                run_name=spec["name"], tags={"mlflow.parentRunId": spec["parent_run_id"],
                                                             "runner.bench.variant": spec["name"],
                                                             "runner.bench.round": str(spec.get("round", 1))})
        tracker.start(run_params(v, d.world))
    try:
        out = end_to_end(v, d, warmup, steps, tracker)
    except BaseException:
        if tracker:
            tracker.finish("FAILED")
        raise
    if tracker:
        tracker.log_metrics({f"bench/{k}": float(val) for k, val in out.items() if isinstance(val, (int, float))}, 0)
        tracker.finish("FINISHED")
        out["run_id"] = tracker.run_id
    return out


def main(argv: list[str]) -> int:
    spec = json.loads(Path(argv[0]).read_text())
    try:
        result = run(spec)
    except RunnerError as e:  # the parent reports it: one paragraph, no traceback
        Path(argv[1]).write_text(json.dumps({"error": str(e)}))
        return 2
    Path(argv[1]).write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
