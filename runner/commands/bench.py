"""`runner bench`: loader-only and end-to-end throughput of each loader, against the synthetic ceiling; one
experiment from the command line, or a suite file of configurations measured together."""
from __future__ import annotations

import dataclasses
import platform
import shlex
import time
from pathlib import Path

from runner import console
from runner.commands.args import run_notes
from runner.errors import ConfigError

DEFAULT_LOADERS = "synthetic,dali,dali-cpu,cache,torchvision"
DEFAULTS = {"repeat": 1, "warmup": 100, "steps": 300, "window": 25}


def register(sub) -> None:
    p = sub.add_parser("bench", help="measure each loader: loader-only and training img/s, GPU use, data wait")
    p.add_argument("experiment", nargs="?", help="experiment YAML file (none with --suite)")
    p.add_argument("overrides", nargs="*", metavar="key=value",
                   help="overrides, e.g. optimizer.lr=0.05; with --suite they apply to every entry, and "
                        "vars.NAME=VALUE sets a variable of the suite")
    p.add_argument("--suite", default=None, help="a suite file (bench/suites/*.yaml): named configurations "
                                                 "measured together, into one CSV and one markdown table")
    p.add_argument("--repeat", type=int, default=None,
                   help="rounds (default 1, or the suite's): each measures every row once; the table gives the "
                        "median and range (min-max)")
    p.add_argument("--loaders", default=None, help=f"comma-separated, from {DEFAULT_LOADERS} (the default)")
    p.add_argument("--modes", default=None, help="loader (loader only), e2e (training through runner), "
                                                 "bare (training in a bare loop, for runner's overhead); "
                                                 "default loader,e2e")
    p.add_argument("--warmup", type=int, default=None, help="steps left out of every measurement (default 100)")
    p.add_argument("--steps", type=int, default=None, help="measured steps (default 300)")
    p.add_argument("--window", type=int, default=None, help="steps per metrics window, e2e (default 25)")
    p.add_argument("--out", default=None, help="folder for the results, the chart and the log")
    p.set_defaults(handler=run)


def _machine() -> dict[str, str]:
    from runner.machine import cpu_cores
    from runner.telemetry import gpu_info

    cpu = next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name")),
               platform.processor()) if Path("/proc/cpuinfo").exists() else platform.processor()
    return {"host": platform.node(), "cpu": f"{cpu} ({cpu_cores()} cores)", **gpu_info()}


def _words(args) -> list[str]:
    from runner.config.load import is_override

    words = [w for w in ([args.experiment] if args.experiment else []) + list(args.overrides)]
    if args.suite is not None:
        files = [w for w in words if not is_override(w)]
        if files:
            raise ConfigError(f"'{files[0]}' is not an override: --suite names the experiments in its entries; "
                              "after it come key=value overrides for every entry (or vars.NAME=VALUE).",
                              file="command line")
        return words
    if not args.experiment or is_override(args.experiment):
        raise ConfigError("name an experiment file (runner bench EXP.yaml) or a suite (runner bench --suite "
                          "FILE.yaml).", file="command line")
    stray = [o for o in args.overrides if not is_override(o)]
    if stray:
        raise ConfigError(f"'{stray[0]}' is not an override; write key.path=value, for example "
                          "optimizer.lr=0.05 (one experiment file comes first).", file="command line")
    return list(args.overrides)


