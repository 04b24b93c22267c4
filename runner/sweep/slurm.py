"""The SLURM launcher: a sweep's children as the tasks of job arrays (one array per distinct request of nodes, GPUs
and cores), submitted with sbatch, watched with squeue.

Each task runs the sweep's job.sh: `runner launch CHILD/experiment.yaml --resume auto`, one task per node through
srun for a child of several nodes. A job that SLURM preempts, requeues or stops at its time limit resumes from the
child's last checkpoint when it runs again; job.sh records how each attempt ended in the child's exit.json.
"""
from __future__ import annotations

import getpass
import re
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from runner.config.sections import LauncherConfig, SlurmConfig
from runner.errors import ConfigError, RunnerError
from runner.sweep.plan import ChildPlan, Resources, SweepPlan
from runner.sweep.status import QUEUED, RUNNING, Live

SCRIPT = "job.sh"
TIME = re.compile(r"(\d+|\d+:\d\d|\d+:\d\d:\d\d|\d+-\d+|\d+-\d+:\d\d|\d+-\d+:\d\d:\d\d|UNLIMITED|INFINITE)")
OWN_OPTIONS = ("--array", "--output", "--error", "--open-mode", "--chdir", "--parsable", "--wrap", "--job-name",
               "-a", "-o", "-e", "-D", "-J")
