"""Where a training step's time goes with one loader setting: a CUDA trace plus every thread's CPU time.

    python bench/profile_step.py EXPERIMENT [--warmup 60] [--steps 30] [--out DIR] [key=value ...]

Runs `runner bench`'s bare training step (runner.bench.measure.BareStep: train()'s own step on the experiment's
loader and model, nothing else) under torch.profiler, and reads /proc for each thread of the process before and after.
Prints a summary and writes DIR/profile.json and DIR/trace.json.gz (a Chrome trace for Perfetto).

What it answers: how long the GPU sits idle between kernels; how long the model's stream has nothing to run, and
how much of that the training thread spends waiting for its next batch; how much kernel time the loader's CUDA
streams take next to the model's; which CUDA calls block, on which thread (by name), and for how much of
that time the model's stream idles; whether the training thread waits for a core (run-queue delay,
/proc/PID/task/TID/schedstat) while the loader's threads decode.
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from runner.train.telemetry import thread_times  # noqa: E402  (after the path: run as a script from a checkout)

NEXT_BATCH = "runner.next_batch"  # the profiler's label for the training thread's wait for its next batch
BLOCKING = re.compile(r"Synchronize|Free|Malloc|HostAlloc|HostRegister|MemAlloc|EventQuery|StreamQuery|Memcpy(?!Async)")


def thread_summary(before: dict, after: dict, seconds: float) -> list[dict]:
    """Threads grouped by name (the training thread apart): share of a core used and time spent runnable but
    waiting for one, over the profiled window."""
    groups: dict[str, dict] = defaultdict(lambda: {"threads": 0, "cpu_s": 0.0, "runqueue_s": 0.0})
    for tid, now in after.items():
        then = before.get(tid, {"cpu_s": 0.0, "runqueue_s": 0.0})
        name = "training thread (main)" if tid == os.getpid() else re.sub(r"\d+$", "#", now["name"])
        g = groups[name]
        g["threads"] += 1
        g["cpu_s"] += now["cpu_s"] - then["cpu_s"]
        g["runqueue_s"] += now["runqueue_s"] - then["runqueue_s"]
    rows = [{"threads": k, "count": g["threads"], "cores_busy": round(g["cpu_s"] / seconds, 2),
             "runqueue_wait_pct_of_window": round(100 * g["runqueue_s"] / seconds, 1)} for k, g in groups.items()]
    return sorted(rows, key=lambda r: -r["cores_busy"])


def union_ms(intervals: list[tuple[float, float]]) -> float:
    total, end = 0.0, float("-inf")
    for a, b in sorted(intervals):
        if b > end:
            total += b - max(a, end)
            end = b
    return total / 1000


def gap_spans(intervals: list[tuple[float, float]], over_us: float = 100) -> list[tuple[float, float]]:
    """The stretches longer than `over_us` in which none of `intervals` runs, between the first and the last."""
    found, end = [], None
    for a, b in sorted(intervals):
        if end is not None and a - end > over_us:
            found.append((end, a))
        end = b if end is None else max(end, b)
    return found


def gaps(intervals: list[tuple[float, float]], over_us: float = 100) -> list[float]:
    return [(b - a) / 1000 for a, b in gap_spans(intervals, over_us)]


def overlap_ms(spans: list[tuple[float, float]], others: list[tuple[float, float]]) -> float:
    """How much of `spans` (disjoint) some interval of `others` covers."""
    covered = []
    for a, b in spans:
        covered += [(max(a, c), min(b, d)) for c, d in others if c < b and d > a]
    return union_ms(covered)


def thread_label(tid, main_tid: int, names: dict[int, str]) -> str:
    """'main' for the training thread, else the thread's name with its number folded ('[DALI][TP#]Exec')."""
    if tid == main_tid:
        return "main"
    return re.sub(r"\d+", "#", names[tid]) if tid in names else "other"


def trace_thread_names(events: list[dict]) -> dict:
    """tid -> name from the trace's own thread_name records ('thread 812 ([DALI][TP3]Exec)' -> '[DALI][TP3]Exec'):
    the ids the profiler gives threads it saw through CUDA need not be the ids /proc lists."""
    out = {}
    for e in events:
        if e.get("ph") == "M" and e.get("name") == "thread_name":
            name = e.get("args", {}).get("name", "")
            m = re.fullmatch(r"thread \d+ \((.*)\)", name)
            out[e.get("tid")] = m.group(1) if m else name
    return out


def trace_summary(events: list[dict], steps: int, main_tid: int, names: dict[int, str] | None = None) -> dict:
    gpu = [e for e in events if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    spans = [(e["ts"], e["ts"] + e["dur"]) for e in gpu]
    span_ms = (max(b for _, b in spans) - min(a for a, _ in spans)) / 1000
    streams: dict[int, dict] = defaultdict(lambda: {"kernels": 0, "kernel_ms": 0.0, "copy_ms": 0.0,
                                                     "by_name": defaultdict(float)})
    for e in gpu:
        s = streams[e.get("args", {}).get("stream", -1)]
        if e["cat"] == "kernel":
            s["kernels"] += 1
            s["kernel_ms"] += e["dur"] / 1000
            s["by_name"][e["name"][:80]] += e["dur"] / 1000
        else:
            s["copy_ms"] += e["dur"] / 1000
    per_stream = {}
    for sid, s in sorted(streams.items(), key=lambda kv: -kv[1]["kernel_ms"]):
        top = sorted(s["by_name"].items(), key=lambda kv: -kv[1])[:6]
        per_stream[str(sid)] = {"kernels_per_step": round(s["kernels"] / steps, 1),
                                "kernel_ms_per_step": round(s["kernel_ms"] / steps, 2),
                                "copy_ms_per_step": round(s["copy_ms"] / steps, 2),
                                "top_kernels_ms_per_step": {k: round(v / steps, 3) for k, v in top}}
    idle = gaps(spans)
    # the model's stream (the one with the most kernel time): when it has nothing to run, is the training thread
    # waiting for a batch (NEXT_BATCH on the main thread), and does DALI's GPU work run meanwhile
    model_sid = max(streams, key=lambda sid: streams[sid]["kernel_ms"])
    model_gaps = gap_spans([(e["ts"], e["ts"] + e["dur"]) for e in gpu
                            if e.get("args", {}).get("stream", -1) == model_sid])
    waiting = [(e["ts"], e["ts"] + e["dur"]) for e in events
               if e.get("ph") == "X" and e.get("name") == NEXT_BATCH and e.get("tid") == main_tid]
    others = [(e["ts"], e["ts"] + e["dur"]) for e in gpu
              if e["cat"] == "kernel" and e.get("args", {}).get("stream", -1) != model_sid]
    # which thread blocks in which CUDA call, and for how long of it the model's stream had nothing to run
    names = {**(names or {}), **trace_thread_names(events)}
    calls: dict[tuple, list] = defaultdict(list)
    for e in events:
        if e.get("ph") == "X" and e.get("cat") in ("cuda_runtime", "cuda_driver") and BLOCKING.search(e["name"]):
            calls[(e["name"], thread_label(e.get("tid"), main_tid, names))].append((e["ts"], e["ts"] + e["dur"]))
    blocking = sorted(({"call": k[0], "thread": k[1], "count": len(v),
                        "total_ms": round(sum(b - a for a, b in v) / 1000, 2),
                        "max_ms": round(max(b - a for a, b in v) / 1000, 2),
                        "while_the_model_stream_idled_ms": round(overlap_ms(model_gaps, v), 2)}
                       for k, v in calls.items()), key=lambda r: -r["total_ms"])
    return {"gpu_span_ms": round(span_ms, 1), "gpu_busy_pct": round(100 * union_ms(spans) / span_ms, 1),
            "idle_gaps_over_100us": {"count": len(idle), "total_ms": round(sum(idle), 1),
                                     "largest_ms": [round(g, 2) for g in sorted(idle)[-5:]]},
            "model_stream_gaps_over_100us": {
                "stream": model_sid, "count": len(model_gaps), "total_ms": round(union_ms(model_gaps), 1),
                "while_waiting_for_a_batch_ms": round(overlap_ms(model_gaps, waiting), 1),
                "while_other_streams_ran_kernels_ms": round(overlap_ms(model_gaps, others), 1)},
            "streams": per_stream, "blocking_calls": blocking[:15]}


def labelled(batches):
    """The same batches, each next() shown in the trace as NEXT_BATCH on the calling thread."""
    from torch.profiler import record_function

    while True:
        with record_function(NEXT_BATCH):
            batch = next(batches)
        yield batch


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("experiment")
    ap.add_argument("overrides", nargs="*")
    ap.add_argument("--warmup", type=int, default=60)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--out", type=Path, default=Path("bench-out/profile"))
    args = ap.parse_intermixed_args(argv)

    from torch.profiler import ProfilerActivity, profile

    from runner.bench.measure import BareStep, sync_device
    from runner.dist import setup
    from runner.run.processes import torch_threads
    from runner.run.validate import validate
    from runner.train.step import training_stream

    v = validate(args.experiment, ["tracking.enabled=false", *args.overrides])
    d = setup(v.target.accelerator)
    torch_threads(d)
    with training_stream(v.config.trainer, d.device):  # the stream train() runs on
        step = BareStep(v, d)
        step.batches = labelled(step.batches)
        step.warm_up(args.warmup)
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if d.device.type == "cuda" else [])
        before, t = thread_times(), time.perf_counter()
        with profile(activities=activities) as prof:
            for _ in range(args.steps):
                step()
            sync_device(d)
        seconds, after = time.perf_counter() - t, thread_times()
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "trace.json"
        prof.export_chrome_trace(str(raw))
        text = raw.read_text()
    with gzip.open(args.out / "trace.json.gz", "wt") as f:
        f.write(text)
    batch = v.config.data.batch_size
    summary = {"experiment": args.experiment, "overrides": args.overrides, "steps": args.steps,
               "images_per_s_profiled": round(args.steps * batch / seconds), "data_wait_pct": round(100 * step.wait / seconds, 1),
               "threads": thread_summary(before, after, seconds)}
    if d.device.type == "cuda":
        names = {tid: t["name"] for tid, t in after.items()}
        summary.update(trace_summary(json.loads(text)["traceEvents"], args.steps, os.getpid(), names))
    (args.out / "profile.json").write_text(json.dumps(summary, indent=1))
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