def load(args):
    """The suite to measure: the file's, or one entry of the command line's experiment."""
    from runner.bench.suitefile import Entry, Suite, load_suite
    from runner.bench.variants import LOADERS, MODES

    words = _words(args)
    given = {k: getattr(args, k) for k in DEFAULTS if getattr(args, k) is not None}
    if args.suite is not None:
        for flag in ("loaders", "modes"):
            if getattr(args, flag) is not None:
                raise ConfigError(f"the suite's entries name their {flag}; --{flag} goes with one experiment.",
                                  file="command line", where=f"--{flag}")
        suite = dataclasses.replace(load_suite(Path(args.suite), words), **given)
    else:
        names = [n for n in (args.loaders or DEFAULT_LOADERS).split(",") if n]
        modes = [m for m in (args.modes or "loader,e2e").split(",") if m]
        bad = [m for m in modes if m not in MODES]
        if bad:
            raise ConfigError(f"unknown mode(s) {', '.join(bad)}; modes: {', '.join(MODES)}.", file="command line",
                              where="--modes")
        from runner.errors import did_you_mean

        for n in names:
            if n not in LOADERS:
                raise ConfigError(f"unknown loader '{n}'.{did_you_mean(n, LOADERS)} Loaders: {', '.join(LOADERS)}.",
                                  file="command line", where="--loaders")
        entry = Entry(name="", experiment=args.experiment, overrides=tuple(words), loaders=tuple(names),
                      modes=tuple(modes))
        suite = Suite(name=Path(args.experiment).stem, entries=(entry,), own_ceilings=False,
                      **{**DEFAULTS, **given})
    if suite.repeat < 1:
        raise ConfigError(f"--repeat must be at least 1, got {suite.repeat}.", file="command line", where="--repeat")
    if suite.warmup % suite.window or suite.steps % suite.window:
        raise ConfigError(f"--warmup ({suite.warmup}) and --steps ({suite.steps}) must be multiples of --window "
                          f"({suite.window}).", file="command line" if given or args.suite is None else args.suite,
                          where="--window" if given or args.suite is None else "window")
    return suite


def command_line(args, suite) -> str:
    """The command that measures the same again, every setting written out."""
    if args.suite is not None:
        flags = [f"--{k}={getattr(args, k)}" for k in DEFAULTS if getattr(args, k) is not None]
        return shlex.join(["runner", "bench", "--suite", args.suite, *flags, *_words(args)])
    e = suite.entries[0]
    return shlex.join(["runner", "bench", e.experiment, "--loaders", ",".join(e.loaders), "--modes",
                       ",".join(e.modes), "--warmup", str(suite.warmup), "--steps", str(suite.steps), "--window",
                       str(suite.window), *(["--repeat", str(suite.repeat)] if suite.repeat > 1 else []),
                       *e.overrides])


def _validate(suite, entry):
    """The entry's experiment checked for this machine; a mistake names the suite file's line too."""
    from runner.bench.variants import DALI_LOADERS, variants
    from runner.errors import RunnerError
    from runner.validate import validate

    try:
        # a synthetic or torchvision bench runs where DALI is not installed, and makes no data it does not read
        v = validate(entry.experiment, list(entry.overrides), check_pipelines=bool(DALI_LOADERS & set(entry.loaders)))
        variants(v, list(entry.loaders))
    except RunnerError as e:
        if suite.path is None:
            raise
        raise type(e)(f"entry '{entry.name}': {e}", file=suite.path, line=entry.line) from None
    return v


def prepare(suite) -> list:
    """Validate every entry, then make the data and caches they read (each once)."""
    from runner.bench.variants import cache_dir, size_note, variants
    from runner.launch import ensure_data
    from runner.plan import data_root

    validated = [_validate(suite, e) for e in suite.entries]
    noted, made = False, set()
    for entry, v in zip(suite.entries, validated):
        if v.graphs and not noted:
            run_notes(v)
            noted = True
        if note := size_note(v, variants(v, list(entry.loaders))):
            console.note(note if suite.path is None else f"entry '{entry.name}': {note}")
        if set(entry.loaders) - {"synthetic"} and str(data_root(v.config.data)) not in made:
            ensure_data(v)
            made.add(str(data_root(v.config.data)))
        if "cache" in entry.loaders and str(cache_dir(v)) not in made:
            _ensure_cache(v, cache_dir(v))
            made.add(str(cache_dir(v)))
    return validated


def run(args) -> int:
    from runner.bench.report import columns, rows
    from runner.bench.suite import plan

    suite = load(args)
    validated = prepare(suite)
    jobs = plan(suite, validated)
    what = Path(args.suite).stem if args.suite else Path(args.experiment).stem
    out_dir = Path(args.out or f"bench-out/{what}-{time.strftime('%Y%m%d-%H%M%S')}")
    out_dir.mkdir(parents=True, exist_ok=True)
    parent = _parent_run(validated[0], suite, args)
    result = measure_rounds(suite, jobs, out_dir, parent)
    result.command = command_line(args, suite)
    files = write_files(result, out_dir, bench_md=args.suite is None)
    cols = columns(result)
    shown = [i for i, c in enumerate(cols) if c not in ("configuration", "errors")]  # in the .md; errors below
    console.out.print(console.table(_title(suite, validated, args), [cols[i] for i in shown],
                                    [[r[i] for i in shown] for r in rows(result)]))
    for r in result.rows:
        for mode, err in r.errors.items():
            console.error(err)
    failed = any(r.errors for r in result.rows)
    if parent:
        for f in files:
            parent.log_artifact(f)
        if result.ceiling:
            parent.log_metrics({"bench/ceiling_images_per_s": result.ceiling}, 0)
        parent.finish("FAILED" if failed else "FINISHED")
    console.out.print(f"wrote {', '.join(str(f) for f in files)}" +
                      (f"; MLflow parent run {parent.run_id}" if parent else ""))
    return 1 if failed else 0


