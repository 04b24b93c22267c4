"""The local launcher: a sweep's children as processes on this machine, several at once, each on its own GPUs
(CUDA_VISIBLE_DEVICES) and cores (its affinity, which sets its torch and DALI threads), each `runner launch` of its
frozen experiment with `--resume auto`, its output in its log."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass

from runner.config.sections import LauncherConfig
from runner.errors import ConfigError
from runner.sweep.plan import ChildPlan, SweepPlan, write_exit
from runner.sweep.status import RUNNING, Live

STOP_TIMEOUT_S = 120.0  # a child stops at a step boundary and saves a checkpoint; then it is killed


@dataclass(frozen=True)
class Slot:
    """What one running child gets: GPU ids (None: what this process sees) and core ids (None: every core)."""
    gpus: tuple[str, ...] | None
    cpus: tuple[int, ...] | None

    def describe(self) -> str:
        parts = []
        if self.gpus is not None:
            parts.append(f"GPUs {','.join(self.gpus) or 'none'}")
        if self.cpus is not None:
            parts.append(f"cores {_ranges(self.cpus)}")
        return ", ".join(parts) or "the whole machine"


def _ranges(ids: tuple[int, ...]) -> str:
    """(0, 1, 2, 5) -> '0-2,5'."""
    out, start, prev = [], ids[0], ids[0]
    for i in (*ids[1:], None):
        if i is not None and i == prev + 1:
            prev = i
            continue
        out.append(str(start) if start == prev else f"{start}-{prev}")
        if i is not None:
            start = prev = i
    return ",".join(out)


def plan_slots(launcher: LauncherConfig, gpu_ids: list[str], core_ids: list[int], at) -> list[Slot]:
    """The slots children run in at once: launcher.parallel of them (default 1, or the GPUs / gpus_per_run), each
    with gpus_per_run GPUs and the cores split evenly (or cpus_per_run each). `at` locates launcher keys."""
    k = launcher.gpus_per_run
    if k is not None and k > len(gpu_ids):
        raise ConfigError(f"{k} GPUs for each child, but this machine has {len(gpu_ids)} visible GPU(s). Give each "
                          f"child at most {len(gpu_ids)} (or 0, to train on the CPU).", **at("launcher.gpus_per_run"))
    parallel = launcher.parallel or (len(gpu_ids) // k if k else 1)
    if k and parallel * k > len(gpu_ids):
        raise ConfigError(f"{parallel} children at once with {k} GPUs each need {parallel * k} GPUs; this machine has "
                          f"{len(gpu_ids)} visible. Run at most {len(gpu_ids) // k} at once, or give each fewer.",
                          **at("launcher.parallel"))
    per = launcher.cpus_per_run or max(1, len(core_ids) // parallel)
    if per * parallel > len(core_ids):
        raise ConfigError(f"{parallel} children at once with {per} cores each need {per * parallel} cores; this "
                          f"process may use {len(core_ids)}. Run fewer at once, or give each fewer cores.",
                          **at("launcher.cpus_per_run" if launcher.cpus_per_run else "launcher.parallel"))
    pin = parallel > 1 or launcher.cpus_per_run is not None
    return [Slot(gpus=tuple(gpu_ids[i * k:(i + 1) * k]) if k is not None else None,
                 cpus=tuple(core_ids[i * per:(i + 1) * per]) if pin else None) for i in range(parallel)]


@dataclass
class _Running:
    child: ChildPlan
    proc: subprocess.Popen
    slot: int        # index into LocalLauncher.slots
    started: float


class LocalLauncher:
    """Starts children in free slots and reports the ones that ended; stop() passes a signal on to every child."""

    def __init__(self, plan: SweepPlan, slots: list[Slot]):
        self.plan, self.slots = plan, slots
        self.running: dict[int, _Running] = {}
        self.stopping_since: float | None = None

    @property
    def free(self) -> list[int]:
        """Indexes of the slots no child runs in."""
        used = {r.slot for r in self.running.values()}
        return [i for i in range(len(self.slots)) if i not in used]

    def start(self, child: ChildPlan) -> None:
        index = self.free[0]
        slot = self.slots[index]
        folder = self.plan.child_dir(child)
        (folder / "exit.json").unlink(missing_ok=True)
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        if slot.gpus is not None:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(slot.gpus)
        if slot.cpus is not None:
            env["OMP_NUM_THREADS"] = str(len(slot.cpus))
        argv = [sys.executable, "-m", "runner", "launch", str(self.plan.child_experiment(child)), "--resume", "auto"]
        with open(self.plan.log(child), "a") as log:
            log.write(f"== runner sweep: child {child.index}{child.shown} on {socket.gethostname()}, "
                      f"{slot.describe()}, at {time.strftime('%Y-%m-%d %H:%M:%S')}\n{' '.join(argv)}\n")
            log.flush()
            proc = subprocess.Popen(argv, cwd=self.plan.workdir, env=env, stdout=log, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True)  # signals come from us
        if slot.cpus is not None:
            os.sched_setaffinity(proc.pid, slot.cpus)  # before its interpreter starts threads; they inherit it
        self.running[child.index] = _Running(child, proc, index, time.time())

    def live(self) -> dict[int, Live]:
        return {i: Live(RUNNING, job=f"pid {r.proc.pid}") for i, r in self.running.items()}

    def poll(self) -> list[tuple[ChildPlan, int]]:
        """The children that ended since the last call, with their exit codes (recorded in their exit.json)."""
        ended = []
        for index, r in list(self.running.items()):
            code = r.proc.poll()
            if code is None:
                continue
            code = 128 - code if code < 0 else code  # killed by a signal: as a shell reports it
            write_exit(self.plan.child_dir(r.child), code, job=f"pid {r.proc.pid}", host=socket.gethostname(),
                       seconds=round(time.time() - r.started, 1))
            del self.running[index]
            ended.append((r.child, code))
        if self.stopping_since is not None and time.monotonic() - self.stopping_since > STOP_TIMEOUT_S:
            self.signal_all(signal.SIGKILL, group=True)
        return ended

    def stop(self, signum: int) -> None:
        """Ask every running child to stop (it saves a checkpoint at the next step); a second call kills them."""
        if self.stopping_since is not None:
            self.signal_all(signal.SIGKILL, group=True)
            return
        self.stopping_since = time.monotonic()
        self.signal_all(signum)

    def signal_all(self, signum: int, *, group: bool = False) -> None:
        for r in self.running.values():
            try:
                # the leader passes a stop on to its torchrun workers; a kill takes the whole group
                os.killpg(r.proc.pid, signum) if group else os.kill(r.proc.pid, signum)
            except ProcessLookupError:
                pass
