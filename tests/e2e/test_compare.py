"""runner compare through the CLI as an 80-column terminal runs it, on runs logged directly through mlflow: every
group value stays whole. tests/unit/repro/test_compare.py holds the exact spreads and Welch's p."""
from __future__ import annotations

import os
import subprocess
import sys

from tests.fixtures.compare import RANDAUG, log_run, three_seeds_each
from tests.helpers import REPO


def test_80_columns_keep_every_group_value_whole(compare_store):
    """Through the CLI as a terminal of 80 columns would run it: rich reads $COLUMNS."""
    uri, client, exp = compare_store
    long_use = "imagenet_train_randaugment_with_a_rather_long_pipeline_name"
    three_seeds_each(client, exp)
    log_run(client, exp, use=long_use, seed=0, top1=0.5)
    env = {**os.environ, "COLUMNS": "80", "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-m", "runner", "compare", "--experiment", "aug", "--uri", uri],
                          capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    table_lines = [line for line in lines if not line.startswith(("  A =", "  B =", "  C =")) and "leads" not in line
                   and not line.startswith("wrote")]
    assert max(map(len, table_lines)) <= 80, "\n".join(line for line in table_lines if len(line) > 80)
    assert f"  C = pipelines.train.use={long_use} (1 run)" in lines
    assert f"  B = pipelines.train.use={RANDAUG} (3 runs)" in lines
    assert "…" not in proc.stdout
    header = next(line for line in lines if line.startswith("group "))
    assert header.split() == ["group", "id", "seed", "status", "time", "top-1", "%", "img/s", "wait", "%"]
