"""A sweep's result as it lands: compare's grouped table over the children finished so far, with how many are still
to come, on the parent run (its description, compare.md and compare.png, counts as metrics) and in
`runner compare PARENT_RUN_ID`.

Children land their own result when they end, so the parent run is up to date even when nothing follows the sweep
(a SLURM sweep submitted and left).
"""
from __future__ import annotations

import logging
import tempfile
from dataclasses import dataclass
from pathlib import Path

from runner.errors import RunnerError
from runner.repro.report import build_report, write_report
from runner.sweep.status import (
    CHILD_TAG,
    DONE,
    FAILED,
    INVALID,
    NOT_STARTED,
    RUNNING,
    STOPPED,
    counts_line,
    newest_attempts,
)
from runner.tracking.parent import log_sweep_results
from runner.tracking.store import RunRecord, find_runs, get_run

log = logging.getLogger("runner.sweep")

PARENT_TAG = "runner.sweep"          # "parent" on a sweep's parent run
GROUP_BY_TAG = "runner.sweep.group_by"  # the swept keys other than the seed, comma-separated
INVALID_TAG = "runner.sweep.invalid"   # children that never started: they do not validate
DIR_TAG = "runner.sweep.dir"           # the sweep's folder (sweep.json)
RUN_STATES = {"FINISHED": DONE, "RUNNING": RUNNING, "SCHEDULED": RUNNING, "KILLED": STOPPED, "FAILED": FAILED}


@dataclass(frozen=True)
class Landed:
    """A sweep's children as the store has them."""
    parent: RunRecord
    total: int
    runs: dict[int, RunRecord]       # child index -> its newest attempt
    invalid: tuple[int, ...]

    @property
    def states(self) -> list[str]:
        out = [RUN_STATES.get(r.status, RUNNING) for r in self.runs.values()]
        out += [INVALID] * len(self.invalid)
        return out + [NOT_STARTED] * max(0, self.total - len(out))

    @property
    def all_ended(self) -> bool:
        return all(s not in (RUNNING, NOT_STARTED) for s in self.states)

    @property
    def counts(self) -> str:
        return counts_line(self.states, self.total).replace(NOT_STARTED, "not started yet")

    @property
    def group_by(self) -> list[str] | None:
        keys = [k for k in self.parent.tags.get(GROUP_BY_TAG, "").split(",") if k]
        params = {k for r in self.runs.values() for k in r.params}
        return keys if keys and set(keys) <= params else None  # a key written unlike its param: compare's own


def is_sweep_parent(run: RunRecord) -> bool:
    return run.tags.get(PARENT_TAG) == "parent" and "sweep.runs" in run.params


def read_landed(uri: str, parent: RunRecord) -> Landed:
    children = find_runs(uri, parent=parent.run_id, limit=10_000)
    invalid = tuple(int(i) for i in parent.tags.get(INVALID_TAG, "").split(",") if i.isdigit())
    return Landed(parent=parent, total=int(parent.params.get("sweep.runs", len(children))),
                  runs=dict(sorted(newest_attempts(r for r in children if CHILD_TAG in r.tags).items())),
                  invalid=invalid)


def land(uri: str, parent_id: str, *, status: str | None = None) -> Landed:
    """Write the grouped table over the finished children, and the counts, to the parent run; its status too once
    every child has ended (`status` forces one: KILLED when the sweep was stopped)."""
    landed = read_landed(uri, get_run(uri, parent_id))
    states = landed.states
    metrics = {f"sweep/{s.replace(' ', '_')}": float(states.count(s))
               for s in (DONE, RUNNING, NOT_STARTED, STOPPED, FAILED, INVALID)}
    metrics["sweep/ended"] = float(sum(s in (DONE, FAILED, STOPPED, INVALID) for s in states))
    if status is None and landed.all_ended:
        status = "FINISHED" if all(s == DONE for s in states) else "FAILED"
    with tempfile.TemporaryDirectory(prefix="runner-sweep-") as tmp:
        files: list[Path] = []
        note = f"**runner sweep**: {landed.counts}."
        if landed.runs:
            report = build_report(list(landed.runs.values()), landed.group_by, [landed.counts])
            files = list(write_report(report, Path(tmp)))
            note = report.markdown()
        log_sweep_results(uri, parent_id, files=files, note=note, metrics=metrics,
                          tags={"runner.sweep.counts": landed.counts}, status=status)
    return landed


def land_quietly(uri: str, parent_id: str, **kwargs) -> Landed | None:
    """land(), with a store that does not answer (or refuses) logged as a warning: the next landing catches up."""
    try:
        return land(uri, parent_id, **kwargs)
    except (RunnerError, Exception) as e:  # noqa: BLE001 - the sweep goes on without its parent's summary
        log.warning("the sweep's results were not written to parent run %s at %s: %s", parent_id, uri,
                    str(e).splitlines()[0][:240] if str(e) else type(e).__name__)
        return None
