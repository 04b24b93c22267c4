"""`runner bench` from the command line's request to the files written: the suite loaded and checked, its data
and caches made, every measurement run round after round, the results written and logged to the parent run."""
from __future__ import annotations

import dataclasses
import platform
import shlex
import time
from dataclasses import dataclass
from pathlib import Path

from runner import console
from runner.bench.report import chart
from runner.bench.results import write_results
from runner.bench.suite import BenchResult, plan, run_rounds, stamp
from runner.bench.suitefile import Entry, Suite, load_suite
from runner.bench.variants import DALI_LOADERS, DEFAULT_LOADERS, LOADERS, MODES, cache_dir, size_note, variants
from runner.config.load import is_override
from runner.config.sections import DataConfig, TrackingConfig
from runner.data.cache import build_cache
from runner.data.paths import data_root
from runner.errors import ConfigError, RunnerError, did_you_mean
from runner.machine import cpu_cores, gpu_info
from runner.progress import progress_bar
from runner.run.data import ensure_data
from runner.run.notes import run_notes
from runner.run.runinfo import git_state, versions
from runner.run.validate import validate
from runner.tracking import parent_run

DEFAULTS = {"repeat": 1, "warmup": 100, "steps": 300, "window": 25}


@dataclass(frozen=True, kw_only=True)
class BenchRequest:
    """What the command line asked for; None where it left the setting to the suite or the default."""
    experiment: str | None = None
    overrides: tuple[str, ...] = ()
    suite: str | None = None
    loaders: str | None = None
    modes: str | None = None
    repeat: int | None = None
    warmup: int | None = None
    steps: int | None = None
    window: int | None = None
    entries: str | None = None       # comma-separated entry names of the suite: measure only these
    out: str | None = None


@dataclass
class BenchOutcome:
    suite: Suite
    title: str
    result: BenchResult
    files: list[Path]
    parent_run_id: str | None

    @property
    def failed(self) -> bool:
        return any(r.errors for r in self.result.rows)


def run_bench(req: BenchRequest) -> BenchOutcome:
    """Measure the request's suite and write its files."""
    suite = load(req)
    validated = prepare(suite)
    jobs = plan(suite, validated)
    what = Path(req.suite).stem if req.suite else Path(req.experiment).stem
    out_dir = Path(req.out or f"bench-out/{what}-{time.strftime('%Y%m%d-%H%M%S')}")
    out_dir.mkdir(parents=True, exist_ok=True)
    first = validated[0]
    parent = _open_parent_run(first.config.tracking, first.loaded.at("tracking.uri"), suite, req)
    result = measure_rounds(suite, jobs, out_dir, parent)
    result.command = command_line(req, suite)
    files = write_files(result, out_dir, bench_md=req.suite is None)
    outcome = BenchOutcome(suite, _title(suite, validated, req), result, files, parent.run_id if parent else None)
    if parent:
        for f in files:
            parent.log_artifact(f)
        if result.ceiling:
            parent.log_metrics({"bench/ceiling_images_per_s": result.ceiling}, 0)
        parent.finish("FAILED" if outcome.failed else "FINISHED")
    return outcome


def _given(req: BenchRequest) -> dict[str, int]:
    return {k: getattr(req, k) for k in DEFAULTS if getattr(req, k) is not None}


def machine() -> dict[str, str]:
    cpu = next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name")),
               platform.processor()) if Path("/proc/cpuinfo").exists() else platform.processor()
    return {"host": platform.node(), "cpu": f"{cpu} ({cpu_cores()} cores)", **gpu_info()}


