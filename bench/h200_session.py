"""The GPU session behind docs/benchmarks.md, one phase per device call (../shared/DEVICE.md).

    python3 bench/h200_session.py PHASE        # run from the repo root on the GPU machine

To re-measure the issue's targets on a fresh machine: p1 with the first piece of the DALI bundle (machine and
data), the middle pieces, then t1 with the last piece unpacked and t2 right after (docs/benchmarks.md, "How to
re-measure"). Each ratio comes from two numbers of one call; t1 and t2 write targets-t1.md and targets-t2.md.

The phases of earlier sessions stay as they ran:
- first (docs/h200/2026-12-02/): a-c carry pieces of the bundle and do what needs no DALI (data, the decoded
  cache, the torchvision baseline, the ceiling); d the DALI loaders eagerly; e with torch.compile and the issue's
  `runner launch` check; f the loader-only target again;
- second (docs/h200/2026-12-02-s2/): h data and torchvision against anchor.py, alternated; k torch.compile fed by
  GPU, CPU and hybrid decode; l the loader-only target and `runner tune`; m and n, on a fresh machine, reserved
  cores and CUDA graphs;
- third (docs/h200/2026-12-03/): p1 data; p profiles (bench/profile_step.py) and the smallest-files hybrid; q
  variants of it on a second machine; r (not run: no machine was lent);
- fourth (docs/h200/2026-12-03-s4/): s, u and v, libjpeg-turbo's fast IDCT, through a `fast_idct` param removed
  after them (they are in this file as of commit f6bdd69);
- written for the next session (the fifth had no device time): w, the training thread's CPU columns for the
  shipped compiled setting against DALI's threads made nicer (data.dali_nice); x, the same with CUDA graphs.

Every measurement a ratio is taken from is in the same phase as its reference. Results go to $OUT: phase-X.log
(everything), phase-X.json (parsed numbers) and the `runner bench` folders, tarred.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

OUT = Path(os.environ.get("OUT", "bench-out/h200"))
DEADLINE = time.monotonic() + float(os.environ.get("SESSION_BUDGET_S", 560))
SYNTH = "data/synth/v1-c100-n256-e20-s400-640-q90"  # resnet50_dali.yaml's data.synth -> plan.synth_dir
ANCHOR = ".anchor/anchor.py"
RUNNER = [sys.executable, "-m", "runner"]
BENCH = ["--warmup", "50", "--steps", "250", "--window", "25"]
results: dict[str, object] = {}
log_file = None


def run(name: str, cmd: list[str], *, env: dict | None = None, timeout: float = 300, need: float = 30) -> str:
    """Run a step, log everything, never raise; skip it when the call's time is nearly spent."""
    left = DEADLINE - time.monotonic()
    if left < need:
        results[name] = {"skipped": f"{left:.0f} s left"}
        return ""
    t = time.monotonic()
    full_env = {**os.environ, **(env or {})}
    log_file.write(f"\n==== {name}: {' '.join(cmd)}\n")
    log_file.flush()
    try:
        proc = subprocess.run(cmd, env=full_env, capture_output=True, text=True, timeout=min(timeout, left))
        out, rc = proc.stdout + proc.stderr, proc.returncode
    except subprocess.TimeoutExpired as e:
        out, rc = (e.stdout or b"").decode() + (e.stderr or b"").decode() if isinstance(e.stdout, bytes) \
            else (e.stdout or "") + (e.stderr or ""), "timeout"
    log_file.write(out)
    log_file.write(f"==== {name}: rc={rc} in {time.monotonic() - t:.0f} s\n")
    log_file.flush()
    results[name] = {"rc": rc, "seconds": round(time.monotonic() - t, 1)}
    for line in out.splitlines():
        m = re.match(r"RESULT (\S+) (\d+) img/s gpu_util=(\S+)% (.*)", line)
        if m:
            results[name].update(images_per_s=int(m[2]), gpu_util_pct=m[3], extra=json.loads(m[4]))
    print(f"{name}: rc={rc} {time.monotonic() - t:.0f} s {results[name]}", flush=True)
    return out


