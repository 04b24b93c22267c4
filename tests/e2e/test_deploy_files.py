"""The deployment files run as written: every Dockerfile RUN instruction is valid sh, the SLURM script is valid
bash and starts one runner per node with its rank. tests/unit/test_deploy_files.py checks what they say."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from tests.helpers import REPO, run_cli

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - the project supports 3.10
    tomllib = pytest.importorskip("tomli")


SBATCH = REPO / "scripts" / "slurm" / "train.sbatch"


@pytest.mark.skipif(shutil.which("sh") is None, reason="no sh")
def test_every_run_instruction_is_valid_sh(dockerfile):
    for ins in dockerfile:
        if ins.keyword == "RUN" and ins.exec_form() is None:
            done = subprocess.run(["sh", "-n", "-c", ins.args], capture_output=True, text=True)
            assert done.returncode == 0, f"RUN on line {ins.line}: {done.stderr}"


def test_the_slurm_script_is_valid_bash():
    done = subprocess.run(["bash", "-n", str(SBATCH)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    text = SBATCH.read_text()
    for key in ("trainer.nnodes=", "trainer.node_rank=", "trainer.rdzv_endpoint="):
        assert key in text


FAKE_TOOLS = {
    # scontrol show hostnames LIST
    "scontrol": '[ "$1 $2" = "show hostnames" ] && printf "gpu-a\\ngpu-b\\n"',
    # srun OPTIONS... COMMAND...: records the options, runs COMMAND once per node
    "srun": ('opts=(); while [[ $1 == --* ]]; do opts+=("$1"); shift; done\n'
             'printf "%s\\n" "${opts[@]}" > "$OUT/srun"\n'
             'for ((n = 0; n < SLURM_NNODES; n++)); do SLURM_NODEID=$n "$@" || exit; done'),
    # runner ARGS...: one argument per line, per node
    "runner": 'printf "%s\\n" "$@" > "$OUT/node-$SLURM_NODEID"',
}


def test_the_slurm_script_starts_one_runner_per_node_with_its_rank(tmp_path, capsys, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, body in FAKE_TOOLS.items():
        (bin_dir / name).write_text(f"#!/bin/bash\n{body}\n")
        (bin_dir / name).chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "MASTER_"))}
    env.update(PATH=f"{bin_dir}:{env['PATH']}", OUT=str(tmp_path), SLURM_JOB_NODELIST="gpu-[a-b]",
               SLURM_NNODES="2", SLURM_JOB_ID="4242", SLURM_CPUS_PER_TASK="16")
    done = subprocess.run(["bash", str(SBATCH), "experiments/quickstart.yaml", "trainer.epochs=1"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    srun_options = (tmp_path / "srun").read_text().split()
    assert "--ntasks-per-node=1" in srun_options and "--cpus-per-task=16" in srun_options
    monkeypatch.chdir(REPO)
    for node in (0, 1):
        args = (tmp_path / f"node-{node}").read_text().splitlines()
        assert args[:2] == ["launch", "experiments/quickstart.yaml"]
        assert {"trainer.epochs=1", "trainer.nnodes=2", f"trainer.node_rank={node}",
                "trainer.rdzv_endpoint=gpu-a:29500", "trainer.rdzv_id=slurm-4242"} <= set(args[2:])
        code, out, err = run_cli(["validate", *args[1:]], capsys)
        assert code == 0, err
        assert "on each of 2 nodes" in out