def _words(req: BenchRequest) -> list[str]:
    words = [w for w in ([req.experiment] if req.experiment else []) + list(req.overrides)]
    if req.suite is not None:
        files = [w for w in words if not is_override(w)]
        if files:
            raise ConfigError(f"'{files[0]}' is not an override: --suite names the experiments in its entries; "
                              "after it come key=value overrides for every entry (or vars.NAME=VALUE).",
                              file="command line")
        return words
    if not req.experiment or is_override(req.experiment):
        raise ConfigError("name an experiment file (runner bench EXP.yaml) or a suite (runner bench --suite "
                          "FILE.yaml).", file="command line")
    stray = [o for o in req.overrides if not is_override(o)]
    if stray:
        raise ConfigError(f"'{stray[0]}' is not an override; write key.path=value, for example "
                          "optimizer.lr=0.05 (one experiment file comes first).", file="command line")
    return list(req.overrides)


def load(req: BenchRequest) -> Suite:
    """The suite to measure: the file's, or one entry of the command line's experiment."""
    words = _words(req)
    given = _given(req)
    if req.suite is not None:
        for flag in ("loaders", "modes"):
            if getattr(req, flag) is not None:
                raise ConfigError(f"the suite's entries name their {flag}; --{flag} goes with one experiment.",
                                  file="command line", where=f"--{flag}")
        suite = dataclasses.replace(load_suite(Path(req.suite), words), **given)
        if req.entries is not None:
            suite = dataclasses.replace(suite, entries=_chosen_entries(suite, req.entries))
    else:
        if req.entries is not None:
            raise ConfigError("--entries picks entries of a suite; it goes with --suite FILE.yaml.",
                              file="command line", where="--entries")
        names = [n for n in (req.loaders or DEFAULT_LOADERS).split(",") if n]
        modes = [m for m in (req.modes or "loader,e2e").split(",") if m]
        bad = [m for m in modes if m not in MODES]
        if bad:
            raise ConfigError(f"unknown mode(s) {', '.join(bad)}; modes: {', '.join(MODES)}.", file="command line",
                              where="--modes")

        for n in names:
            if n not in LOADERS:
                raise ConfigError(f"unknown loader '{n}'.{did_you_mean(n, LOADERS)} Loaders: {', '.join(LOADERS)}.",
                                  file="command line", where="--loaders")
        entry = Entry(name="", experiment=req.experiment, overrides=tuple(words), loaders=tuple(names),
                      modes=tuple(modes))
        suite = Suite(name=Path(req.experiment).stem, entries=(entry,), own_ceilings=False,
                      **{**DEFAULTS, **given})
    if suite.repeat < 1:
        raise ConfigError(f"--repeat must be at least 1, got {suite.repeat}.", file="command line", where="--repeat")
    if suite.warmup % suite.window or suite.steps % suite.window:
        raise ConfigError(f"--warmup ({suite.warmup}) and --steps ({suite.steps}) must be multiples of --window "
                          f"({suite.window}).", file="command line" if given or req.suite is None else req.suite,
                          where="--window" if given or req.suite is None else "window")
    return suite


def _chosen_entries(suite: Suite, names: str) -> tuple:
    """The suite's entries named in `names` (comma-separated), in the suite's order."""
    chosen = [n for n in names.split(",") if n]
    known = [e.name for e in suite.entries]
    for n in chosen:
        if n not in known:
            raise ConfigError(f"the suite has no entry '{n}'.{did_you_mean(n, known)} Its entries: {', '.join(known)}.",
                              file="command line", where="--entries")
    if not chosen:
        raise ConfigError(f"--entries names no entry; the suite's entries: {', '.join(known)}.", file="command line",
                          where="--entries")
    return tuple(e for e in suite.entries if e.name in chosen)


def command_line(req: BenchRequest, suite: Suite) -> str:
    """The command that measures the same again, every setting written out."""
    if req.suite is not None:
        flags = [f"--{k}={v}" for k, v in _given(req).items()] + ([f"--entries={req.entries}"] if req.entries else [])
        return shlex.join(["runner", "bench", "--suite", req.suite, *flags, *_words(req)])
    e = suite.entries[0]
    return shlex.join(["runner", "bench", e.experiment, "--loaders", ",".join(e.loaders), "--modes",
                       ",".join(e.modes), "--warmup", str(suite.warmup), "--steps", str(suite.steps), "--window",
                       str(suite.window), *(["--repeat", str(suite.repeat)] if suite.repeat > 1 else []),
                       *e.overrides])