WAITING = {"PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "CONFIGURING", "SUSPENDED", "RESIZING", "SIGNALING"}
ACTIVE = {"RUNNING", "COMPLETING", "STAGE_OUT"}


def check_slurm_config(cfg: SlurmConfig, at: Callable[[str], dict]) -> None:
    """Settings sbatch would refuse only once submitted."""
    if cfg.time is not None and not TIME.fullmatch(cfg.time):
        raise ConfigError(f"'{cfg.time}' is not a SLURM time limit; write minutes (90), HH:MM:SS (4:00:00) or "
                          "D-HH:MM:SS (2-00:00:00).", **at("launcher.slurm.time"))
    for i, option in enumerate(cfg.options):
        name = option.split("=", 1)[0].strip()
        if not name.startswith("-"):
            raise ConfigError(f"'{option}' is not an sbatch option; write each as on sbatch's command line, e.g. "
                              "--constraint=h100 or --exclusive.", **at(f"launcher.slurm.options.{i}"))
        if name in OWN_OPTIONS:
            raise ConfigError(f"'{name}' is set by runner sweep for every child (its array, log and working folder); "
                              "remove it from launcher.slurm.options.", **at(f"launcher.slurm.options.{i}"))


def child_resources(launcher: LauncherConfig, trainer) -> Resources:
    """Nodes, GPUs per node and cores per task a child's job asks for."""
    gpus = launcher.gpus_per_run
    if gpus is None:
        gpus = trainer.devices if isinstance(trainer.devices, int) and trainer.accelerator != "cpu" else 0
    return Resources(nodes=trainer.nnodes, gpus=gpus, cpus=launcher.cpus_per_run)


def check_sbatch() -> None:
    if shutil.which("sbatch") is None or shutil.which("squeue") is None:
        raise RunnerError("SLURM's sbatch and squeue are not on PATH here; --launcher slurm submits through them. "
                          "Run the sweep on a machine of the cluster (a login node), or with --launcher local.",
                          where="launcher.name")


def job_script(plan: SweepPlan, cfg: SlurmConfig) -> str:
    """job.sh: the child whose number is SLURM_ARRAY_TASK_ID, run with --resume auto in the sweep's working folder."""
    python = shlex.quote(cfg.python or sys.executable)
    setup = "".join(f"{line}\n" for line in cfg.setup)
    return f"""#!/bin/bash
# A child of the sweep in {plan.folder}: SLURM_ARRAY_TASK_ID is its number (the folder NNN beside this file).
# runner sweep submits it with sbatch; sweep.json lists each submission's command line.
set -u
dir={shlex.quote(str(plan.folder))}/$(printf '%03d' "$SLURM_ARRAY_TASK_ID")
rm -f "$dir/exit.json"
cd {shlex.quote(plan.workdir)} || exit 1
{setup}job="${{SLURM_ARRAY_JOB_ID}}_${{SLURM_ARRAY_TASK_ID}}"
echo "== runner sweep: child $SLURM_ARRAY_TASK_ID, job $job ($SLURM_JOB_ID), restart ${{SLURM_RESTART_COUNT:-0}}, \\
on $(hostname) at $(date '+%F %T')"
requeue=0
pid=
forward() {{ [[ -n $pid ]] && kill -TERM "$pid" 2>/dev/null; }}
trap forward TERM INT                  # cancelled or preempted: the child checkpoints at its next step
trap 'requeue=1; forward' USR1         # its time limit is near: checkpoint, then go back in the queue
if (( ${{SLURM_NNODES:-1}} > 1 )); then
    mapfile -t nodes < <(scontrol show hostnames "$SLURM_JOB_NODELIST")
    export MASTER_ADDR=${{nodes[0]}} MASTER_PORT=${{MASTER_PORT:-29500}}
    # one task per node; $SLURM_NODEID is expanded by each node's task
    srun --nodes="$SLURM_NNODES" --ntasks-per-node=1 --kill-on-bad-exit=1 bash -c 'exec "$0" -m runner launch \\
        "$1" --resume auto trainer.node_rank="$SLURM_NODEID" trainer.rdzv_endpoint="$MASTER_ADDR:$MASTER_PORT" \\
        trainer.rdzv_id="slurm-$SLURM_JOB_ID"' {python} "$dir/experiment.yaml" &
else
    {python} -m runner launch "$dir/experiment.yaml" --resume auto &
fi
pid=$!
while :; do wait "$pid"; code=$?; kill -0 "$pid" 2>/dev/null || break; done
printf '{{"exit_code": %d, "job": "%s", "restart": %d, "host": "%s", "ended": "%s"}}\\n' "$code" "$job" \\
    "${{SLURM_RESTART_COUNT:-0}}" "$(hostname)" "$(date '+%FT%T%z')" > "$dir/exit.json"
if (( requeue )); then
    rm -f "$dir/exit.json"
    scontrol requeue "$SLURM_JOB_ID"
fi
exit "$code"
"""


def sbatch_command(plan: SweepPlan, launcher: LauncherConfig, resources: Resources, indices: list[int]) -> list[str]:
    cfg = launcher.slurm
    array = ",".join(map(str, indices)) + (f"%{launcher.parallel}" if launcher.parallel else "")
    argv = ["sbatch", "--parsable", f"--job-name=runner-{Path(plan.experiment).stem}", f"--array={array}",
            f"--output={plan.folder}/%3a/log.txt", "--open-mode=append", f"--chdir={plan.workdir}",
            f"--nodes={resources.nodes}", "--ntasks-per-node=1"]
    if resources.gpus:
        argv.append(f"--gpus-per-node={resources.gpus}")
    if resources.cpus:
        argv.append(f"--cpus-per-task={resources.cpus}")
    for key in ("partition", "time", "mem", "account", "qos"):
        value = getattr(cfg, key)
        if value is not None:
            argv.append(f"--{key}={value}")
    argv.append("--requeue" if cfg.requeue else "--no-requeue")
    if cfg.time is not None:
        argv.append(f"--signal=B:USR1@{cfg.grace_s}")
    return [*argv, *cfg.options, str(plan.folder / SCRIPT)]


def submit(plan: SweepPlan, launcher: LauncherConfig, children: list[ChildPlan]) -> list[dict]:
    """One array job per distinct resource request; returns the submissions ({job, children, command, time})."""
    script = plan.folder / SCRIPT
    script.write_text(job_script(plan, launcher.slurm))
    script.chmod(0o755)
    by_request: dict[Resources, list[int]] = {}
    for c in children:
        by_request.setdefault(c.resources, []).append(c.index)
    out = []
    for resources, indices in by_request.items():
        argv = sbatch_command(plan, launcher, resources, indices)
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
        if done.returncode != 0:
            reason = (done.stderr.strip() or done.stdout.strip() or f"exit {done.returncode}").splitlines()[-1]
            raise RunnerError(f"sbatch refused children {', '.join(map(str, indices))}: {reason} (command: "
                              f"{shlex.join(argv)}). Check launcher.slurm (partition, time, options) against the "
                              "cluster's limits (sinfo, scontrol show partition).", where="launcher.slurm")
        job = done.stdout.strip().split(";")[0]
        out.append({"job": job, "children": indices, "command": shlex.join(argv),
                    "time": time.strftime("%Y-%m-%dT%H:%M:%S%z")})
    return out


def latest_jobs(plan: SweepPlan) -> dict[str, dict[int, str]]:
    """array job id -> {child index: its job id ARRAY_TASK}, for each child's newest submission."""
    newest: dict[int, str] = {}
    for s in plan.submissions:
        for index in s["children"]:
            newest[index] = s["job"]
    out: dict[str, dict[int, str]] = {}
    for index, job in newest.items():
        out.setdefault(job, {})[index] = f"{job}_{index}"
    return out


def live(plan: SweepPlan) -> dict[int, Live]:
    """The children SLURM holds now (waiting or running), from squeue; a child it no longer lists has ended."""
    jobs = latest_jobs(plan)
    if not jobs:
        return {}
    done = subprocess.run(["squeue", "-h", "-r", "-u", getpass.getuser(), "-o", "%i|%T|%r"], capture_output=True,
                          text=True, timeout=60)
    if done.returncode != 0:
        raise RunnerError(f"squeue failed: {(done.stderr.strip() or f'exit {done.returncode}').splitlines()[-1]}")
    wanted = {job_id: index for children in jobs.values() for index, job_id in children.items()}
    out: dict[int, Live] = {}
    for line in done.stdout.splitlines():
        job_id, _, rest = line.partition("|")
        state, _, reason = rest.partition("|")
        index = wanted.get(job_id.strip())
        if index is None:
            continue
        if state in WAITING:
            out[index] = Live(QUEUED, job=job_id, detail=reason if reason not in ("None", "") else state.lower())
        elif state in ACTIVE:
            out[index] = Live(RUNNING, job=job_id)
    return out


def cancel_command(plan: SweepPlan) -> str:
    return "scancel " + " ".join(sorted(latest_jobs(plan)))
