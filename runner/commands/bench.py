"""`runner bench`: loader-only and end-to-end throughput of each loader, against the synthetic ceiling."""
from __future__ import annotations

import platform
import time
from pathlib import Path

from runner import console
from runner.commands.args import add_experiment, cpu_note, experiment_and_overrides

DEFAULT_LOADERS = "synthetic,dali,dali-cpu,cache,torchvision"


def register(sub) -> None:
    p = sub.add_parser("bench", help="measure each loader: loader-only and training img/s, GPU use, data wait")
    add_experiment(p)
    p.add_argument("--loaders", default=DEFAULT_LOADERS, help=f"comma-separated, from {DEFAULT_LOADERS}")
    p.add_argument("--modes", default="loader,e2e", help="loader (loader only), e2e (training through runner), "
                                                         "bare (training in a bare loop, for runner's overhead)")
    p.add_argument("--warmup", type=int, default=100, help="steps left out of every measurement")
    p.add_argument("--steps", type=int, default=300, help="measured steps")
    p.add_argument("--window", type=int, default=25, help="steps per metrics window (e2e)")
    p.add_argument("--out", default=None, help="folder for bench.json, bench.png, bench.md and the log")
    p.set_defaults(handler=run)


def _machine() -> dict[str, str]:
    from runner.machine import cpu_cores
    from runner.telemetry import gpu_info

    cpu = next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name")),
               platform.processor()) if Path("/proc/cpuinfo").exists() else platform.processor()
    return {"host": platform.node(), "cpu": f"{cpu} ({cpu_cores()} cores)", **gpu_info()}


def run(args) -> int:
    from runner.bench.report import chart, markdown, rows, COLUMNS
    from runner.bench.suite import BenchResult, run_suite, stamp
    from runner.bench.variants import DALI_LOADERS, cache_dir, size_note, variants
    from runner.errors import ConfigError
    from runner.launch import ensure_data
    from runner.validate import validate

    path, overrides = experiment_and_overrides(args)
    modes = [m for m in args.modes.split(",") if m]
    bad = [m for m in modes if m not in ("loader", "e2e", "bare")]
    if bad:
        raise ConfigError(f"unknown mode(s) {', '.join(bad)}; modes: loader, e2e, bare.", file="command line",
                          where="--modes")
    if args.warmup % args.window or args.steps % args.window:
        raise ConfigError(f"--warmup ({args.warmup}) and --steps ({args.steps}) must be multiples of --window "
                          f"({args.window}).", file="command line", where="--window")
    names = [n for n in args.loaders.split(",") if n]
    # a synthetic or torchvision bench runs where DALI is not installed, and makes no data it does not read
    v = validate(path, overrides, check_pipelines=bool(DALI_LOADERS & set(names)))
    chosen = variants(v, names)
    cpu_note(v.graphs)
    if note := size_note(v, chosen):
        console.note(note)
    if set(names) - {"synthetic"}:
        ensure_data(v)
    if any(c.name == "cache" for c in chosen):
        _ensure_cache(v, cache_dir(v))
    out_dir = Path(args.out or f"bench-out/{Path(path).stem}-{time.strftime('%Y%m%d-%H%M%S')}")
    out_dir.mkdir(parents=True, exist_ok=True)
    parent = _parent_run(v, path, overrides)
    started = stamp()
    with console.out.status("benchmarking") as status:
        table_rows = run_suite(path, overrides, chosen, modes, warmup=args.warmup, steps=args.steps,
                               window=args.window, out_dir=out_dir, parent_run_id=parent.run_id if parent else None,
                               on_progress=lambda s: status.update(f"benchmarking {s}"))
    result = BenchResult(experiment=path, overrides=overrides, machine=_machine(),
                         settings={"warmup": args.warmup, "steps": args.steps, "window": args.window,
                                   "batch_size": v.config.data.batch_size, "modes": modes},
                         rows=table_rows, started=started, parent_run_id=parent.run_id if parent else None)
    (out_dir / "bench.json").write_text(result.to_json())
    md = f"{path} {' '.join(overrides)} on {result.machine.get('gpu.model', result.machine['cpu'])}, {started}\n\n" \
         + markdown(result) + "\n"
    (out_dir / "bench.md").write_text(md)
    chart(result, out_dir / "bench.png")
    shown = [i for i, c in enumerate(COLUMNS) if c not in ("configuration", "errors")]  # in bench.md; errors below
    console.out.print(console.table(f"{Path(path).name}: {args.steps} steps after {args.warmup} warm-up, "
                                    f"batch {v.config.data.batch_size}", [COLUMNS[i] for i in shown],
                                    [[r[i] for i in shown] for r in rows(result)]))
    for r in result.rows:
        for mode, err in r.errors.items():
            console.error(err)
    if parent:
        for f in ("bench.json", "bench.md", "bench.png"):
            parent.log_artifact(out_dir / f)
        if result.ceiling:
            parent.log_metrics({"bench/ceiling_images_per_s": result.ceiling}, 0)
        parent.finish("FINISHED" if not any(r.errors for r in result.rows) else "FAILED")
    console.out.print(f"wrote {out_dir}/bench.json, bench.md, bench.png" +
                      (f"; MLflow parent run {parent.run_id}" if parent else ""))
    return 1 if any(r.errors for r in result.rows) else 0


def _ensure_cache(v, dst: Path) -> None:
    from runner.progress import progress_bar
    from runner.data.cache import build_cache
    from runner.plan import data_root

    with progress_bar(f"decoding {data_root(v.config.data)} into {dst}") as progress:
        build_cache(data_root(v.config.data), dst, max_side=256, progress=progress)


def _parent_run(v, path: str, overrides: list[str]):
    if not v.config.tracking.enabled:
        return None
    from runner.tracking import MlflowTracker, resolve_tracking_uri

    t = MlflowTracker(resolve_tracking_uri(v.config.tracking.uri, v.loaded.where("tracking.uri")),
                      v.config.tracking.experiment, run_name=f"bench {Path(path).stem}",
                      tags={"runner.bench": "parent", "runner.overrides": " ".join(overrides)})
    t.start({"experiment": path, "overrides": " ".join(overrides)})
    return t
