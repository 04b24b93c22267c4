"""The SLURM job script a sweep writes is valid bash that resumes its child.
tests/unit/sweep/test_launchers.py holds the launchers without running a child."""
from __future__ import annotations

import shlex
import subprocess

from runner.config.sections import SlurmConfig
from runner.sweep.slurm import job_script
from tests.fixtures.sweep_launchers import plan


def test_the_job_script_is_valid_bash_that_resumes_its_child(tmp_path):
    p = plan(tmp_path)
    script = job_script(p, SlurmConfig(setup=["module load cuda/13.0", "source /shared/venv/bin/activate"],
                                       python="/shared/venv/bin/python"))
    path = tmp_path / "job.sh"
    path.write_text(script)
    assert subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True).stderr == ""
    assert f"dir={shlex.quote(str(p.folder))}/$(printf '%03d' \"$SLURM_ARRAY_TASK_ID\")" in script
    assert "module load cuda/13.0\nsource /shared/venv/bin/activate\n" in script
    assert '/shared/venv/bin/python -m runner launch "$dir/experiment.yaml" --resume auto &' in script
    assert "trap 'requeue=1; forward' USR1" in script and 'scontrol requeue "$SLURM_JOB_ID"' in script
