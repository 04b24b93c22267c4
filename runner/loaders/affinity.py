"""The training thread's claim on the CPU against DALI's threads: cores kept for it, DALI's CPU threads pinned
to the rest (data.reserved_cores), or DALI's threads made nicer than it (data.dali_nice).

With torch.compile a step is short and launched from Python. When DALI's decode threads fill every
core, the scheduler preempts the thread that feeds the GPU, and the GPU idles although the next batch
is ready. DALI pins its worker threads to $DALI_AFFINITY_MASK when a pipeline is built with
set_affinity=True; the training thread, and the threads it starts afterwards (autograd's among them),
is pinned to the reserved cores. Reserving takes cores from decoding; a nice value leaves DALI every core
and only lets the training thread preempt its threads when it wakes.
"""
from __future__ import annotations

import os

from runner.errors import ConfigError

PROCESS_CORES = sorted(os.sched_getaffinity(0))  # taken before this module pins anything
_split: dict[tuple[int, int, int], tuple[list[int], list[int]]] = {}


def core_split(reserved: int, local_rank: int, local_world: int, at: dict) -> tuple[list[int], list[int]]:
    """(training cores, DALI cores): this process's slice of the cores, taken once, before any pinning."""
    key = (reserved, local_rank, local_world)
    if key not in _split:
        cores = PROCESS_CORES
        per = len(cores) // max(1, local_world)
        mine = cores[local_rank * per:(local_rank + 1) * per] or cores
        if reserved >= len(mine):
            raise ConfigError(f"{reserved} reserved core(s) leave DALI's threads none: this process has {len(mine)} "
                              f"core(s) ({len(cores)} shared by {local_world} process(es) on this node). Reserve fewer, "
                              "or 0 to leave threads unpinned.", **at)
        _split[key] = (mine[:reserved], mine[reserved:])
    return _split[key]


def pin_dali_threads(dali_cores: list[int], threads: int) -> None:
    """Thread i of the next pipeline built goes to dali_cores[i % n] (DALI reads the mask when it builds)."""
    os.environ["DALI_AFFINITY_MASK"] = ",".join(str(dali_cores[i % len(dali_cores)]) for i in range(threads))


def pin_this_thread(cores: list[int]) -> None:
    os.sched_setaffinity(0, cores)  # on Linux, pid 0 is the calling thread


def thread_ids() -> set[int]:
    return {int(t) for t in os.listdir("/proc/self/task")}


def renice_threads(tids: set[int], nice: int) -> None:
    """Set each thread's nice value (on Linux, setpriority on a thread id touches that thread alone)."""
    for tid in tids:
        try:
            os.setpriority(os.PRIO_PROCESS, tid, nice)
        except ProcessLookupError:
            pass  # ended meanwhile
