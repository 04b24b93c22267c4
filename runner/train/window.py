"""What the loop logs: a window's training sums and meters, read once per logging interval, and each epoch's."""
from __future__ import annotations

import time
from collections.abc import Callable

import torch

from runner.dist import Dist, all_sum
from runner.train.telemetry import (
    PART_WAIT,
    STREAM_WAIT,
    CpuSampler,
    GpuSampler,
    LaunchThreadsSampler,
    LoaderMeter,
    StreamWaitMeter,
)


class Window:
    """Training sums since the last log, kept on the device: read once per window, never per step."""

    def __init__(self, device: torch.device):
        self.loss = torch.zeros((), device=device)
        self.correct = torch.zeros((), device=device)
        self.batches = self.seen = 0

    def add(self, loss: torch.Tensor, logits: torch.Tensor, labels: torch.Tensor) -> None:
        self.loss += loss.detach()
        self.correct += (logits.detach().argmax(1) == labels).sum()
        self.batches += 1
        self.seen += labels.shape[0]

    def reset(self) -> None:
        self.loss.zero_()
        self.correct.zero_()
        self.batches = self.seen = 0


class Telemetry:
    """The loader and stream-wait meters and the CPU, launch-thread and GPU samplers, read at each window and epoch
    end."""

    def __init__(self, d: Dist, part_waits: Callable[[], dict[str, float]] = dict):
        self.meter, self.cpu, self.launch = LoaderMeter(), CpuSampler(), LaunchThreadsSampler()
        self.stream = StreamWaitMeter(enabled=d.device.type == "cuda")
        self.gpu = GpuSampler([d.local_rank]).start() if d.device.type == "cuda" else None
        self.gpu_utils: list[float] = []  # this epoch's window readings
        self.part_waits, self._waited = part_waits, part_waits()  # a hybrid loader's seconds per pipeline, in all

    def part_wait_shares(self, seconds: float) -> dict[str, float]:
        """Each pipeline's wait since the last call, as a share of `seconds` (the window's wall time)."""
        now = self.part_waits()
        shares = {name: (now[name] - self._waited.get(name, 0.0)) / seconds if seconds > 0 else 0.0 for name in now}
        self._waited = now
        return shares

    def start_epoch(self) -> None:
        self.gpu_utils = []
        self.meter.start_epoch(time.perf_counter())

    def stop(self) -> None:
        if self.gpu:
            self.gpu.stop()


def log_window(window: Window, t: Telemetry, d: Dist, *, lr: float, stop_requested: bool,
               epoch: float) -> tuple[dict[str, float], bool]:
    """The window's metrics summed over ranks, and whether any rank was asked to stop; resets the window."""
    loader = t.meter.window()
    parts = t.part_wait_shares(loader.seconds)  # the same pipelines, in the same order, on every rank
    loss_total, correct_total = torch.stack([window.loss.float(), window.correct.float()]).tolist()  # one sync
    stood = t.stream.window()  # after the sync: the window's events have completed
    stream_wait = stood / loader.seconds if stood is not None and loader.seconds > 0 else 0.0
    # one small all-reduce carries the sums, the throughput, the stop request and the waits
    totals = all_sum([loss_total, correct_total, window.batches, window.seen, loader.images_per_s,
                      loader.data_wait_share, 1.0 if stop_requested else 0.0, stream_wait, *parts.values()],
                     d).tolist()
    metrics = {"train/loss": totals[0] / max(totals[2], 1), "train/top1": totals[1] / max(totals[3], 1),
               "train/lr": lr, "train/epoch": epoch,
               "loader/images_per_s": totals[4], "loader/images_per_s_per_device": totals[4] / d.world,
               "loader/data_wait_share": totals[5] / d.world,
               **({STREAM_WAIT: totals[7] / d.world} if t.stream.enabled else {}),
               **{PART_WAIT + name: x / d.world for name, x in zip(parts, totals[8:])},
               **t.cpu.window().metrics()}
    threads = t.launch.window()
    if threads:
        metrics.update(threads.metrics())
    g = t.gpu.window() if t.gpu else None
    if g:
        metrics.update(g.metrics())  # this node's rank-0 GPU
        t.gpu_utils.append(g.util_pct)
    window.reset()
    return metrics, totals[6] > 0  # any rank was asked to stop: all stop here


def end_epoch(t: Telemetry, d: Dist) -> dict[str, float]:
    """The epoch's throughput and data wait summed over ranks, and its mean GPU use."""
    loader = t.meter.epoch()
    stood = t.stream.epoch()
    stream_wait = stood / loader.seconds if loader.seconds > 0 else 0.0
    images_per_s, wait, stream_wait = all_sum([loader.images_per_s, loader.data_wait_share, stream_wait], d).tolist()
    metrics = {"epoch/images_per_s": images_per_s, "epoch/data_wait_share": wait / d.world}
    if t.stream.enabled:
        metrics["epoch/stream_wait_share"] = stream_wait / d.world
    if t.gpu_utils:
        metrics["epoch/gpu_util_pct"] = sum(t.gpu_utils) / len(t.gpu_utils)
    return metrics