def anchor(mode: str, arg: str | None = None, **env) -> None:
    settings = {"BATCH": "256", "STEPS": "300", "WARM": "50", **{k: str(v) for k, v in env.items()}}
    name = f"anchor_{mode}" + "".join(f"_{k.lower()}{v}" for k, v in env.items())
    run(name, [sys.executable, ANCHOR, mode, *([arg] if arg else [])], env=settings, timeout=420)


def bench(name: str, experiment: str, loaders: str, modes: str, *overrides: str, timeout: float = 540) -> None:
    out = OUT / name
    run(name, [*RUNNER, "bench", experiment, "--loaders", loaders, "--modes", modes, *BENCH, "--out", str(out),
               *overrides], timeout=timeout, need=90)
    if (out / "bench.json").exists():
        results[name]["bench"] = json.loads((out / "bench.json").read_text())
    for extra in ("bench.log", "bench.md"):  # into the phase log: a call brings back 8 files at most
        if (out / extra).exists():
            log_file.write(f"\n==== {name}/{extra}\n" + (out / extra).read_text())
            (out / extra).unlink()


def phase_p1() -> None:
    """First call on a fresh machine: what it is, and the data."""
    machine_and_data()


def machine_and_data() -> None:
    """The GPU, driver, cores and torch of this machine; the benchmark's JPEG set (runner data synth)."""
    run("machine", ["bash", "-c", "nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm "
                                  "--format=csv; nproc; python3 -c 'import torch; print(torch.__version__, "
                                  "torch.version.cuda)'"])
    run("synth", [*RUNNER, "data", "synth", SYNTH, "--classes", "100", "--per-class", "256", "--eval-per-class", "20"],
        timeout=400)


def phase_a() -> None:
    machine_and_data()
    anchor("model")
    anchor("e2e_tv", f"{SYNTH}/train")
    bench("bench_tv", "experiments/resnet50_torchvision.yaml", "synthetic,torchvision", "e2e",
          "tracking.enabled=false")


def phase_b() -> None:
    run("cache", [*RUNNER, "data", "cache", SYNTH, f"{SYNTH}-cache256", "--max-side", "256"], timeout=400)


def phase_c() -> None:
    run("tv_loader", [sys.executable, ANCHOR, "tv", f"{SYNTH}/train"], env={"STEPS": "100", "WARM": "10"},
        timeout=200)


def phase_d() -> None:
    anchor("dali_fused", f"{SYNTH}/train")
    anchor("model")
    anchor("e2e_dali", f"{SYNTH}/train")
    bench("bench_eager", "experiments/resnet50_dali.yaml", "synthetic,dali,dali-cpu,cache", "loader,e2e")
    bench("bench_eager_hw99", "experiments/resnet50_dali.yaml", "dali", "loader,e2e,bare",
          "pipelines.train.params.hw_decoder_load=0.99")


def phase_e() -> None:
    bench("bench_compiled", "experiments/resnet50_dali.yaml", "synthetic,cache", "e2e", "trainer.compile=true")
    bench("bench_compiled_hw99", "experiments/resnet50_dali.yaml", "dali", "e2e", "trainer.compile=true",
          "pipelines.train.params.hw_decoder_load=0.99")
    run("launch", [*RUNNER, "launch", "experiments/resnet50_dali.yaml", "trainer.max_steps=300"], timeout=300,
        need=120)
    anchor("model", COMPILE=1)
    if Path("mlflow.db").exists():
        (OUT / "mlflow.db").write_bytes(Path("mlflow.db").read_bytes())


def phase_f() -> None:
    anchor("dali_fused", f"{SYNTH}/train", HW_LOAD="0.99")
    bench("bench_loader_hw99", "experiments/resnet50_dali.yaml", "dali", "loader",
          "pipelines.train.params.hw_decoder_load=0.99", "tracking.enabled=false")
    anchor("dali_fused", f"{SYNTH}/train")
    bench("bench_loader_linear", "experiments/resnet50_dali.yaml", "dali", "loader",
          "pipelines.train.use=imagenet_train_fused_linear", "tracking.enabled=false")
    bench("bench_compiled_linear", "experiments/resnet50_dali.yaml", "synthetic,dali", "e2e", "trainer.compile=true",
          "pipelines.train.use=imagenet_train_fused_linear", "pipelines.train.params.hw_decoder_load=0.99",
          "data.prefetch=3", "tracking.enabled=false")


