"""`runner tune` from the command line's request to the tuned file: the experiment checked, its data made,
the trials run with a progress bar, the winner written as an experiment that includes the one tuned."""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from runner import console
from runner.bench.suite import measure
from runner.bench.tune import (
    Trial,
    as_overrides,
    baseline_settings,
    check_output,
    decode_limit,
    default_output,
    knobs,
    search,
    write_tuned,
)
from runner.data.jpeg_cache import median_longer_side
from runner.data.manifest import find_manifest
from runner.data.paths import data_root, split_dir
from runner.errors import ConfigError, RunnerError
from runner.files import check_writable
from runner.machine import gpu_info
from runner.run.data import ensure_data
from runner.run.notes import run_notes
from runner.run.validate import validate


@dataclass(frozen=True, kw_only=True)
class TuneRequest:
    experiment: str
    overrides: list[str]
    output: str | None = None
    warmup: int = 50
    steps: int = 150
    window: int = 25
    max_trials: int = 12
    min_gain: float = 0.01


@dataclass
class TuneOutcome:
    title: str
    columns: list[str]
    rows: list[list[str]]
    notes: list[str] = field(default_factory=list)   # failed trials, a decode limit
    output: Path | None = None
    replacing: bool = False                           # the file an earlier runner tune wrote
    tuned: str = ""                                   # the tuned keys as overrides
    command: str = ""                                 # what runs the tuned setting


def run_tune(req: TuneRequest, show_trials: Callable[[TuneOutcome], None]) -> TuneOutcome:
    """Search this machine's fastest placement for the experiment's DALI train pipeline and write it;
    `show_trials` gets the trials' table and notes before the file is written (and checked)."""
    path, overrides = req.experiment, req.overrides
    output = check_writable(req.output if req.output else default_output(Path(path)))  # before the trials
    v = validate(path, overrides)
    replacing = check_output(output, v.loaded)
    run_notes(v.notes, v.graphs)
    if v.config.data.loader != "dali" or "train" not in v.graphs:
        raise ConfigError("runner tune tunes the DALI train pipeline; this experiment's data.loader is "
                          f"'{v.config.data.loader}'.", file=v.loaded.path, where="data.loader")
    ensure_data(v)
    accelerator = v.target.accelerator
    ks = knobs(v.loaded, accelerator, v.processes)
    result = _trials(req, ks, baseline_settings(v.loaded, accelerator, ks, v.processes))
    title, columns, rows = trial_table(path, req.steps, ks, result)
    notes = [f"trial {t.settings} failed: {t.error}" for t in result.trials if t.error]
    train_dir = split_dir(v.config.data, "train")
    limit = decode_limit(result.best, data_root(v.config.data), (find_manifest(train_dir) or (None, None))[1],
                         median_longer_side(train_dir))
    if limit:
        notes.append(limit)
    machine = gpu_info().get("gpu.model") or "CPU"
    means = " (means of two runs each)" if result.best.repeats else ""
    measured = (f"{machine}, {time.strftime('%Y-%m-%d')}: {result.best.images_per_s:,.0f} img/s training, "
                f"{100 * result.gain:+.1f}% over the experiment as written ({result.baseline.images_per_s:,.0f}){means}.")
    outcome = TuneOutcome(title=title, columns=columns, rows=rows, notes=notes, output=output, replacing=replacing,
                          tuned=" ".join(as_overrides(result.best.settings)))
    show_trials(outcome)
    outcome.command = write_tuned(output, Path(path), overrides, result, measured)
    return outcome


def _trials(req: TuneRequest, ks: list, start: dict[str, Any]):
    """The search, each trial an end-to-end measurement in a fresh process, under a progress bar."""
    path, overrides = req.experiment, req.overrides
    out_dir = Path("bench-out") / f"tune-{Path(path).stem}-{time.strftime('%Y%m%d-%H%M%S')}"
    out_dir.mkdir(parents=True, exist_ok=True)
    spec = {"mode": "e2e", "experiment": path, "warmup": req.warmup, "steps": req.steps,
            "window": req.window, "parent_run_id": None}

    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console.out, disable=not console.interactive()) as bar:
        task = bar.add_task("tuning", total=req.max_trials + 2)  # + the winner and the baseline again

        def evaluate(settings: dict) -> Trial:
            label = ", ".join(f"{k.rsplit('.', 1)[-1]}={val}" for k, val in settings.items())
            bar.update(task, description=f"trial: {label}")
            if not console.interactive():
                console.out.print(f"trial {int(bar.tasks[0].completed) + 1}: {label}")
            trial = Trial(settings)
            try:
                validate(path, [*overrides, *as_overrides(settings)])
                trial.result = measure({**spec, "name": label, "overrides": [*overrides, *as_overrides(settings)]},
                                       out_dir / "tune.log")
            except RunnerError as e:
                trial.error = str(e)
            bar.advance(task)
            return trial

        return search(ks, start, evaluate, max_trials=req.max_trials, min_gain=req.min_gain)


def trial_table(path: str, steps: int, ks: list, result) -> tuple[str, list[str], list[list[str]]]:
    """Title, columns and one row per trial: its settings, throughput, data wait (the host's, the training stream's),
    GPU and host CPU use, and role."""
    rows = []
    for t in result.trials:
        r = t.result or {}
        role = ", ".join(name for name, is_it in (("best", t is result.best), ("as written", t is result.baseline))
                         if is_it)
        if t.repeats:
            role += f" (mean of {1 + len(t.repeats)}: {t.images_per_s:,.0f})"
        rows.append([*(str(t.settings[k.key]) for k in ks), f"{r['images_per_s']:,.0f}" if r else "failed",
                     f"{100 * r['data_wait_share']:.1f}%" if r else "-",
                     f"{100 * r['stream_wait_share']:.1f}%" if r.get("stream_wait_share") is not None else "-",
                     f"{r['gpu_util_pct']:.0f}%" if r.get("gpu_util_pct") is not None else "-",
                     f"{r['cpu_busy_pct']:.0f}%" if r.get("cpu_busy_pct") is not None else "-",
                     "again" if t.repeat else role])
    return (f"runner tune {path}: {len(result.trials)} trials, {steps} steps each",
            [k.label for k in ks] + ["train img/s", "data wait", "stream wait", "GPU util", "host CPU busy", ""], rows)

