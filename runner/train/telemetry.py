"""What a run measures about itself: loader throughput and data wait (the host's, and the training stream's),
CPU and GPU load, and how busy the threads that launch the GPU's work are.

Nothing here synchronises CUDA: the loader meter takes host timestamps from the loop, the stream's wait comes
from CUDA events read once they have completed, and GPU utilisation and memory come from NVML in a background
thread. Without NVML (a CPU machine, a container without the driver) the GPU parts return None or {} instead of
failing.
"""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path
from types import TracebackType
from typing import Any

import psutil
import torch

from runner.machine import GIB, load_nvml, nvml_handles

log = logging.getLogger(__name__)



# ---------------------------------------------------------------------------------------- loader

PART_WAIT = "loader/data_wait_share/"  # + a hybrid pipeline's name (train, train.hybrid): its part of the wait
STREAM_WAIT = "loader/stream_wait_share"  # the training stream's stall for batches (StreamWaitMeter), on CUDA


@dataclass(frozen=True)
class LoaderWindow:
    """Throughput over a stretch of steps. data_wait_share: time blocked in next(loader) / wall time."""
    steps: int
    images: int
    seconds: float
    wait_s: float
    images_per_s: float
    data_wait_share: float

    def metrics(self, prefix: str = "loader") -> dict[str, float]:
        return {f"{prefix}/images_per_s": self.images_per_s, f"{prefix}/data_wait_share": self.data_wait_share}


class _Span:
    """Sums since a start time; `close(now)` returns them and starts the next span at `now`."""

    def __init__(self, now: float):
        self.start = now
        self.steps = self.images = 0
        self.wait_s = 0.0

    def close(self, now: float | None) -> LoaderWindow:
        end = self.start if now is None else now
        seconds = max(end - self.start, 0.0)
        w = LoaderWindow(steps=self.steps, images=self.images, seconds=seconds, wait_s=self.wait_s,
                         images_per_s=self.images / seconds if seconds > 0 else 0.0,
                         data_wait_share=self.wait_s / seconds if seconds > 0 else 0.0)
        self.start, self.steps, self.images, self.wait_s = end, 0, 0, 0.0
        return w


class LoaderMeter:
    """Images/s and data-wait share, fed by the training loop on every step.

    The loop calls `wait(seconds)` with the time it was blocked in next(loader) and
    `step(images, now)` after the step; `window()` covers the steps since the previous
    `window()`, `epoch()` the steps since the previous `epoch()` (or `start_epoch`). Times are
    host clock readings (time.perf_counter()); nothing here waits for the GPU.
    """

    def __init__(self, now: float | None = None):
        start = time.perf_counter() if now is None else now
        self._window = _Span(start)
        self._epoch = _Span(start)
        self._last: float | None = None

    def start_epoch(self, now: float) -> None:
        """Start both the window and the epoch at `now` (e.g. after evaluation, before the first batch)."""
        self._window = _Span(now)
        self._epoch = _Span(now)
        self._last = None

    def wait(self, seconds: float) -> None:
        self._window.wait_s += seconds
        self._epoch.wait_s += seconds

    def step(self, images: int, now: float) -> None:
        for span in (self._window, self._epoch):
            span.steps += 1
            span.images += images
        self._last = now

    def window(self) -> LoaderWindow:
        """The steps since the previous call, up to the last `step()`."""
        return self._window.close(self._last)

    def epoch(self) -> LoaderWindow:
        """The steps since the previous call or `start_epoch`, up to the last `step()`."""
        return self._epoch.close(self._last)


class StreamWaitMeter:
    """How long the training stream stood still for its batches (CUDA only; `enabled` is False elsewhere).

    DALI hands a batch over by making the consumer's stream wait for its own (copy_to_external, non-blocking), so
    when the loader's GPU work is late the host does not wait in next() but the stream does, and the host's data
    wait misses it. Timing events recorded on the current stream before and after next() measure what the host
    cannot: the stream's stall for the loader's GPU work, the stretch it ran dry while the host waited, and the
    batch's copies into torch tensors. Nothing here synchronises: `window()` reads the pairs whose end has
    completed (the loop has synchronised by then) and keeps the rest for the next window.
    """

    def __init__(self, enabled: bool, event_factory: Callable[[], Any] | None = None):
        self.enabled = enabled
        self._new_event = event_factory or self._cuda_event
        self._start: Any = None
        self._pairs: list[tuple[Any, Any]] = []
        self._spare: list[Any] = []   # events whose pair was read, recorded again later
        self._epoch_s = 0.0

    @staticmethod
    def _cuda_event():
        return torch.cuda.Event(enable_timing=True)

    def _event(self):
        return self._spare.pop() if self._spare else self._new_event()

    def before(self) -> None:
        """Just before next(loader)."""
        if self.enabled:
            self._start = self._event()
            self._start.record()

    def after(self) -> None:
        """Just after next(loader) returned a batch (not after it raised StopIteration)."""
        if self.enabled and self._start is not None:
            end = self._event()
            end.record()
            self._pairs.append((self._start, end))
            self._start = None

    def window(self) -> float | None:
        """Seconds the stream stood still for the batches read since the previous call; None when not enabled."""
        if not self.enabled:
            return None
        done = 0
        while done < len(self._pairs) and self._pairs[done][1].query():  # they complete in the order recorded
            done += 1
        seconds = sum(start.elapsed_time(end) for start, end in self._pairs[:done]) / 1000  # ms
        self._spare += [e for pair in self._pairs[:done] for e in pair]
        del self._pairs[:done]
        self._epoch_s += seconds
        return seconds

    def epoch(self) -> float:
        """Seconds summed over the windows since the previous call."""
        seconds, self._epoch_s = self._epoch_s, 0.0
        return seconds


