"""runner export / reproduce / compare / sweep against a real MLflow store holding a real (tiny) run."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from mlflow import MlflowClient

from tests.fixtures.finished import Finished
from tests.helpers import run_cli, runs_tagged, write_image_folder

IDENTITY = ("tracking.run_name", "tracking.uri", "tracking.tags")  # which run it is and where it was logged


def training_params(params: dict[str, str], *, pipelines: bool = True) -> dict[str, str]:
    return {k: v for k, v in params.items() if not k.startswith(IDENTITY)
            and (pipelines or not k.startswith("pipelines."))}


def loss_curve(uri: str, run_id: str, key: str = "train/loss") -> list[tuple[int, float]]:
    return sorted((m.step, m.value) for m in MlflowClient(uri).get_metric_history(run_id, key))


def compiled_body(uri: str, run_id: str, role: str) -> str:
    """The compiled pipeline's DALI calls (the header names the experiment file, which differs)."""
    from runner.tracking.store import read_artifact

    text = read_artifact(uri, run_id, f"pipelines/{role}_pipeline.py")
    assert text is not None, f"run {run_id} logged no pipelines/{role}_pipeline.py"
    return text[text.index("@pipeline_def"):]


@pytest.fixture(scope="module")
def origin(finished) -> Finished:
    """The session's finished run (deterministic), in this module's own project."""
    return finished


@pytest.fixture
def elsewhere(tmp_path, monkeypatch) -> Path:
    """Another working directory: no pipelines/, no store."""
    import torch

    monkeypatch.chdir(tmp_path)
    yield tmp_path
    torch.use_deterministic_algorithms(False)


def test_export_round_trip(origin, elsewhere, capsys):
    code, _, err = run_cli(["export", origin.run_id[:10], "--uri", origin.uri, "-o", "shared.yaml"], capsys)
    assert code == 0, err
    config = yaml.safe_load((elsewhere / "shared.yaml").read_text())
    for role, size in (("train", 32), ("eval", 32)):
        spec = config["pipelines"][role]
        assert spec["use"] is None and spec["steps"][0].startswith("jpegs, labels = readers.file(")
        assert spec["params"]["size"] == size and spec["params"]["data_root"] is None  # bound to data.root at launch
    code, out, err = run_cli(["validate", "shared.yaml"], capsys)
    assert code == 0 and "inline" in out, err
    code, _, err = run_cli(["launch", "shared.yaml"], capsys)
    assert code == 0, err
    uri = f"sqlite:///{elsewhere}/mlflow.db"
    client = MlflowClient(uri)
    (new,) = client.search_runs([client.get_experiment_by_name("tiny").experiment_id])
    before, after = MlflowClient(origin.uri).get_run(origin.run_id).data.params, new.data.params
    # the same config: every param but the pipelines' (now inline) is the same, the data fingerprint too
    assert training_params(after, pipelines=False) == training_params(before, pipelines=False)
    assert after["data.fingerprint.train.sha256"] == before["data.fingerprint.train.sha256"]
    # the same pipelines: the same DALI calls with the same arguments
    for role in ("train", "eval"):
        assert compiled_body(uri, new.info.run_id, role) == compiled_body(origin.uri, origin.run_id, role)
    assert loss_curve(uri, new.info.run_id) == loss_curve(origin.uri, origin.run_id)


def test_reproduce_from_another_directory(origin, elsewhere, capsys):
    from runner.config.load import load_experiment

    code, out, err = run_cli(["reproduce", origin.run_id, "--uri", origin.uri], capsys)
    assert code == 0, err
    folder = elsewhere / "reproduced" / origin.run_id
    experiment = folder / "experiments" / "tiny.yaml"
    # `use:` finds the pinned copies first, not this checkout's pipelines/
    loaded = load_experiment(experiment)
    assert loaded.pipelines["train"].file.resolve() == (folder / "pipelines" / "imagenet_train.yaml").resolve()
    assert loaded.pipelines["eval"].file.resolve() == (folder / "pipelines" / "imagenet_eval.yaml").resolve()
    logged = {a.path for a in MlflowClient(origin.uri).list_artifacts(origin.run_id, "pipelines")}
    pinned_from_checkout = "did not log its train pipeline file; pinned this checkout's" in err
    assert pinned_from_checkout == ("pipelines/train.yaml" not in logged)  # the run's own copy wins when logged
    # logged to the store it came from, tagged with its origin; same params, same loss curve bit for bit
    assert not (elsewhere / "mlflow.db").exists()
    (new,) = runs_tagged(origin.uri, "runner.reproduces", origin.run_id)
    before = MlflowClient(origin.uri).get_run(origin.run_id).data.params
    assert training_params(new.data.params) == training_params(before)
    assert loss_curve(origin.uri, new.info.run_id) == loss_curve(origin.uri, origin.run_id)
    assert f"runner compare {origin.run_id} {new.info.run_id}" in out
    assert "data (" not in err


def test_reproduce_warns_when_the_data_differs(origin, elsewhere, capsys):
    other = elsewhere / "other-data"
    write_image_folder(other / "train", classes=2, per_class=5, seed=7)
    write_image_folder(other / "val", classes=2, per_class=2, seed=8)
    before = len(runs_tagged(origin.uri, "runner.reproduces", origin.run_id))
    code, out, err = run_cli(["reproduce", origin.run_id, "--uri", origin.uri, f"data.root={other}", "--dry-run"],
                             capsys)
    assert code == 0, err
    assert "warning: this machine differs from the one run" in err
    train_row = next(line for line in err.splitlines() if "data (train)" in line)
    assert "24 files" in train_row and "3 classes" in train_row  # what the run read
    assert "10 files" in train_row and "2 classes" in train_row  # what it would read here
    assert "note: the data differs from what the run read (file names or sizes)" in err
    assert f"data.root={other}" in out and "to run it: runner launch reproduced/" in out
    assert len(runs_tagged(origin.uri, "runner.reproduces", origin.run_id)) == before  # a dry run trains nothing
    code, _, err = run_cli(["reproduce", origin.run_id, "--uri", origin.uri, "data.root=/nowhere", "--dry-run"],
                           capsys)
    assert code == 0 and "not found: /nowhere/train" in err