def _validate(suite: Suite, entry):
    """The entry's experiment checked for this machine; a mistake names the suite file's line too."""
    try:
        # a synthetic or torchvision bench runs where DALI is not installed, and makes no data it does not read
        v = validate(entry.experiment, list(entry.overrides), check_pipelines=bool(DALI_LOADERS & set(entry.loaders)))
        variants(v.loaded, list(entry.loaders))
    except RunnerError as e:
        if suite.path is None:
            raise
        raise type(e)(f"entry '{entry.name}': {e}", file=suite.path, line=entry.line) from None
    return v


def prepare(suite: Suite) -> list:
    """Validate every entry, then make the data and caches they read (each once)."""
    validated = [_validate(suite, e) for e in suite.entries]
    noted, made = False, set()
    for entry, v in zip(suite.entries, validated):
        if v.graphs and not noted:
            run_notes(v.notes, v.graphs)
            noted = True
        if note := size_note(v.loaded, variants(v.loaded, list(entry.loaders))):
            console.note(note if suite.path is None else f"entry '{entry.name}': {note}")
        if set(entry.loaders) - {"synthetic"} and str(data_root(v.config.data)) not in made:
            ensure_data(v)
            made.add(str(data_root(v.config.data)))
        if "cache" in entry.loaders and str(cache_dir(v.config.data)) not in made:
            _ensure_cache(v.config.data, cache_dir(v.config.data))
            made.add(str(cache_dir(v.config.data)))
    return validated


def _title(suite: Suite, validated: list, req: BenchRequest) -> str:
    rounds = f", median (min-max) of {suite.repeat} rounds" if suite.repeat > 1 else ""
    if req.suite is None:
        return (f"{Path(req.experiment).name}: {suite.steps} steps after {suite.warmup} warm-up, "
                f"batch {validated[0].config.data.batch_size}{rounds}")
    return f"suite {suite.name}: {suite.steps} steps after {suite.warmup} warm-up{rounds}"


def measure_rounds(suite: Suite, jobs: list, out_dir: Path, parent) -> BenchResult:
    """Every job once a round, with a progress bar over all of them and a line as each finishes."""
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
                       machine=machine(), rows=table_rows, started=started,
                       settings={"warmup": suite.warmup, "steps": suite.steps, "window": suite.window,
                                 "repeat": suite.repeat, **({"modes": list(first.modes)} if suite.path is None
                                                            else {})},
                       parent_run_id=parent.run_id if parent else None,
                       suite=None if suite.path is None else suite.name, software={**versions(), **git_state()},
                       repeat=suite.repeat)


def write_files(result: BenchResult, out_dir: Path, *, bench_md: bool) -> list[Path]:
    (out_dir / "bench.json").write_text(result.to_json())
    csv_path, md_path = write_results(result, out_dir, cpu_cores())
    files = [csv_path, md_path, out_dir / "bench.json", chart(result, out_dir / "bench.png")]
    if bench_md:
        (out_dir / "bench.md").write_text(md_path.read_text())
        files.append(out_dir / "bench.md")
    return files


def _ensure_cache(data: DataConfig, dst: Path) -> None:
    with progress_bar(f"decoding {data_root(data)} into {dst}") as progress:
        build_cache(data_root(data), dst, max_side=256, progress=progress)


def _open_parent_run(tracking: TrackingConfig, at: dict, suite: Suite, req: BenchRequest):
    overrides = " ".join(suite.entries[0].overrides if suite.path is None else suite.overrides)
    name = f"bench suite {suite.name}" if suite.path is not None else f"bench {Path(req.experiment).stem}"
    return parent_run(tracking, at, run_name=name, tags={"runner.bench": "parent", "runner.overrides": overrides},
                      params={"experiment": suite.entries[0].experiment if suite.path is None else str(suite.path),
                              "overrides": overrides})