# ------------------------------------------------------------------------------------------- CPU

@dataclass(frozen=True)
class CpuWindow:
    """system_pct: all cores, 0-100. process_pct: this process and its children, in % of one core."""
    system_pct: float
    process_pct: float

    def metrics(self, prefix: str = "cpu") -> dict[str, float]:
        return {f"{prefix}/system_pct": self.system_pct, f"{prefix}/process_pct": self.process_pct}


class CpuSampler:
    """CPU load since the previous `window()` (psutil's cpu_percent(interval=None): no sleeping)."""

    def __init__(self) -> None:
        self._me = psutil.Process()
        self._procs: dict[int, psutil.Process] = {}
        psutil.cpu_percent(interval=None)
        self._tree_pct()

    def _tree_pct(self) -> float:
        # Keep the Process objects: cpu_percent measures from the previous call on the same object.
        try:
            current = [self._me, *self._me.children(recursive=True)]
        except psutil.Error:
            current = [self._me]
        total, procs = 0.0, {}
        for p in current:
            p = self._procs.get(p.pid, p)
            try:
                total += p.cpu_percent(interval=None)
                procs[p.pid] = p
            except psutil.Error:
                continue  # exited between listing and reading
        self._procs = procs
        return total

    def window(self) -> CpuWindow:
        return CpuWindow(system_pct=psutil.cpu_percent(interval=None), process_pct=self._tree_pct())


# ---------------------------------------------------------------------------- threads that launch

def thread_times() -> dict[int, dict]:
    """tid -> name, seconds on a core and seconds runnable but waiting for one, for every thread of this process so
    far (Linux /proc/self/task/TID/schedstat); {} where /proc has no schedstat."""
    out = {}
    try:
        tasks = list(Path("/proc/self/task").iterdir())
    except OSError:
        return out
    for task in tasks:
        try:
            name = (task / "comm").read_text().strip()
            run_ns, wait_ns, _ = (task / "schedstat").read_text().split()
        except (OSError, ValueError):
            continue  # exited between listing and reading, or no schedstat
        out[int(task.name)] = {"name": name, "cpu_s": int(run_ns) / 1e9, "runqueue_s": int(wait_ns) / 1e9}
    return out


@dataclass(frozen=True)
class LaunchThreadsWindow:
    """The threads that launch the GPU's work: the training loop's and autograd's (pt_autograd_*, the backward pass).
    busy: % of the window on a core; queued: % runnable but waiting for one. With torch.compile's default mode
    the step is launched from Python; when these threads are busy near 100%, or queued, the GPU waits for them
    rather than for data."""
    train_thread_busy_pct: float
    train_thread_queued_pct: float
    autograd_thread_busy_pct: float
    autograd_thread_queued_pct: float

    def metrics(self, prefix: str = "cpu") -> dict[str, float]:
        return {f"{prefix}/{f.name}": getattr(self, f.name) for f in fields(self)}


class LaunchThreadsSampler:
    """LaunchThreadsWindow since the previous `window()`. Create it on the training thread."""

    def __init__(self) -> None:
        self._train = threading.get_native_id()
        self._last, self._t = self._read(), time.perf_counter()

    def _read(self) -> dict[str, float] | None:
        """Seconds so far, under LaunchThreadsWindow's field names."""
        threads = thread_times()
        if self._train not in threads:
            return None
        autograd = [t for t in threads.values() if t["name"].startswith("pt_autograd")]
        return {"train_thread_busy_pct": threads[self._train]["cpu_s"],
                "train_thread_queued_pct": threads[self._train]["runqueue_s"],
                "autograd_thread_busy_pct": sum(t["cpu_s"] for t in autograd),
                "autograd_thread_queued_pct": sum(t["runqueue_s"] for t in autograd)}

    def window(self) -> LaunchThreadsWindow | None:
        now, t = self._read(), time.perf_counter()
        last, seconds = self._last, t - self._t
        self._last, self._t = now, t
        if now is None or last is None or seconds <= 0:
            return None
        return LaunchThreadsWindow(**{k: 100 * max(0.0, now[k] - last[k]) / seconds for k in now})