# phase g measured data.cuda_stream_priority=-5, a key since removed: DALI 2.4 ignores the pipeline's
# default_cuda_stream_priority (deprecated, "has no effect"), so that phase measured run-to-run noise.


# ---- second session (2026-12-02, afternoon): a hybrid CPU+GPU decode, runner tune, torchvision re-checked
HYBRID = ("pipelines.train.hybrid.params.decode_device=cpu",)


def phase_h() -> None:
    """Call 1 (no DALI yet): data, then the torchvision baseline and anchor.py's, alternated twice."""
    machine_and_data()
    for i in (1, 2):
        anchor("e2e_tv", f"{SYNTH}/train")
        results[f"anchor_e2e_tv_{i}"] = results.pop("anchor_e2e_tv")
        bench(f"bench_tv_{i}", "experiments/resnet50_torchvision.yaml", "torchvision", "e2e", "tracking.enabled=false")


def phase_k() -> None:
    """Call 4 (DALI unpacked): torch.compile fed from JPEGs, GPU decode against hybrid CPU+GPU decode."""
    compiled = ("trainer.compile=true", "pipelines.train.params.hw_decoder_load=0.99", "tracking.enabled=false")
    bench("compiled_gpu", "experiments/resnet50_dali.yaml", "synthetic,dali", "e2e", *compiled)
    for share in ("0.75", "0.65", "0.85"):
        bench(f"compiled_hybrid{share}", "experiments/resnet50_dali.yaml", "dali", "e2e", *compiled, *HYBRID,
              f"pipelines.train.hybrid.share={share}")
    bench("compiled_hybrid0.75_t4", "experiments/resnet50_dali.yaml", "dali", "e2e", *compiled, *HYBRID,
          "pipelines.train.hybrid.share=0.75", "data.num_threads=4", "pipelines.train.hybrid.num_threads=12")
    bench("eager_hybrid", "experiments/resnet50_dali.yaml", "synthetic,dali", "loader,e2e", *compiled[1:], *HYBRID,
          "pipelines.train.hybrid.share=0.75")


def phase_l() -> None:
    """Call 5: the loader-only target again, then runner tune with torch.compile."""
    anchor("dali_fused", f"{SYNTH}/train")
    bench("loader_fused", "experiments/resnet50_dali.yaml", "dali", "loader", "tracking.enabled=false")
    run("tune_compiled", [*RUNNER, "tune", "experiments/resnet50_dali.yaml", "--max-trials", "10", "--warmup", "50",
                          "--steps", "150", "--window", "25", "-o", str(OUT / "resnet50_dali.compiled.tuned.yaml"),
                          "trainer.compile=true", "tracking.enabled=false"], timeout=560, need=200)


def phase_m() -> None:
    """A fresh machine (after phase l; data made in its first call): is the compiled GPU starved by DALI's threads
    taking the training thread's cores? Cores reserved for the training loop, and CUDA graphs (less Python
    launching), against the same without, with their ceilings in this call."""
    off = ("tracking.enabled=false", "trainer.compile=true", "pipelines.train.params.hw_decoder_load=0.99")
    share = (*HYBRID, "pipelines.train.hybrid.share=0.8")
    bench("m_hybrid", "experiments/resnet50_dali.yaml", "synthetic,dali", "e2e", *off, *share)
    bench("m_hybrid_reserved", "experiments/resnet50_dali.yaml", "dali", "e2e", *off, *share, "data.reserved_cores=2")
    graphs = (*off, "trainer.compile_mode=reduce-overhead")
    bench("m_graphs", "experiments/resnet50_dali.yaml", "synthetic,dali", "e2e", *graphs, *share)
    bench("m_cpu_reserved", "experiments/resnet50_dali.yaml", "dali-cpu", "e2e", *off, "data.reserved_cores=2")
    bench("m_graphs_reserved", "experiments/resnet50_dali.yaml", "dali", "e2e", *graphs, *share,
          "data.reserved_cores=2")


def phase_n() -> None:
    """The one run above 95% in phase m (CPU decode on 14 pinned threads), repeated on the same machine."""
    bench("n_cpu_reserved", "experiments/resnet50_dali.yaml", "synthetic,dali-cpu", "e2e", "tracking.enabled=false",
          "trainer.compile=true", "data.reserved_cores=2")


