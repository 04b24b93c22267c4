"""Progress for people and for logs: rich bars on a terminal, plain periodic lines otherwise."""
from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from runner import console

log = logging.getLogger("runner")


@contextmanager
def progress_bar(description: str) -> Iterator[Callable[[int, int], None]]:
    """A progress(done, total) callable: a rich bar on a terminal, a plain line per 10% otherwise."""
    if console.interactive():
        with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                      TimeRemainingColumn(), console=console.out) as bar:
            task = None

            def update(done: int, total: int) -> None:
                nonlocal task
                if task is None:  # created on first use: nothing shows when there is no work
                    task = bar.add_task(description, total=total)
                bar.update(task, completed=done, total=total)

            yield update
        return
    printed = -1

    def line(done: int, total: int) -> None:
        nonlocal printed
        tenth = 10 * done // max(1, total)
        if tenth > printed:
            printed = tenth
            console.out.print(f"{description}: {done}/{total}")

    yield line
