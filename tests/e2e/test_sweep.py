"""runner sweep over seeds and pipelines: each child trains the pipeline its `use` names, and the sweep ends
with compare's groups (by the swept keys other than seed)."""
from __future__ import annotations

import re

from tests.helpers import PLAIN, RANDAUG, run_cli, runs_tagged


def compiled_train(uri: str, run_id: str) -> str:
    from runner.tracking.store import read_artifact

    text = read_artifact(uri, run_id, "pipelines/train_pipeline.py")
    assert text is not None, f"run {run_id} logged no pipelines/train_pipeline.py"
    return text


def test_sweep_over_seeds_and_pipelines_ends_with_the_grouped_comparison(tiny_epoch, project, capsys):
    code, out, err = run_cli(["sweep", tiny_epoch, "seed=0,1", f"pipelines.train.use={PLAIN},{RANDAUG}",
                              "trainer.max_steps=2"], capsys)
    assert code == 0, err
    uri = f"sqlite:///{project}/mlflow.db"
    (parent,) = runs_tagged(uri, "runner.sweep", "parent")
    children = sorted(runs_tagged(uri, "mlflow.parentRunId", parent.info.run_id), key=lambda r: r.info.run_name)
    assert [c.info.run_name for c in children] == [f"seed=0 use={PLAIN}", f"seed=0 use={RANDAUG}",
                                                   f"seed=1 use={PLAIN}", f"seed=1 use={RANDAUG}"]
    for child in children:
        p = child.data.params
        seed, use = child.info.run_name.removeprefix("seed=").split(" use=")
        assert (p["seed"], p["seed.torch"], p["seed.reader_shuffle"], p["pipelines.train.use"]) == (seed, seed, seed, use)
        assert p["pipelines.train.params.size"] == "32" and child.info.status == "FINISHED"
        assert ("rand_augment.rand_augment(" in compiled_train(uri, child.info.run_id)) == (use == RANDAUG)
        assert "eval/top1" in child.data.metrics
    summary = out[out.index("4 runs of tiny in 2 groups"):]
    assert summary.startswith("4 runs of tiny in 2 groups, by pipelines.train.use\n"
                              "  4 children: 4 done\n"
                              f"  A = pipelines.train.use={PLAIN} (2 runs)\n"
                              f"  B = pipelines.train.use={RANDAUG} (2 runs)\n")
    closing = re.compile(r"^(A|B) (leads (A|B) by \d+\.\d\d points of|and (A|B) tie on) eval/top1 .*n = 2 and 2\): "
                         r"(not )?larger than the spread over seeds \(Welch's t-test p = \S+ (<|>=) 0\.05\)\.$", re.M)
    assert closing.search(summary), summary
    assert f"chart and table: runner compare {parent.info.run_id} --uri {uri}" in summary
    code, out, err = run_cli(["compare", "--parent", parent.info.run_id, "--out", "cmp"], capsys)
    assert code == 0, err
    assert out.startswith("4 runs of tiny in 2 groups, by pipelines.train.use\n")  # seeds are not a group key
    assert closing.search(out) and (project / "cmp" / "compare.png").stat().st_size > 20_000