# ---- third session (2026-12-03): where the compiled step loses time when fed from JPEGs, and files dealt by size
COMPILED = ("tracking.enabled=false", "trainer.compile=true", "pipelines.train.params.hw_decoder_load=0.99")


def profile(name: str, *overrides: str) -> None:
    """bench/profile_step.py: a CUDA trace and per-thread CPU time of 30 bare training steps."""
    run(name, [sys.executable, "bench/profile_step.py", "experiments/resnet50_dali.yaml", "--warmup", "60",
               "--steps", "30", "--out", str(OUT / name), *overrides], timeout=300, need=90)
    if (OUT / name / "profile.json").exists():
        results[name]["profile"] = json.loads((OUT / name / "profile.json").read_text())


def phase_p() -> None:
    """Round 1 (DALI unpacked): the ceiling, profiles of GPU, hybrid and CPU decode, then the hybrid with the CPU
    copy dealt the smallest files, and the ceiling again."""
    bench("p_ceiling", "experiments/resnet50_dali.yaml", "synthetic", "e2e", *COMPILED)
    profile("p_prof_gpu", *COMPILED)
    profile("p_prof_hybrid", *COMPILED, *HYBRID, "pipelines.train.hybrid.share=0.8")
    profile("p_prof_cpu", *COMPILED, "pipelines.train.params.decode_device=cpu")
    for share in ("0.8", "0.85", "0.9"):
        bench(f"p_hybrid_smallest{share}", "experiments/resnet50_dali.yaml", "dali", "e2e", *COMPILED, *HYBRID,
              f"pipelines.train.hybrid.share={share}", "pipelines.train.hybrid.deal=smallest")
    bench("p_ceiling_again", "experiments/resnet50_dali.yaml", "synthetic", "e2e", *COMPILED)


SMALLEST = (*HYBRID, "pipelines.train.hybrid.deal=smallest")
Q_VARIANTS = {  # phase q: the hybrid with the CPU copy dealt the smallest files, around phase p's best (0.8)
    "q_s80": ("pipelines.train.hybrid.share=0.8",),
    "q_s75": ("pipelines.train.hybrid.share=0.75",),
    "q_s80_threads": ("pipelines.train.hybrid.share=0.8", "data.num_threads=3", "pipelines.train.hybrid.num_threads=13"),
    "q_s80_prefetch3": ("pipelines.train.hybrid.share=0.8", "data.prefetch=3"),
    "q_s80_threads_prefetch3": ("pipelines.train.hybrid.share=0.8", "data.num_threads=3",
                                "pipelines.train.hybrid.num_threads=13", "data.prefetch=3"),
}


def phase_q() -> None:
    """Round 2, first call with DALI: the ceiling, then variants of the smallest-files hybrid, the ceiling again and
    phase p's best once more."""
    bench("q_ceiling", "experiments/resnet50_dali.yaml", "synthetic", "e2e", *COMPILED)
    for name, extra in Q_VARIANTS.items():
        bench(name, "experiments/resnet50_dali.yaml", "dali", "e2e", *COMPILED, *SMALLEST, *extra)
    bench("q_ceiling_again", "experiments/resnet50_dali.yaml", "synthetic", "e2e", *COMPILED)
    bench("q_s80_again", "experiments/resnet50_dali.yaml", "dali", "e2e", *COMPILED, *SMALLEST, *Q_VARIANTS["q_s80"])


def phase_r() -> None:
    """Round 3, on a fresh machine: the shipped experiments/resnet50_dali_compiled.yaml (phase q's fastest setting,
    prefetch 3) with its ceiling, and the same with prefetch 2, twice each, alternated."""
    for i in (1, 2):
        bench(f"r_shipped_{i}", "experiments/resnet50_dali_compiled.yaml", "synthetic,dali", "e2e",
              "tracking.enabled=false")
        bench(f"r_prefetch2_{i}", "experiments/resnet50_dali_compiled.yaml", "dali", "e2e", "tracking.enabled=false",
              "data.prefetch=2")


# ---- fifth session: is the training thread short of a core (queued) or slow (busy)? Nicer DALI threads, CUDA graphs
SHIPPED = ("experiments/resnet50_dali_compiled.yaml", "dali", "e2e", "tracking.enabled=false")
CPU_EVERY_IMAGE = ("experiments/resnet50_dali_compiled.yaml", "dali-cpu", "e2e", "tracking.enabled=false")
GRAPHS = "trainer.compile_mode=reduce-overhead"


