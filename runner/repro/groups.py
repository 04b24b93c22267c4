"""Runs into groups: runs whose compared params agree form one group, and its runs differ only by seed."""
from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from string import ascii_uppercase

from runner.config.frozen import IDENTITY_TAGS, PLACE_KEYS
from runner.errors import RunnerError, did_you_mean, list_names
from runner.tracking.store import RunRecord

# params that say which run it is and where it was kept (its name, store, checkpoint folder, parent, what it
# reproduces), not how it trains; `runner reproduce` logs to the original's store, so its tracking.uri may be set
IDENTITY_PARAMS = frozenset({*PLACE_KEYS, *(f"tracking.tags.{t}" for t in IDENTITY_TAGS)})
# the experiment's seed and every seed runinfo.seeds derives from it: repeats of one setting differ in these
SEED_PARAMS = frozenset({"seed", "seed.torch", "seed.reader_shuffle", "seed.dali_train", "seed.dali_eval"})
MISSING = "-"  # a run without the param


def differing_params(runs: Sequence[RunRecord]) -> list[str]:
    """Param keys whose values are not the same in every run (a missing key counts as a value).

    An empty mapping is logged as "{}" (tracking.flatten), and a filled one as its keys: "{}" is
    the same as no keys at all, so it is not a difference by itself.
    """
    params = [{k: v for k, v in r.params.items() if v != "{}"} for r in runs]
    keys = sorted({k for p in params for k in p} - IDENTITY_PARAMS)
    return [k for k in keys if len({p.get(k) for p in params}) > 1]


def grouping_keys(runs: Sequence[RunRecord], group_by: Sequence[str] | None) -> list[str]:
    """The params that define the groups: `group_by` as given (each checked to be a param of some run),
    or, with None, every differing param except the seeds."""
    if group_by is None:
        return [k for k in differing_params(runs) if k not in SEED_PARAMS]
    known = {k for r in runs for k in r.params} - IDENTITY_PARAMS
    for key in group_by:
        if key not in known:
            ends = sorted(k for k in known if k.endswith(f".{key}"))
            hint = f" Did you mean {' or '.join(repr(k) for k in ends[:3])}?" if ends else did_you_mean(key, known)
            differ = list_names(differing_params(runs), 12) or "none"
            raise RunnerError(f"no run has a param '{key}'.{hint} Params that differ between these runs: {differ}.",
                              file="command line", where="--group-by")
    return list(dict.fromkeys(group_by))


def group_name(index: int) -> str:
    """A, B, ..., Z, AA, AB, ...: short keys for table columns and chart legends."""
    for width in itertools.count(1):
        if index < 26 ** width:
            break
        index -= 26 ** width
    return "".join(ascii_uppercase[(index // 26 ** p) % 26] for p in reversed(range(width)))


@dataclass(frozen=True)
class Group:
    name: str                               # A, B, ...
    values: tuple[tuple[str, str], ...]     # (param, value) every member shares
    members: tuple[Compared, ...]

    @property
    def label(self) -> str:
        return " ".join(f"{k}={v}" for k, v in self.values) or "all runs"

    @property
    def finished(self) -> tuple[Compared, ...]:
        return tuple(c for c in self.members if c.run.status == "FINISHED")

    def finals(self, metric: str) -> list[float]:
        """The metric's last value in each finished run that logged it."""
        return [c.last[metric] for c in self.finished if metric in c.last]


def group_runs(compared: Sequence[Compared], keys: Sequence[str]) -> list[Group]:
    """One group per distinct combination of the `keys` params, in the order the runs come."""
    by_values: dict[tuple[str, ...], list[Compared]] = {}
    for c in compared:
        by_values.setdefault(tuple(c.run.params.get(k, MISSING) for k in keys), []).append(c)
    return [Group(name=group_name(i), values=tuple(zip(keys, values)), members=tuple(members))
            for i, (values, members) in enumerate(by_values.items())]


def varying_within(groups: Sequence[Group], keys: Sequence[str]) -> list[str]:
    """Params other than the grouping keys and the seeds whose values differ inside some group."""
    out: set[str] = set()
    for g in groups:
        out.update(differing_params([c.run for c in g.members]))
    return sorted(out - set(keys) - SEED_PARAMS)


@dataclass(frozen=True)
class Compared:
    run: RunRecord
    label: str                                        # the run's name, with its id when repeated
    last: dict[str, float]                            # LAST metric -> its last value
    curves: dict[str, list[tuple[int, float]]]        # CURVES metric -> (step, value)
