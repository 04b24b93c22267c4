"""`runner bench`: every (row, mode) measured in a fresh process, round after round, gathered into one result.

Rounds alternate the measurements (round 1 runs each once, then round 2, ...) so that a machine's drift (clocks,
heat, a neighbour's load) falls on every row alike; each ceiling is measured again every round and a row's share
of it is taken round by round, against the ceiling of that same round.
"""
from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from runner.bench.stats import Spread, median_result, part_waits, ratios, spread
from runner.bench.suitefile import Suite
from runner.bench.variants import ceiling_label, step_settings, variants
from runner.errors import RunnerError


@dataclass
class Row:
    variant: str
    description: str
    entry: str = ""                  # the suite entry ("" for one experiment)
    experiment: str = ""
    overrides: list[str] = field(default_factory=list)   # the entry's, without the variant's own
    settings: dict[str, Any] = field(default_factory=dict)  # what the training step computes (step_settings)
    ceiling: str | None = None       # name of the row this row's share is taken against
    is_ceiling: bool = False
    runs: dict[str, list[dict | None]] = field(default_factory=dict)  # mode -> one result a round (None: failed)
    errors: dict[str, str] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return f"{self.entry}/{self.variant}" if self.entry and not self.is_ceiling else self.entry or self.variant

    def result(self, mode: str) -> dict[str, Any] | None:
        """The median over the rounds (a single run as it was)."""
        return median_result(self.runs.get(mode, []))

    @property
    def loader(self) -> dict[str, Any] | None:
        return self.result("loader")

    @property
    def e2e(self) -> dict[str, Any] | None:
        return self.result("e2e")

    @property
    def bare(self) -> dict[str, Any] | None:
        return self.result("bare")

    def stat(self, mode: str, key: str) -> Spread | None:
        return spread([(r or {}).get(key) for r in self.runs.get(mode, [])])

    def waited_pipelines(self) -> list[str]:
        """The pipelines of a hybrid whose waits its end-to-end runs measured (stats.part_waits); [] otherwise."""
        return list(dict.fromkeys(name for run in self.runs.get("e2e", []) if run for name in part_waits(run)))


@dataclass
class BenchResult:
    experiment: str
    overrides: list[str]
    machine: dict[str, str]
    settings: dict[str, Any]
    rows: list[Row]
    started: str
    parent_run_id: str | None = None
    suite: str | None = None         # the suite's name; None for one experiment
    command: str = ""                # the command line that repeats it
    software: dict[str, str] = field(default_factory=dict)
    repeat: int = 1

    def row(self, name: str) -> Row | None:
        return next((r for r in self.rows if r.name == name), None)

    @property
    def ceiling(self) -> float | None:
        """img/s of the first ceiling (the median over the rounds)."""
        row = next((r for r in self.rows if r.is_ceiling and r.e2e), None)
        return row.e2e["images_per_s"] if row else None

    def shares(self, row: Row, mode: str = "e2e") -> list[float | None]:
        """Round by round: the row's training img/s in `mode` (e2e, or beside the loader) over its ceiling's in
        the same round."""
        ceiling = self.row(row.ceiling) if row.ceiling else None
        if ceiling is None or ceiling is row:
            return []
        return ratios(row.runs.get(mode, []), ceiling.runs.get("e2e", []))

    def share(self, row: Row, mode: str = "e2e") -> Spread | None:
        return spread(self.shares(row, mode))

    def to_json(self) -> str:
        rows = []
        for r in self.rows:
            d = asdict(r)
            d.update(name=r.name, loader=r.loader, e2e=r.e2e, bare=r.bare, beside=r.result("beside"),
                     share=_as_dict(self.share(r)), share_by_round=self.shares(r),
                     share_beside=_as_dict(self.share(r, "beside")))
            rows.append(d)
        return json.dumps({**asdict(self), "rows": rows, "ceiling": self.ceiling}, indent=2, default=str)


def _as_dict(s: Spread | None) -> dict | None:
    return asdict(s) if s else None


@dataclass(frozen=True)
class Job:
    """One measurement, run once every round."""
    row: Row
    mode: str
    overrides: tuple[str, ...]


