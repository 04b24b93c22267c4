"""runner sweep over seeds and pipelines, validated without training: the grid it plans, and a swept pipeline
that lacks a set param named with its run. tests/e2e/test_sweep.py runs the children."""
from __future__ import annotations

from tests.helpers import PLAIN, RANDAUG, run_cli


def test_seeds_and_pipelines_sweep_as_a_grid(tiny_epoch, capsys):
    code, out, err = run_cli(["sweep", tiny_epoch, "seed=0,1,2", f"pipelines.train.use={PLAIN},{RANDAUG}", "--dry-run"],
                             capsys)
    assert code == 0, err
    cells = [[c.strip() for c in line.split("│")[1:4]] for line in out.splitlines() if line.startswith("│")]
    assert cells == [["1", "0", PLAIN], ["2", "0", RANDAUG], ["3", "1", PLAIN], ["4", "1", RANDAUG],
                     ["5", "2", PLAIN], ["6", "2", RANDAUG]]


def test_a_swept_pipeline_that_lacks_a_set_param_names_the_run(tiny_epoch, capsys):
    """params written for one pipeline are checked against each swept `use`: ~pipelines.train.params or
    params both pipelines declare avoid it."""
    code, _, err = run_cli(["sweep", tiny_epoch, f"pipelines.train.use={RANDAUG},{PLAIN}", "pipelines.train.params.n=3",
                            "--dry-run"], capsys)
    assert code == 2
    assert err == ("error: command line 'pipelines.train.params.n=3': pipelines.train.params.n: pipeline "
                   f"'{PLAIN}' has no parameter 'n'. Its parameters: data_root, size, shuffle, decode_device, "
                   f"hw_decoder_load. (sweep run 2: pipelines.train.use={PLAIN})\n")
    code, out, err = run_cli(["sweep", tiny_epoch, f"pipelines.train.use={RANDAUG},{PLAIN}", "~pipelines.train.params",
                              "--dry-run"], capsys)
    assert code == 0, err
    assert "tiny.yaml: 2 runs, each with ~pipelines.train.params" in out
