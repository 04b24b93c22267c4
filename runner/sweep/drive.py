"""Running a sweep's children to their end: in slots on this machine, or submitted to SLURM and followed, with the
table of children redrawn as they go and the parent run's result landed each time one ends."""
from __future__ import annotations

import signal
import time
from collections.abc import Callable

from runner import console
from runner.config.sections import LauncherConfig
from runner.machine import cpu_core_ids, visible_gpu_ids
from runner.sweep.local import LocalLauncher, Slot, plan_slots
from runner.sweep.plan import ChildPlan, SweepPlan
from runner.sweep.slurm import live
from runner.sweep.status import FAILED, STOPPED, ChildStatus, Live, newest_attempts, sweep_status
from runner.sweep.table import SweepView
from runner.tracking.parent import set_run_tags
from runner.tracking.store import RunRecord, find_runs

POLL_S = 0.5         # processes and the table
RUNS_EVERY_S = 5.0   # the children's runs in the store (loss, top-1, status)
SLURM_EVERY_S = 5.0  # squeue


class Runs:
    """The children's newest runs in the store, read at most every RUNS_EVERY_S; a store that does not answer keeps
    the last reading (its children go on, their tracking data waits)."""

    def __init__(self, uri: str | None, parent_id: str | None):
        self.uri, self.parent_id = uri, parent_id
        self.last: dict[int, RunRecord] = {}
        self.read_at = 0.0

    def get(self, *, now: bool = False) -> dict[int, RunRecord]:
        if self.uri is None or self.parent_id is None:
            return {}
        if now or time.monotonic() - self.read_at >= RUNS_EVERY_S:
            try:
                self.last = newest_attempts(find_runs(self.uri, parent=self.parent_id, limit=10_000))
            except Exception:  # noqa: BLE001 - see the class docstring
                pass
            self.read_at = time.monotonic()
        return self.last


class StopSignals:
    """SIGINT/SIGTERM to the sweep: the first is passed on to the children (they checkpoint and stop), a second
    kills them."""

    def __init__(self):
        self.signum: int | None = None
        self.count = 0
        self._previous: dict = {}

    def __enter__(self) -> StopSignals:
        for sig in (signal.SIGINT, signal.SIGTERM):
            self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum, frame) -> None:
        self.signum = self.signum or signum
        self.count += 1

    def __exit__(self, *exc) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)


def run_local(plan: SweepPlan, slots: list[Slot], todo: list[ChildPlan], view: SweepView, runs: Runs,
              on_end: Callable[[], None]) -> tuple[list[ChildStatus], int | None]:
    """Run `todo` in the slots until every one has ended; returns the final statuses and the signal that stopped
    the sweep (None when it ran to its end)."""
    launcher = LocalLauncher(plan, slots)
    queue = list(todo)
    with StopSignals() as stop:
        handled = 0
        while queue or launcher.running:
            if stop.signum is None:
                while queue and launcher.free:
                    launcher.start(queue.pop(0))
            elif handled < stop.count:
                handled = stop.count
                queue.clear()
                launcher.stop(stop.signum)
            ended = launcher.poll()
            queued = {c.index: Live("queued", detail="waiting for a slot") for c in queue}
            statuses = sweep_status(plan, {**queued, **launcher.live()}, runs.get(now=bool(ended)))
            view.update(statuses)
            if ended:
                end_abandoned_runs(plan, statuses)
                on_end()
            time.sleep(POLL_S)
        statuses = sweep_status(plan, {}, runs.get(now=True))
    return statuses, stop.signum


def follow_slurm(plan: SweepPlan, view: SweepView, runs: Runs, on_end: Callable[[], None]) -> tuple[
        list[ChildStatus], bool]:
    """Follow the submitted children until SLURM holds none; a Ctrl-C leaves them running. Returns the statuses
    and whether the sweep was left (detached) before its end."""
    holding: set[int] = set()
    with StopSignals() as stop:
        while True:
            held = live(plan)
            ended = holding - set(held)
            holding = set(held)
            statuses = sweep_status(plan, held, runs.get(now=bool(ended)))
            view.update(statuses)
            if ended:
                end_abandoned_runs(plan, statuses)
                on_end()
            if not held:
                return sweep_status(plan, {}, runs.get(now=True)), False
            waited = 0.0
            while waited < SLURM_EVERY_S and stop.signum is None:
                time.sleep(POLL_S)
                waited += POLL_S
            if stop.signum is not None:
                return statuses, True


def end_abandoned_runs(plan: SweepPlan, statuses: list[ChildStatus]) -> None:
    """A child killed outright (SIGKILL, a lost node) could not end its run: the store would show it running. Its
    exit record says how it ended; the run says so too (KILLED, or FAILED), and a resume sets it running again."""
    for s in statuses:
        if s.state in (STOPPED, FAILED) and s.run is not None and s.run.status == "RUNNING" and plan.uri:
            try:
                set_run_tags(plan.uri, s.run.run_id, {}, status="KILLED" if s.state == STOPPED else "FAILED")
            except Exception as e:  # noqa: BLE001 - the store may be away; the next landing reads it as it is
                console.note(f"could not mark child {s.child.index}'s run {s.run.run_id} as ended: {e}")


def launcher_slots(launcher: LauncherConfig, at) -> list[Slot]:
    return plan_slots(launcher, visible_gpu_ids(), cpu_core_ids(), at)


def announce(plan: SweepPlan, launcher: LauncherConfig, slots: list[Slot] | None) -> None:
    where = f"sweep folder {plan.folder} (each child's experiment.yaml, log.txt and checkpoints)"
    if slots is not None:
        console.note(f"{len(slots)} at a time on this machine, " + "; ".join(
            f"slot {i + 1}: {s.describe()}" for i, s in enumerate(slots)) + f"; {where}")
    else:
        console.note(f"SLURM, up to {launcher.parallel or 'all'} at a time; {where}")
