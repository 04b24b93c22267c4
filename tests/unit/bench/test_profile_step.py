"""bench/profile_step.py's reading of a trace and of /proc (the GPU run itself is measured on the H200)."""
import importlib.util
import threading
import time

from tests.helpers import REPO

spec = importlib.util.spec_from_file_location("profile_step", REPO / "bench" / "profile_step.py")


profile_step = importlib.util.module_from_spec(spec)


spec.loader.exec_module(profile_step)


def kernel(stream, ts, dur, name="k"):
    return {"ph": "X", "cat": "kernel", "name": name, "ts": ts, "dur": dur, "args": {"stream": stream}}


def test_a_trace_summary_splits_kernel_time_by_stream_and_finds_gaps_and_blocking_calls():
    events = [kernel(7, 0, 1000, "gemm"), kernel(7, 1000, 1000, "gemm"), kernel(50, 1500, 1000, "resize"),
              kernel(7, 3000, 1000, "gemm"),  # 500 us idle before it
              {"ph": "X", "cat": "gpu_memcpy", "name": "copy", "ts": 3500, "dur": 100, "args": {"stream": 50}},
              {"ph": "X", "cat": "cuda_runtime", "name": "cudaDeviceSynchronize", "ts": 0, "dur": 2500, "tid": 9},
              {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 0, "dur": 5, "tid": 1},
              {"ph": "X", "cat": "cuda_driver", "name": "cuMemFree_v2", "ts": 10, "dur": 300, "tid": 1},
              {"ph": "X", "cat": "user_annotation", "name": "runner.next_batch", "ts": 1900, "dur": 800, "tid": 1},
              {"ph": "X", "cat": "user_annotation", "name": "runner.next_batch", "ts": 2000, "dur": 900, "tid": 9}]
    out = profile_step.trace_summary(events, steps=2, main_tid=1, names={9: "[DALI][TP12]Exec", 1: "python"})
    assert out["gpu_span_ms"] == 4.0 and out["gpu_busy_pct"] == 87.5  # 3.5 ms of 4 busy
    assert out["idle_gaps_over_100us"] == {"count": 1, "total_ms": 0.5, "largest_ms": [0.5]}
    # the model's stream (7) idles 2.0-3.0 ms: the training thread waits for a batch 2.0-2.7 (thread 9's wait is not
    # the training thread's), and stream 50's resize runs 2.0-2.5
    assert out["model_stream_gaps_over_100us"] == {"stream": 7, "count": 1, "total_ms": 1.0,
                                                   "while_waiting_for_a_batch_ms": 0.7,
                                                   "while_other_streams_ran_kernels_ms": 0.5}
    assert out["streams"]["7"] == {"kernels_per_step": 1.5, "kernel_ms_per_step": 1.5, "copy_ms_per_step": 0.0,
                                   "top_kernels_ms_per_step": {"gemm": 1.5}}
    assert out["streams"]["50"]["kernel_ms_per_step"] == 0.5 and out["streams"]["50"]["copy_ms_per_step"] == 0.05
    # thread 9 blocks 0-2.5 ms, 0.5 ms of it while the model's stream idles (2.0-3.0); its name's numbers folded
    assert out["blocking_calls"] == [
        {"call": "cudaDeviceSynchronize", "thread": "[DALI][TP#]Exec", "count": 1, "total_ms": 2.5, "max_ms": 2.5,
         "while_the_model_stream_idled_ms": 0.5},
        {"call": "cuMemFree_v2", "thread": "main", "count": 1, "total_ms": 0.3, "max_ms": 0.3,
         "while_the_model_stream_idled_ms": 0.0}]


def test_a_blocking_call_takes_its_thread_name_from_the_trace_or_is_other():
    events = [kernel(7, 0, 1000), kernel(7, 2000, 1000),
              {"ph": "X", "cat": "cuda_driver", "name": "cuMemAlloc_v2", "ts": 0, "dur": 10, "tid": 4},
              {"ph": "X", "cat": "cuda_runtime", "name": "cudaFree", "ts": 0, "dur": 10, "tid": 5},
              {"ph": "M", "name": "thread_name", "pid": 1, "tid": 5, "args": {"name": "thread 5 ([DALI][TP0]Mixe)"}}]
    out = profile_step.trace_summary(events, steps=1, main_tid=1)
    # thread 5 is named by the trace itself; thread 4 by nobody
    assert [(b["call"], b["thread"]) for b in out["blocking_calls"]] == [("cuMemAlloc_v2", "other"),
                                                                        ("cudaFree", "[DALI][TP#]Mixe")]


def test_thread_times_see_a_busy_thread_by_name():
    burned, release = threading.Event(), threading.Event()

    def spin():
        start = time.thread_time()
        while time.thread_time() - start < 0.1:  # 0.1 s of this thread's own CPU, however loaded the machine is
            pass
        burned.set()
        release.wait()

    before = profile_step.thread_times()
    worker = threading.Thread(target=spin, name="spinner")
    worker.start()
    assert burned.wait(60)
    during = profile_step.thread_times()  # the worker has to be alive to be read
    release.set()
    worker.join()
    rows = {r["threads"]: r for r in profile_step.thread_summary(before, during, seconds=0.2)}
    assert "training thread (main)" in rows
    busy = [r for name, r in rows.items() if name != "training thread (main)"]  # Python names no OS thread
    assert max(r["cores_busy"] for r in busy) >= 0.4  # the spinner's 0.1 s of CPU over a 0.2 s window
