"""Repeated measurements summarised as people quote them: the median and the range (min-max) of N runs."""
from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Spread:
    """The median, smallest and largest of `n` values."""
    median: float
    low: float
    high: float
    n: int


def spread(values: list[float | None]) -> Spread | None:
    """The Spread of the values that were measured (None: a run that failed or did not measure it)."""
    got = [float(x) for x in values if x is not None]
    if not got:
        return None
    return Spread(statistics.median(got), min(got), max(got), len(got))


def ratios(runs: list[dict | None], references: list[dict | None], key: str = "images_per_s") -> list[float | None]:
    """Round by round, a run's `key` over its reference's from the same round (None where either is missing)."""
    out: list[float | None] = []
    for run, ref in zip(runs, references):
        ok = run and ref and run.get(key) and ref.get(key)
        out.append(run[key] / ref[key] if ok else None)
    return out


def median_result(runs: list[dict | None]) -> dict[str, Any] | None:
    """One result standing for all rounds: each number the median over the runs that measured it, anything else
    (shapes, dtypes) as the first run had it; `runs` says how many rounds it came from."""
    got = [r for r in runs if r]
    if not got:
        return None
    out: dict[str, Any] = {}
    for key, first in got[0].items():
        numbers = [r.get(key) for r in got]
        if isinstance(first, (int, float)) and not isinstance(first, bool) and \
                all(isinstance(x, (int, float)) for x in numbers):
            out[key] = first if len(set(numbers)) == 1 else statistics.median(numbers)
        else:
            out[key] = first
    out["runs"] = len(got)
    return out


PART_WAIT_KEY = "data_wait_share."  # + a hybrid pipeline's name: a measurement's key for that pipeline's wait


def part_waits(run: dict) -> dict[str, float]:
    """A hybrid's data wait per pipeline in one measurement (runner.bench.measure.end_to_end's PART_WAIT_KEY
    keys), in the order they are read: {"train": 0.01, "train.hybrid": 0.07}."""
    return {k.removeprefix(PART_WAIT_KEY): v for k, v in run.items() if k.startswith(PART_WAIT_KEY) and v is not None}