# ------------------------------------------------------------------------------------------- GPU


@dataclass(frozen=True)
class GpuStat:
    index: int
    util_pct: float
    mem_gib: float
    peak_mem_gib: float


@dataclass(frozen=True)
class GpuWindow:
    """Means over the samples of a window, per device and averaged over devices (peak: the max)."""
    devices: tuple[GpuStat, ...]
    util_pct: float
    mem_gib: float
    peak_mem_gib: float
    samples: int

    def metrics(self, prefix: str = "gpu") -> dict[str, float]:
        m = {f"{prefix}/util_pct": self.util_pct, f"{prefix}/mem_gib": self.mem_gib,
             f"{prefix}/peak_mem_gib": self.peak_mem_gib}
        if len(self.devices) > 1:
            for d in self.devices:
                m[f"{prefix}{d.index}/util_pct"] = d.util_pct
                m[f"{prefix}{d.index}/mem_gib"] = d.mem_gib
        return m


class _Sums:
    def __init__(self, n: int):
        self.util = [0.0] * n
        self.mem = [0.0] * n
        self.peak = [0.0] * n
        self.samples = 0

    def add(self, readings: list[tuple[float, float]]) -> None:
        for i, (util, mem) in enumerate(readings):
            self.util[i] += util
            self.mem[i] += mem
            self.peak[i] = max(self.peak[i], mem)
        self.samples += 1

    def result(self, indices: list[int]) -> GpuWindow:
        n = max(self.samples, 1)
        devs = tuple(GpuStat(index=idx, util_pct=self.util[i] / n, mem_gib=self.mem[i] / n,
                             peak_mem_gib=self.peak[i]) for i, idx in enumerate(indices))
        k = max(len(devs), 1)
        return GpuWindow(devices=devs, util_pct=sum(d.util_pct for d in devs) / k,
                         mem_gib=sum(d.mem_gib for d in devs) / k,
                         peak_mem_gib=max((d.peak_mem_gib for d in devs), default=0.0), samples=self.samples)


class GpuSampler:
    """Samples NVML utilization.gpu and memory used every `period_s` in a daemon thread.

    `indices` are CUDA device indices (as torch numbers them under CUDA_VISIBLE_DEVICES).
    `window()` averages the samples since the previous call; `summary()` the whole run. Both
    return None when NVML is unavailable, so callers log GPU metrics only where there are any.
    """

    def __init__(self, indices: list[int], period_s: float = 0.1):
        self.indices = list(indices)
        self.period_s = period_s
        self._nvml: Any | None = None
        self._handles: list[tuple[int, Any]] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._window = self._total = _Sums(0)

    def start(self) -> GpuSampler:
        if self._thread is not None:
            return self
        self._nvml = load_nvml()
        if self._nvml is not None:
            self._handles = nvml_handles(self._nvml, self.indices)
            self._window, self._total = _Sums(len(self._handles)), _Sums(len(self._handles))
            self._thread = threading.Thread(target=self._run, name="gpu-sampler", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=max(1.0, 5 * self.period_s))
        if self._nvml is not None:
            try:
                self._nvml.nvmlShutdown()
            except Exception as e:
                log.debug("nvmlShutdown: %s", e)

    def __enter__(self) -> GpuSampler:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    def _read(self) -> list[tuple[float, float]] | None:
        nvml = self._nvml
        try:
            return [(float(nvml.nvmlDeviceGetUtilizationRates(h).gpu),
                     nvml.nvmlDeviceGetMemoryInfo(h).used / GIB) for _, h in self._handles]
        except nvml.NVMLError as e:  # a device fell off the bus, driver reset: skip this sample
            log.debug("NVML read failed: %s", e)
            return None

    def _sample(self) -> None:
        readings = self._read()
        if readings is not None:
            with self._lock:
                self._window.add(readings)
                self._total.add(readings)

    def _run(self) -> None:
        while not self._stop.is_set():
            self._sample()
            self._stop.wait(self.period_s)

    def _available(self) -> bool:
        return self._nvml is not None and bool(self._handles)

    def window(self) -> GpuWindow | None:
        """Means since the previous call (then resets); None without NVML."""
        if not self._available():
            return None
        if self._window.samples == 0:
            self._sample()  # called sooner than one period after the previous window
        with self._lock:
            sums, self._window = self._window, _Sums(len(self._handles))
        return sums.result([i for i, _ in self._handles])

    def summary(self) -> GpuWindow | None:
        """Means and peaks over everything sampled since start(); None without NVML."""
        if not self._available():
            return None
        with self._lock:
            return self._total.result([i for i, _ in self._handles])