def plan(suite: Suite, validated: list) -> list[Job]:
    """The rows of a suite and what each round measures, in order: an entry's ceiling (when no earlier entry
    measured one of the same step settings) before its rows."""
    every = [step_settings(v) for v in validated]
    ceilings: dict[str, Row] = {}
    jobs: list[Job] = []
    for entry, v, settings in zip(suite.entries, validated, every):
        key = json.dumps(settings, sort_keys=True)
        chosen = variants(v.loaded, list(entry.loaders))
        ceiling_name = None
        if suite.own_ceilings:
            if key not in ceilings:
                synthetic = variants(v.loaded, ["synthetic"])[0]
                label = ceiling_label(settings, every)
                # an entry that measures only the ceiling (e.g. the cost of a recipe's step) gives the row its name
                name = f"{entry.name} (ceiling: {label})" if list(entry.loaders) == ["synthetic"] else f"ceiling ({label})"
                row = Row("synthetic", synthetic.description, entry=name,
                          experiment=entry.experiment, overrides=list(entry.overrides), settings=settings,
                          is_ceiling=True)
                row.ceiling = row.name
                ceilings[key] = row
                jobs.append(Job(row, "e2e", (*entry.overrides, *synthetic.overrides)))
            ceiling_name = ceilings[key].name
        elif "synthetic" in entry.loaders:
            ceiling_name = "synthetic"
        for variant in chosen:
            if suite.own_ceilings and variant.name == "synthetic":
                continue  # the ceiling row above is this measurement
            row = Row(variant.name, variant.description, entry=entry.name, experiment=entry.experiment,
                      overrides=list(entry.overrides), settings=settings, ceiling=ceiling_name,
                      is_ceiling=variant.name == "synthetic" and not suite.own_ceilings)
            # nothing to load for the ceiling: its loader-only rate is unbounded, and it has no bare loop to match
            modes = [m for m in entry.modes if variant.name != "synthetic" or m == "e2e"]
            jobs += [Job(row, mode, (*entry.overrides, *variant.overrides)) for mode in modes]
            if not modes:
                jobs.append(Job(row, "", ()))  # the row still shows, measured in no mode
    return jobs


def rows_of(jobs: list[Job]) -> list[Row]:
    """Each row once, in the order of its first measurement."""
    out: list[Row] = []
    for j in jobs:
        if all(r is not j.row for r in out):
            out.append(j.row)
    return out


def measure(spec: dict[str, Any], log: Path) -> dict[str, Any]:
    """Run one measurement in a child process; its output goes to `log`."""
    with tempfile.TemporaryDirectory(prefix="runner-bench-") as tmp:
        spec_file, out_file = Path(tmp) / "spec.json", Path(tmp) / "out.json"
        spec_file.write_text(json.dumps({**spec, "scratch": str(Path(tmp) / "checkpoints")}))
        with log.open("a") as f:
            f.write(f"\n==== {spec['name']} {spec['mode']} {' '.join(spec['overrides'])}\n")
            f.flush()
            proc = subprocess.run([sys.executable, "-m", "runner.bench.measure", str(spec_file), str(out_file)],
                                  stdout=f, stderr=subprocess.STDOUT)
        result = json.loads(out_file.read_text()) if out_file.exists() else {}
        if "error" in result:
            raise RunnerError(f"{spec['name']} ({spec['mode']}): {result['error']}")
        if proc.returncode != 0 or not result:
            raise RunnerError(f"{spec['name']} ({spec['mode']}) failed with exit code {proc.returncode}; "
                              f"its output is in {log}.")
        return result


def run_rounds(jobs: list[Job], *, repeat: int, warmup: int, steps: int, window: int, out_dir: Path,
               parent_run_id: str | None,
               on_done: Callable[[int, Job, dict | None], None] = lambda r, j, res: None) -> list[Row]:
    """Measure every job once a round, `repeat` rounds; each row keeps one result per round and mode."""
    log = out_dir / "bench.log"
    measured = [j for j in jobs if j.mode]
    for row in rows_of(jobs):
        row.runs = {j.mode: [] for j in measured if j.row is row}
    for rnd in range(1, repeat + 1):
        with log.open("a") as f:
            f.write(f"\n---- round {rnd}/{repeat}\n")
        for job in measured:
            spec = {"name": job.row.name, "mode": job.mode, "experiment": job.row.experiment,
                    "overrides": list(job.overrides), "warmup": warmup, "steps": steps, "window": window,
                    "parent_run_id": parent_run_id, "round": rnd}
            try:
                result = measure(spec, log)
            except RunnerError as e:
                result = None
                job.row.errors.setdefault(job.mode, str(e))
            job.row.runs[job.mode].append(result)
            on_done(rnd, job, result)
    return rows_of(jobs)


def stamp() -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S")