def test_reproduce_an_unknown_run(origin, elsewhere, capsys):
    code, _, err = run_cli(["export", "ffff0000", "--uri", origin.uri], capsys)
    assert code == 2
    assert err.startswith(f"error: RUN_ID: run 'ffff0000' is not in {origin.uri} (its experiments: ")


def test_compare_shows_exactly_the_changed_params_and_draws_curves(origin, elsewhere, capsys):
    from runner.repro.compare import differing_params
    from runner.tracking.store import get_run

    code, _, err = run_cli(["reproduce", origin.run_id, "--uri", origin.uri, "optimizer.lr=0.05",
                            "trainer.max_steps=3"], capsys)
    assert code == 0, err
    (changed,) = [r for r in runs_tagged(origin.uri, "runner.reproduces", origin.run_id)
                  if r.data.params["optimizer.lr"] == "0.05"]
    ids = [origin.run_id, changed.info.run_id]
    assert differing_params([get_run(origin.uri, i) for i in ids]) == ["optimizer.lr", "trainer.max_steps"]
    code, out, err = run_cli(["compare", *ids, "--uri", origin.uri, "--out", "cmp"], capsys)
    assert code == 0, err
    assert out.startswith("2 runs of tiny in 2 groups, by optimizer.lr, trainer.max_steps\n"
                          "  A = optimizer.lr=0.02 trainer.max_steps=None (1 run)\n"
                          "  B = optimizer.lr=0.05 trainer.max_steps=3 (1 run)\n"), out
    header = next(line for line in out.splitlines() if line.startswith("group "))
    assert header.split()[:5] == ["group", "id", "status", "time", "top-1"] and "img/s" in header
    row = next(line for line in out.splitlines() if changed.info.run_id[:8] in line)
    assert row.startswith("B ") and "FINISHED" in row
    assert "the spread over seeds is unknown with 1 run in" in out
    png = elsewhere / "cmp" / "compare.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 20_000
    assert changed.info.run_id[:8] in (elsewhere / "cmp" / "compare.md").read_text()


def test_sweep_runs_each_combination_under_one_parent(tiny_epoch, project, capsys):
    code, out, err = run_cli(["sweep", tiny_epoch, "optimizer.lr=0.01,0.02", "trainer.max_steps=2",
                              "trainer.eval_every_n_epochs=0"], capsys)
    assert code == 0, err
    uri = f"sqlite:///{project}/mlflow.db"
    (parent,) = runs_tagged(uri, "runner.sweep", "parent")
    assert parent.info.status == "FINISHED" and parent.data.params["sweep.runs"] == "2"
    children = sorted(runs_tagged(uri, "mlflow.parentRunId", parent.info.run_id), key=lambda r: r.info.run_name)
    assert [c.info.run_name for c in children] == ["lr=0.01", "lr=0.02"]
    assert [c.data.params["optimizer.lr"] for c in children] == ["0.01", "0.02"]
    assert all(c.data.params["trainer.max_steps"] == "2" and c.info.status == "FINISHED" for c in children)
    assert "2 runs of tiny in 2 groups, by optimizer.lr\n" in out  # the summary, compare's groups of the children
    code, out, err = run_cli(["compare", "--parent", parent.info.run_id, "--out", "cmp"], capsys)
    assert code == 0, err
    assert "2 runs of tiny in 2 groups, by optimizer.lr\n" in out and "lr=0.01" in out and "lr=0.02" in out
    code, out, err = run_cli(["compare", "--experiment", "tiny", "--out", "cmp"], capsys)
    assert code == 0 and "2 runs of tiny" in out  # the parent trains nothing: left out


def test_drift_lists_what_differs_from_the_runs_machine(tiny_epoch):
    """Versions, GPU, code and layout as the run's tags say, against this machine measured the same way."""
    import dataclasses

    from runner.machine import gpu_info
    from runner.repro.drift import machine_differences
    from runner.run import runinfo
    from runner.run.validate import validate
    from runner.tracking.store import RunRecord

    v = validate(tiny_epoch)
    here = {("runner.python" if k == "python" else k): val for k, val in runinfo.versions().items()}
    tags = {**here, **runinfo.git_state(), **gpu_info(), "runner.accelerator": v.target.accelerator,
            "runner.world_size": str(v.target.world)}
    same = RunRecord(run_id="0" * 32, name="r", experiment="tiny", status="FINISHED", start_ms=0, end_ms=1,
                     params={}, tags=tags, metric_keys=(), uri="sqlite:///x.db")
    assert machine_differences(same, v.target, v.processes) == []
    other = dataclasses.replace(same, tags={**tags, "version.torch": "1.0.0", "gpu.model": "Some Other GPU",
                                            "runner.world_size": "64", "runner.torch_threads": "999"})
    diffs = {d.what: (d.run, d.here) for d in machine_differences(other, v.target, v.processes)}
    assert diffs["torch"] == ("1.0.0", here["version.torch"])
    assert diffs["GPU model"] == ("Some Other GPU", gpu_info().get("gpu.model", "-"))
    assert diffs["processes"] == ("64", str(v.target.world))
    if v.target.accelerator == "cpu":  # the thread count decides CPU results only
        assert diffs["torch CPU threads"][0] == "999"
