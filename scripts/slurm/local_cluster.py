"""A one-node SLURM cluster on this machine, from Debian's slurm-wlm and munge, to try `runner sweep --launcher slurm`
(and to test it): slurmctld and slurmd on localhost, with their own munge key, configuration, state and logs in one
folder. CPU only; run it as root (slurmd starts jobs as their users).

    sudo apt-get install slurm-wlm munge
    python scripts/slurm/local_cluster.py start /tmp/slurm     # prints the line to export
    export SLURM_CONF=/tmp/slurm/slurm.conf
    runner sweep experiments/quickstart.yaml seed=0,1 --launcher slurm launcher.cpus_per_run=1
    python scripts/slurm/local_cluster.py stop /tmp/slurm
"""
from __future__ import annotations

import argparse
import getpass
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

DAEMONS = ("munged", "slurmctld", "slurmd")


def missing() -> list[str]:
    """The programs a cluster needs that this machine lacks."""
    return [p for p in (*DAEMONS, "sbatch", "squeue", "scancel", "scontrol", "sinfo") if shutil.which(p) is None]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def memory_mb() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(int(line.split()[1]) / 1024 * 0.9)
    return 1024


def config(root: Path, cpus: int) -> str:
    user = getpass.getuser()
    return f"""# A one-node cluster on localhost (scripts/slurm/local_cluster.py)
ClusterName=runner-local
SlurmctldHost=localhost(127.0.0.1)
SlurmUser={user}
SlurmdUser={user}
AuthType=auth/munge
AuthInfo=socket={root}/munge/munge.sock
CredType=cred/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd.pid
SlurmctldLogFile={root}/log/slurmctld.log
SlurmdLogFile={root}/log/slurmd.log
SlurmctldPort={free_port()}
SlurmdPort={free_port()}
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
MpiDefault=none
ReturnToService=2
KillWait=30
NodeName=localhost NodeAddr=127.0.0.1 CPUs={cpus} RealMemory={memory_mb()} State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP
"""


def start(root: Path, cpus: int) -> Path:
    """Start munged, slurmctld and slurmd with their files under `root`; returns the slurm.conf to export."""
    if missing():
        raise SystemExit(f"not installed: {', '.join(missing())} (apt-get install slurm-wlm munge)")
    root = root.resolve()
    for sub in ("munge", "state", "spool", "log"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    (root / "munge").chmod(0o711)
    key = root / "munge" / "munge.key"
    if not key.exists():
        key.write_bytes(os.urandom(128))
        key.chmod(0o400)
    conf = root / "slurm.conf"
    conf.write_text(config(root, cpus))
    env = {**os.environ, "SLURM_CONF": str(conf)}
    force = ["--force"] if os.geteuid() == 0 else []
    run(["munged", f"--key-file={key}", f"--socket={root}/munge/munge.sock", f"--pid-file={root}/munge/munged.pid",
         f"--log-file={root}/munge/munged.log", f"--seed-file={root}/munge/seed", *force], env)
    run(["slurmctld", "-i"], env)
    run(["slurmd", "-N", "localhost"], env)
    end = time.monotonic() + 60
    while time.monotonic() < end:
        state = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, env=env).stdout.strip()
        if state in ("idle", "mixed", "allocated"):
            return conf
        time.sleep(0.5)
    stop(root)
    raise SystemExit(f"the node did not come up within 60 s; logs in {root}/log/")


def run(argv: list[str], env: dict) -> None:
    done = subprocess.run(argv, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        raise SystemExit(f"{argv[0]} did not start: {(done.stderr or done.stdout).strip()[-500:]}")


def stop(root: Path) -> None:
    """Cancel every job, then stop the daemons (SIGTERM, then SIGKILL after 10 s)."""
    root = root.resolve()
    env = {**os.environ, "SLURM_CONF": str(root / "slurm.conf")}
    if (root / "slurmctld.pid").exists():
        subprocess.run(["scancel", "-u", getpass.getuser()], capture_output=True, env=env, timeout=30)
    for pid_file in (root / "slurmd.pid", root / "slurmctld.pid", root / "munge" / "munged.pid"):
        try:
            pid = int(pid_file.read_text().strip())
        except (OSError, ValueError):
            continue
        _terminate(pid)
        pid_file.unlink(missing_ok=True)


def _terminate(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    end = time.monotonic() + 10
    while time.monotonic() < end:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    os.kill(pid, signal.SIGKILL)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("verb", choices=("start", "stop"))
    p.add_argument("dir", type=Path, help="folder for the cluster's configuration, state and logs")
    p.add_argument("--cpus", type=int, default=os.cpu_count() or 1, help="CPUs the node offers (default: all)")
    args = p.parse_args(argv)
    if args.verb == "start":
        conf = start(args.dir, args.cpus)
        print(f"export SLURM_CONF={conf}")
    else:
        stop(args.dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