def phase_w() -> None:
    """The shipped experiments/resnet50_dali_compiled.yaml against the same with DALI's threads at nice 10 and 19
    (data.dali_nice), and CPU decode of every image at nice 10, alternated in three rounds, ceilings first and in
    the middle. `runner bench` reports how busy the training thread was and how long it queued for a core."""
    bench("w_ceiling", *SHIPPED[:1], "synthetic", "e2e", "tracking.enabled=false")
    for i in (1, 2, 3):
        bench(f"w_shipped_{i}", *SHIPPED)
        bench(f"w_nice10_{i}", *SHIPPED, "data.dali_nice=10")
        if i < 3:
            bench(f"w_nice19_{i}", *SHIPPED, "data.dali_nice=19")
            bench(f"w_cpu_nice10_{i}", *CPU_EVERY_IMAGE, "data.dali_nice=10")
        if i == 2:
            bench("w_ceiling_again", *SHIPPED[:1], "synthetic", "e2e", "tracking.enabled=false")


def phase_x() -> None:
    """CUDA graphs (trainer.compile_mode=reduce-overhead) against that mode's own ceiling: the shipped hybrid with
    and without nicer DALI threads, CPU decode of every image; then the default mode's ceiling and nice 10 again."""
    bench("x_graphs_ceiling", *SHIPPED[:1], "synthetic", "e2e", "tracking.enabled=false", GRAPHS)
    bench("x_graphs_nice10_1", *SHIPPED, GRAPHS, "data.dali_nice=10")
    bench("x_graphs_shipped", *SHIPPED, GRAPHS)
    bench("x_graphs_cpu_nice10", *CPU_EVERY_IMAGE, GRAPHS, "data.dali_nice=10")
    bench("x_graphs_nice10_2", *SHIPPED, GRAPHS, "data.dali_nice=10")
    bench("x_graphs_ceiling_again", *SHIPPED[:1], "synthetic", "e2e", "tracking.enabled=false", GRAPHS)
    bench("x_ceiling", *SHIPPED[:1], "synthetic", "e2e", "tracking.enabled=false")
    bench("x_nice10", *SHIPPED, "data.dali_nice=10")
    bench("x_shipped", *SHIPPED)


# ---- the targets, re-measured: each ratio from two numbers of one call; t1 and t2 each write targets-tN.md
def phase_t1() -> None:
    """Loader only against anchor.py's dali_fused; eager from JPEGs (CPU decode), from the decoded cache, and runner's
    loop against the bare loop on the same loader, all against this call's ceiling; torchvision against e2e_tv."""
    anchor("dali_fused", f"{SYNTH}/train")
    bench("t_loader", "experiments/resnet50_dali.yaml", "dali", "loader", "tracking.enabled=false")
    bench("t_eager", "experiments/resnet50_dali.yaml", "synthetic,dali-cpu,cache", "e2e,bare")
    anchor("e2e_tv", f"{SYNTH}/train")
    bench("t_tv", "experiments/resnet50_torchvision.yaml", "torchvision", "e2e", "tracking.enabled=false")
    targets("t1")


def phase_t2() -> None:
    """torch.compile: the shipped experiments/resnet50_dali_compiled.yaml from JPEGs and the decoded cache, against
    the ceiling measured before and after; the JPEG run twice."""
    bench("t_compiled", "experiments/resnet50_dali_compiled.yaml", "synthetic,dali,cache", "e2e",
          "tracking.enabled=false")
    bench("t_compiled_again", "experiments/resnet50_dali_compiled.yaml", "dali", "e2e", "tracking.enabled=false")
    bench("t_compiled_ceiling_again", "experiments/resnet50_dali_compiled.yaml", "synthetic", "e2e",
          "tracking.enabled=false")
    targets("t2")


def measured(name: str, variant: str | None = None, mode: str = "e2e") -> float | None:
    """img/s of a `runner bench` row (name, variant, mode) or of an anchor.py line (name alone)."""
    got = results.get(name) or {}
    if variant is None:
        return got.get("images_per_s")
    row = next((r for r in (got.get("bench") or {}).get("rows", []) if r["variant"] == variant), None)
    return ((row or {}).get(mode) or {}).get("images_per_s")


