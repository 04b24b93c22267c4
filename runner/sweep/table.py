"""The table of a sweep's children (state, job, time, loss, top-1, run), redrawn in place on a terminal; on a log or
a pipe, one line per change of state and the table at the end."""
from __future__ import annotations

import time
from collections.abc import Sequence

from rich.live import Live as RichLive
from rich.markup import escape
from rich.table import Table

from runner import console
from runner.repro.compare import duration
from runner.sweep.status import DONE, FAILED, INVALID, RUNNING, STOPPED, ChildStatus, counts_line

STYLES = {DONE: "green", RUNNING: "cyan", FAILED: "red", INVALID: "red", STOPPED: "yellow"}


def _elapsed(s: ChildStatus, now_ms: float) -> str:
    run = s.run
    if run is None or not run.start_ms:
        return "-"
    end = run.end_ms if run.end_ms and run.status != "RUNNING" else now_ms
    return duration(max(0.0, (end - run.start_ms) / 1000))


def render(title: str, keys: Sequence[str], statuses: Sequence[ChildStatus]) -> Table:
    t = Table(title=escape(title), title_justify="left", header_style="bold")
    for column in ("#", *keys, "state", "job", "time", "loss", "top-1 %", "run"):
        t.add_column(escape(column), justify="right" if column in ("#", "time", "loss", "top-1 %") else "left")
    now = time.time() * 1000
    for s in statuses:
        values = s.child.values
        latest = s.run.latest if s.run is not None else {}
        state = s.state + (f" ({s.reason})" if s.reason else "")
        loss = latest.get("train/loss")
        top1 = latest.get("eval/top1")
        t.add_row(str(s.child.index), *(escape(v) for v in values), f"[{STYLES.get(s.state, 'default')}]"
                  f"{escape(state)}[/]", escape(s.job), _elapsed(s, now), "-" if loss is None else f"{loss:.3f}",
                  "-" if top1 is None else f"{100 * top1:.2f}", s.run.short if s.run is not None else "-")
    t.caption = counts_line(s.state for s in statuses)
    t.caption_justify = "left"
    return t


class SweepView:
    """Draws the table while the sweep runs; says each change of state on a log."""

    def __init__(self, title: str, keys: Sequence[str]):
        self.title, self.keys = title, list(keys)
        self.live = RichLive(console=console.out, refresh_per_second=2, transient=True) \
            if console.interactive() else None
        self.seen: dict[int, tuple[str, str]] = {}

    def __enter__(self) -> SweepView:
        if self.live is not None:
            self.live.start()
        return self

    def update(self, statuses: Sequence[ChildStatus]) -> None:
        if self.live is not None:
            self.live.update(render(self.title, self.keys, statuses))
            return
        for s in statuses:
            now = (s.state, s.reason)
            if self.seen.get(s.child.index) != now:
                self.seen[s.child.index] = now
                job = f", {s.job}" if s.job else ""
                reason = f" ({s.reason})" if s.reason else ""
                console.out.print(escape(f"child {s.child.index}{s.child.shown}: {s.state}{reason}{job}"))

    def close(self, statuses: Sequence[ChildStatus]) -> None:
        if self.live is not None:
            self.live.stop()
        console.out.print(render(self.title, self.keys, statuses))

    def __exit__(self, *exc) -> None:
        if self.live is not None and self.live.is_started:
            self.live.stop()
