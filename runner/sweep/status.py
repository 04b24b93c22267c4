"""Where each child of a sweep stands, from what the launcher sees (a process, a SLURM job), what the child's last
attempt wrote when it ended (exit.json), and its run in the tracking store."""
from __future__ import annotations

import signal
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from runner.sweep.plan import ChildPlan, SweepPlan
from runner.tracking.store import RunRecord

QUEUED, RUNNING, DONE, FAILED, STOPPED, INVALID, NOT_STARTED = (
    "queued", "running", "done", "failed", "stopped", "invalid", "not started")
ENDED = (DONE, FAILED, STOPPED, INVALID)
CHILD_TAG = "runner.sweep.child"
CONFIG_EXIT = 2  # a RunnerError: the child's config, data or machine; the same again on a retry
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGKILL, signal.SIGUSR1, signal.SIGHUP)


@dataclass(frozen=True)
class Live:
    """What a launcher sees of a child's current attempt."""
    state: str                       # QUEUED or RUNNING
    job: str = ""                    # pid, or SLURM job id (ARRAY_TASK)
    detail: str = ""                 # SLURM's reason while it waits


@dataclass(frozen=True)
class ChildStatus:
    child: ChildPlan
    state: str
    reason: str = ""
    job: str = ""
    run: RunRecord | None = None

    @property
    def ended(self) -> bool:
        return self.state in ENDED

    @property
    def config_failure(self) -> bool:
        return self.state == INVALID or (self.state == FAILED and self.reason.startswith("config"))


def exit_reason(code: int) -> tuple[str, str]:
    """(state, reason) of an attempt that ended with this exit code (a shell's 128 + signal for a signal)."""
    if code == 0:
        return DONE, ""
    if code == CONFIG_EXIT:
        return FAILED, "config or data (exit 2): the same again on a retry"
    sig = -code if code < 0 else code - 128 if code > 128 else 0
    if sig in STOP_SIGNALS:
        return STOPPED, signal.Signals(sig).name
    return FAILED, f"exit {code}"


def child_status(plan: SweepPlan, child: ChildPlan, live: Live | None, run: RunRecord | None) -> ChildStatus:
    if child.error is not None:
        return ChildStatus(child, INVALID, "does not validate")
    if live is not None:
        return ChildStatus(child, live.state, live.detail, live.job, run)
    record = plan.exit_record(child)
    if record is not None:
        state, reason = exit_reason(int(record["exit_code"]))
        return ChildStatus(child, state, reason, str(record.get("job", "")), run)
    if run is None:
        return ChildStatus(child, NOT_STARTED)
    if run.status == "FINISHED":
        return ChildStatus(child, DONE, "", "", run)
    return ChildStatus(child, STOPPED, f"its job ended without an exit record (run {run.status})", "", run)


def newest_attempts(runs: Iterable[RunRecord]) -> dict[int, RunRecord]:
    """Child index -> its newest run: a child restarted from scratch left its earlier attempt behind."""
    out: dict[int, RunRecord] = {}
    for r in sorted(runs, key=lambda r: r.start_ms):
        tag = r.tags.get(CHILD_TAG, "")
        if tag.isdigit():
            out[int(tag)] = r
    return out


def sweep_status(plan: SweepPlan, live: Mapping[int, Live], runs: Mapping[int, RunRecord]) -> list[ChildStatus]:
    return [child_status(plan, c, live.get(c.index), runs.get(c.index)) for c in plan.children]


def counts_line(states: Iterable[str], total: int | None = None) -> str:
    """'4 children: 2 done, 1 running, 1 queued' (every state that has any, in a fixed order)."""
    counted = Counter(states)
    n = total if total is not None else sum(counted.values())
    order = (DONE, RUNNING, QUEUED, NOT_STARTED, STOPPED, FAILED, INVALID)
    parts = [f"{counted[s]} {s}" for s in order if counted[s]]
    return f"{n} {'child' if n == 1 else 'children'}: " + ", ".join(parts or ["none started"])