def ceiling(*names: str) -> float | None:
    values = [v for v in (measured(n, "synthetic") for n in names) if v]
    return sum(values) / len(values) if values else None


TARGETS = [  # target, runner's number, the reference it is divided by, the band the ratio must fall in
    ("YAML-compiled DALI pipeline, loader only, >= 1.00x anchor.py dali_fused",
     lambda: measured("t_loader", "dali", "loader"), lambda: measured("anchor_dali_fused"), (1.00, None)),
    ("from JPEGs (CPU decode, dali-cpu), eager, >= 97% of the ceiling",
     lambda: measured("t_eager", "dali-cpu"), lambda: ceiling("t_eager"), (0.97, None)),
    ("from the decoded cache, eager, >= 99% of the ceiling",
     lambda: measured("t_eager", "cache"), lambda: ceiling("t_eager"), (0.99, None)),
    ("runner's overhead (its loop / the bare loop, dali-cpu), <= 1%",
     lambda: measured("t_eager", "dali-cpu"), lambda: measured("t_eager", "dali-cpu", "bare"), (0.99, None)),
    ("torchvision within 5% of anchor.py e2e_tv",
     lambda: measured("t_tv", "torchvision"), lambda: measured("anchor_e2e_tv"), (0.95, 1.05)),
    ("from JPEGs, torch.compile (resnet50_dali_compiled.yaml), >= 95% of the ceiling",
     lambda: measured("t_compiled", "dali"), lambda: ceiling("t_compiled", "t_compiled_ceiling_again"), (0.95, None)),
    ("the same, second run",
     lambda: measured("t_compiled_again", "dali"), lambda: ceiling("t_compiled", "t_compiled_ceiling_again"),
     (0.95, None)),
    ("from the decoded cache, torch.compile, >= 99% of the ceiling",
     lambda: measured("t_compiled", "cache"), lambda: ceiling("t_compiled", "t_compiled_ceiling_again"), (0.99, None)),
]


def targets(phase: str) -> None:
    """The targets this call measured, as a table: runner, reference, ratio, met."""
    lines = ["| target | runner img/s | reference img/s | ratio | met |", "|---|---|---|---|---|"]
    for target, ours, reference, (low, high) in TARGETS:
        a, b = ours(), reference()
        if a is None and b is None:
            continue  # measured in the other phase
        if not a or not b:
            shown = [f"{x:,.0f}" if x else "failed" for x in (a, b)]
            lines.append(f"| {target} | {shown[0]} | {shown[1]} | - | **no** |")
            continue
        ratio = a / b
        met = ratio >= low and (high is None or ratio <= high)
        lines.append(f"| {target} | {a:,.0f} | {b:,.0f} | {ratio:.3f} | {'yes' if met else '**no**'} |")
    (OUT / f"targets-{phase}.md").write_text("\n".join(lines) + "\n")
    log_file.write("\n" + "\n".join(lines) + "\n")
    print("\n".join(lines), flush=True)


PHASES = {"t1": phase_t1, "t2": phase_t2, "x": phase_x, "w": phase_w, "r": phase_r, "q": phase_q, "p1": phase_p1, "p": phase_p, "n": phase_n, "m": phase_m, "h": phase_h, "k": phase_k, "l": phase_l, "f": phase_f, "a": phase_a, "b": phase_b, "c": phase_c, "d": phase_d, "e": phase_e}


def main(phase: str) -> int:
    global log_file
    OUT.mkdir(parents=True, exist_ok=True)
    with open(OUT / f"phase-{phase}.log", "a") as log_file:
        results["started"] = time.strftime("%Y-%m-%d %H:%M:%S")
        PHASES[phase]()
    (OUT / f"phase-{phase}.json").write_text(json.dumps(results, indent=1, default=str))
    folders = [p.name for p in OUT.iterdir() if p.is_dir()]
    if folders:  # one archive: a call brings back 8 files at most
        subprocess.run(["tar", "-czf", str(OUT / f"phase-{phase}.tar.gz"), "-C", str(OUT), *folders], check=True)
        subprocess.run(["rm", "-r", *[str(OUT / f) for f in folders]], check=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
