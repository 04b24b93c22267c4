"""Telemetry: loader arithmetic on given clock readings, real psutil and (absent) NVML readings."""
from __future__ import annotations

import threading
import time

import pytest
import torch

from runner.machine import gpu_info, load_nvml
from runner.train.telemetry import (
    STREAM_WAIT,
    CpuSampler,
    GpuSampler,
    LaunchThreadsSampler,
    LoaderMeter,
    LoaderWindow,
    StreamWaitMeter,
)


def test_loader_window_and_epoch_arithmetic():
    m = LoaderMeter(now=100.0)
    m.wait(0.5)
    m.step(32, now=101.0)
    m.wait(0.25)
    m.step(32, now=102.0)
    assert m.window() == LoaderWindow(steps=2, images=64, seconds=2.0, wait_s=0.75,
                                      images_per_s=32.0, data_wait_share=0.375)
    m.wait(1.0)
    m.step(32, now=104.0)
    assert m.window() == LoaderWindow(steps=1, images=32, seconds=2.0, wait_s=1.0,
                                      images_per_s=16.0, data_wait_share=0.5)
    assert m.epoch() == LoaderWindow(steps=3, images=96, seconds=4.0, wait_s=1.75,
                                     images_per_s=24.0, data_wait_share=0.4375)


def test_loader_window_without_steps_is_empty_and_keeps_its_start():
    m = LoaderMeter(now=10.0)
    assert m.window() == LoaderWindow(steps=0, images=0, seconds=0.0, wait_s=0.0,
                                      images_per_s=0.0, data_wait_share=0.0)
    m.step(8, now=12.0)
    assert m.window().seconds == 2.0


def test_start_epoch_restarts_window_and_epoch():
    m = LoaderMeter(now=0.0)
    m.wait(3.0)
    m.step(10, now=5.0)
    m.start_epoch(now=50.0)  # e.g. after evaluation: its time counts in neither
    m.wait(0.5)
    m.step(10, now=51.0)
    assert m.window().seconds == 1.0
    e = m.epoch()
    assert (e.steps, e.images, e.seconds, e.data_wait_share) == (1, 10, 1.0, 0.5)
    assert m.window().metrics() == {"loader/images_per_s": 0.0, "loader/data_wait_share": 0.0}


def test_cpu_sampler_reports_system_and_process_load():
    cpu = CpuSampler()
    end = time.perf_counter() + 0.3
    while time.perf_counter() < end:  # burn CPU in this process
        pass
    w = cpu.window()
    assert 0.0 <= w.system_pct <= 100.0
    assert w.process_pct > 10.0  # % of one core; the busy loop used about one
    assert set(w.metrics()) == {"cpu/system_pct", "cpu/process_pct"}


def spin(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def test_launch_threads_sampler_follows_the_thread_that_made_it():
    launch = LaunchThreadsSampler()
    spin(0.3)
    busy = launch.window()
    assert busy.train_thread_busy_pct > 50  # this thread spun for the whole window
    other = threading.Thread(target=spin, args=(0.3,))
    other.start()
    other.join()  # the training thread sleeps while another thread spins
    idle = launch.window()
    assert idle.train_thread_busy_pct < 20
    assert idle.autograd_thread_busy_pct == 0  # no CUDA backward, no pt_autograd threads
    assert set(idle.metrics()) == {"cpu/train_thread_busy_pct", "cpu/train_thread_queued_pct",
                                   "cpu/autograd_thread_busy_pct", "cpu/autograd_thread_queued_pct"}


nvml_present = load_nvml() is not None


@pytest.mark.skipif(nvml_present, reason="NVML is present on this machine")
def test_gpu_sampler_without_nvml_returns_none():
    with GpuSampler([0], period_s=0.01) as gpu:
        time.sleep(0.05)
        assert gpu.window() is None
        assert gpu.summary() is None
    assert gpu_info() == {}


@pytest.mark.gpu
@pytest.mark.skipif(not nvml_present, reason="needs NVML (an NVIDIA driver)")
def test_gpu_sampler_with_nvml_reads_device_zero():
    with GpuSampler([0], period_s=0.01) as gpu:
        time.sleep(0.1)
        w = gpu.window()
        assert w is not None and w.samples >= 2 and w.devices[0].index == 0
        assert 0.0 <= w.util_pct <= 100.0 and w.peak_mem_gib >= w.mem_gib > 0.0
        assert gpu.summary().samples >= w.samples
    info = gpu_info()
    assert int(info["gpu.count"]) >= 1 and info["gpu.model"]


class _Event:
    """A timing event on a fake clock: `record()` stamps it; it completes once the clock passes the stamp."""

    clock = 0.0
    made = 0

    def __init__(self):
        type(self).made += 1
        self.at = None

    def record(self):
        self.at = _Event.clock

    def query(self):
        return self.at is not None and self.at <= _Event.done_until

    def elapsed_time(self, end):  # milliseconds, as torch.cuda.Event's
        return (end.at - self.at) * 1000


def test_stream_wait_meter_sums_completed_pairs_and_keeps_the_rest_for_the_next_window():
    _Event.made, _Event.clock, _Event.done_until = 0, 0.0, 0.0
    meter = StreamWaitMeter(enabled=True, event_factory=_Event)
    for stall in (0.010, 0.030, 0.005):  # three batches; the stream stood still this long for each
        meter.before()
        _Event.clock += stall
        meter.after()
        _Event.clock += 0.040  # the step
    meter.after()  # without a before(): nothing to pair
    _Event.done_until = 0.090  # the first two pairs have completed, the third has not
    assert meter.window() == pytest.approx(0.040)
    _Event.done_until = 1.0
    assert meter.window() == pytest.approx(0.005)
    assert meter.epoch() == pytest.approx(0.045) and meter.epoch() == 0.0
    meter.before()
    meter.after()
    assert _Event.made == 6  # the read pairs' events are recorded again, not made anew


def test_stream_wait_meter_off_cuda_records_nothing():
    meter = StreamWaitMeter(enabled=False, event_factory=lambda: pytest.fail("no event off CUDA"))
    meter.before()
    meter.after()
    assert meter.window() is None and meter.epoch() == 0.0


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_stream_wait_meter_sees_a_stall_the_host_does_not():
    """A batch made on another stream and handed over as DALI does (the current stream waits for it): the host
    returns at once, the current stream stands still until the other stream's work (1e8 GPU cycles, ~50 ms at
    2 GHz) is done."""
    meter, other = StreamWaitMeter(enabled=True), torch.cuda.Stream()
    torch.cuda.synchronize()
    meter.before()
    t0 = time.perf_counter()
    with torch.cuda.stream(other):
        torch.cuda._sleep(100_000_000)
    torch.cuda.current_stream().wait_stream(other)
    host = time.perf_counter() - t0
    meter.after()
    torch.cuda.synchronize()
    assert host < 0.01 and 0.02 < meter.window() < 1.0


def test_the_progress_line_shows_the_streams_wait_beside_the_hosts():
    from runner.train.progress import _fmt

    assert _fmt({"loader/images_per_s": 6123.4, "loader/data_wait_share": 0.031, STREAM_WAIT: 0.124}) == \
        "6,123 img/s  wait 3% (stream 12%)"
    assert _fmt({"loader/images_per_s": 170.0, "loader/data_wait_share": 0.25}) == "170 img/s  wait 25%"
