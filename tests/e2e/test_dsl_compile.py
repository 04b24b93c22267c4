"""The DSL compiles to the same DALI pipeline a person would write by hand: same tensors, bit for bit."""
from tests.helpers import run_cli


def test_compiled_module_runs_as_a_script(seed_experiment, tmp_path, capsys):
    import subprocess
    import sys

    path, data = seed_experiment
    out_file = tmp_path / "p.py"
    code, _, err = run_cli(["compile", path, f"pipelines.train.params.data_root={data}", "data.batch_size=4",
                            "-o", out_file], capsys)
    assert code == 0, err
    run = subprocess.run([sys.executable, out_file], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert "output 0: 4 samples, first shape (3, 32, 32), DALIDataType.FLOAT" in run.stdout