def _title(suite, validated, args) -> str:
    rounds = f", median (min-max) of {suite.repeat} rounds" if suite.repeat > 1 else ""
    if args.suite is None:
        return (f"{Path(args.experiment).name}: {suite.steps} steps after {suite.warmup} warm-up, "
                f"batch {validated[0].config.data.batch_size}{rounds}")
    return f"suite {suite.name}: {suite.steps} steps after {suite.warmup} warm-up{rounds}"


def measure_rounds(suite, jobs, out_dir: Path, parent):
    """Every job once a round, with a progress bar over all of them and a line as each finishes."""
    from runner.bench.suite import BenchResult, run_rounds, stamp
    from runner.progress import progress_bar
    from runner.runinfo import git_state, versions

    measured = [j for j in jobs if j.mode]
    total, done = len(measured) * suite.repeat, 0
    started = stamp()
    with progress_bar(f"benchmarking: {suite.repeat} round(s) x {len(measured)} measurements") as progress:
        progress(0, total)

        def on_done(rnd: int, job, res) -> None:
            nonlocal done
            done += 1
            progress(done, total)
            console.out.print(f"round {rnd}/{suite.repeat}  {job.row.name} {job.mode}: " +
                              (f"{res['images_per_s']:,.0f} img/s" if res else "failed"), highlight=False)

        table_rows = run_rounds(jobs, repeat=suite.repeat, warmup=suite.warmup, steps=suite.steps,
                                window=suite.window, out_dir=out_dir, parent_run_id=parent.run_id if parent else None,
                                on_done=on_done)
    first = suite.entries[0]
    return BenchResult(experiment=first.experiment if suite.path is None else str(suite.path),
                       overrides=list(first.overrides if suite.path is None else suite.overrides),
                       machine=_machine(), rows=table_rows, started=started,
                       settings={"warmup": suite.warmup, "steps": suite.steps, "window": suite.window,
                                 "repeat": suite.repeat, **({"modes": list(first.modes)} if suite.path is None
                                                            else {})},
                       parent_run_id=parent.run_id if parent else None,
                       suite=None if suite.path is None else suite.name, software={**versions(), **git_state()},
                       repeat=suite.repeat)


def write_files(result, out_dir: Path, *, bench_md: bool) -> list[Path]:
    from runner.bench.report import chart
    from runner.bench.results import write_results
    from runner.machine import cpu_cores

    (out_dir / "bench.json").write_text(result.to_json())
    csv_path, md_path = write_results(result, out_dir, cpu_cores())
    files = [csv_path, md_path, out_dir / "bench.json", chart(result, out_dir / "bench.png")]
    if bench_md:
        (out_dir / "bench.md").write_text(md_path.read_text())
        files.append(out_dir / "bench.md")
    return files


def _ensure_cache(v, dst: Path) -> None:
    from runner.progress import progress_bar
    from runner.data.cache import build_cache
    from runner.plan import data_root

    with progress_bar(f"decoding {data_root(v.config.data)} into {dst}") as progress:
        build_cache(data_root(v.config.data), dst, max_side=256, progress=progress)


def _parent_run(v, suite, args):
    if not v.config.tracking.enabled:
        return None
    from runner.tracking import MlflowTracker, resolve_tracking_uri

    overrides = " ".join(suite.entries[0].overrides if suite.path is None else suite.overrides)
    name = f"bench suite {suite.name}" if suite.path is not None else f"bench {Path(args.experiment).stem}"
    t = MlflowTracker(resolve_tracking_uri(v.config.tracking.uri, v.loaded.at("tracking.uri")),
                      v.config.tracking.experiment, run_name=name,
                      tags={"runner.bench": "parent", "runner.overrides": overrides})
    t.start({"experiment": suite.entries[0].experiment if suite.path is None else str(suite.path),
             "overrides": overrides})
    return t
