"""`runner bench`: every loader variant x mode, each in a fresh process, gathered into one result."""
from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

from runner.bench.variants import Variant
from runner.errors import RunnerError


@dataclass
class Row:
    variant: str
    description: str
    loader: dict[str, Any] | None = None        # loader-only result
    e2e: dict[str, Any] | None = None           # end to end through runner's loop
    bare: dict[str, Any] | None = None          # end to end in the bare loop
    errors: dict[str, str] = field(default_factory=dict)

    def ratio(self, ceiling: float | None) -> float | None:
        if not ceiling or not self.e2e:
            return None
        return self.e2e["images_per_s"] / ceiling


@dataclass
class BenchResult:
    experiment: str
    overrides: list[str]
    machine: dict[str, str]
    settings: dict[str, Any]
    rows: list[Row]
    started: str
    parent_run_id: str | None = None

    @property
    def ceiling(self) -> float | None:
        row = next((r for r in self.rows if r.variant == "synthetic" and r.e2e), None)
        return row.e2e["images_per_s"] if row else None

    def to_json(self) -> str:
        return json.dumps({**asdict(self), "ceiling": self.ceiling}, indent=2, default=str)


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


def run_suite(experiment: str, overrides: list[str], variants: list[Variant], modes: list[str], *,
              warmup: int, steps: int, window: int, out_dir: Path, parent_run_id: str | None,
              on_progress: Callable[[str], None] = lambda s: None) -> list[Row]:
    rows = []
    log = out_dir / "bench.log"
    for variant in variants:
        row = Row(variant.name, variant.description)
        for mode in modes:
            if mode in ("bare", "loader") and variant.name == "synthetic":
                continue  # nothing to load: its loader-only rate is unbounded
            on_progress(f"{variant.name}: {mode}")
            spec = {"name": variant.name, "mode": mode, "experiment": experiment,
                    "overrides": [*overrides, *variant.overrides], "warmup": warmup, "steps": steps,
                    "window": window, "parent_run_id": parent_run_id}
            try:
                setattr(row, {"loader": "loader", "e2e": "e2e", "bare": "bare"}[mode], measure(spec, log))
            except RunnerError as e:
                row.errors[mode] = str(e)
        rows.append(row)
    return rows


def stamp() -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S")
