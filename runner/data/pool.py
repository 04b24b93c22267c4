"""Run a function over many files in a process pool, reporting progress as results arrive."""
from __future__ import annotations

import functools
import multiprocessing
import os
import signal
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from runner.machine import cpu_cores

T = TypeVar("T")
R = TypeVar("R")

# progress(done, total): called in the calling process, first with done=0
Progress = Callable[[int, int], None]


def process_alive(pid: int) -> bool:
    """Whether a process (e.g. the writer of a temporary folder) still runs on this machine."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, but another user's
        return True
    return True


def resolve_workers(workers: int | None) -> int:
    """`workers`, or the cores this process may use (the affinity mask, not the machine's total)."""
    return max(1, workers if workers else cpu_cores())


def _worker_setup(initializer: Callable[[], None] | None) -> None:
    # Ctrl-C reaches the whole process group: let the parent alone handle it (and terminate the
    # pool), instead of every worker printing a traceback
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if initializer:
        initializer()


def _indexed(fn: Callable[[Any], Any], pair: tuple[int, Any]) -> tuple[int, Any]:
    index, item = pair
    return index, fn(item)


def map_in_pool(fn: Callable[[T], R], items: Sequence[T], *, workers: int | None = None,
                progress: Progress | None = None, initializer: Callable[[], None] | None = None,
                start_method: str = "fork") -> list[R]:
    """[fn(item) for item in items], computed by `workers` processes; results keep the items' order.

    `fn` and `initializer` must be module-level functions (they are pickled by name). Use
    start_method="spawn" from a process that runs native threads (DALI, torch): a child forked while
    one of them holds a lock can hang for ever (seen here, in a rank diagnosing a decode error).
    """
    total = len(items)
    if progress:
        progress(0, total)
    if total == 0:
        return []
    workers = min(resolve_workers(workers), total)
    # small chunks keep the bar moving; big enough that the pipe is not the bottleneck
    chunksize = max(1, min(32, total // (workers * 16)))
    results: list[Any] = [None] * total
    context = multiprocessing.get_context(start_method)
    with context.Pool(workers, initializer=_worker_setup, initargs=(initializer,)) as pool:
        done = 0
        for index, result in pool.imap_unordered(functools.partial(_indexed, fn), enumerate(items), chunksize):
            results[index] = result
            done += 1
            if progress:
                progress(done, total)
    return results
