"""runner evaluate and data.eval_splits against a real MLflow store holding a real (tiny) run: real DALI CPU
pipelines, the torchvision loader, and 2-process gloo."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest
import torch
from mlflow import MlflowClient

from tests.fixtures.finished import Finished
from tests.helpers import run_cli, write_image_folder


@pytest.fixture(scope="module")
def origin(finished) -> Finished:
    """The session's finished run (resnet18, 3 classes, an extra eval split val_b), in this module's own project."""
    return finished


@pytest.fixture
def at_origin(origin, monkeypatch) -> Finished:
    monkeypatch.chdir(origin.root)
    return origin


def evaluations_of(origin: Finished) -> list:
    client = MlflowClient(origin.uri)
    return list(client.search_runs([client.get_experiment_by_name("tiny").experiment_id],
                                   f"tags.`runner.evaluates` = '{origin.run_id}'", order_by=["attributes.start_time"]))


def newest_evaluation(origin: Finished):
    runs = evaluations_of(origin)
    assert runs, "no evaluation run was logged"
    return runs[-1]


def artifact_json(origin: Finished, run_id: str, name: str) -> dict:
    from runner.tracking.store import read_artifact

    text = read_artifact(origin.uri, run_id, f"evaluation/{name}.json")
    assert text is not None, f"run {run_id} logged no evaluation/{name}.json"
    return json.loads(text)


def assert_consistent(origin: Finished, run, prefix: str, samples: int) -> None:
    """Metrics, per-class metrics and the logged confusion matrix tell one story."""
    m = run.data.metrics
    assert m[f"{prefix}/samples"] == samples
    report = artifact_json(origin, run.info.run_id, prefix)
    matrix = torch.tensor(report["confusion"]["matrix"])
    assert matrix.sum() == samples  # every image counted once
    assert matrix.diagonal().sum() / samples == pytest.approx(m[f"{prefix}/top1"])
    per_class = {r["class"]: r for r in report["per_class"]}
    assert report["classes"] == ["c0", "c1", "c2"]
    hits = 0.0
    for i, name in enumerate(report["classes"]):
        n = int(matrix[i].sum())
        assert per_class[name]["samples"] == n
        if n:
            assert m[f"{prefix}/class_samples/{name}"] == n
            assert m[f"{prefix}/class_top1/{name}"] == pytest.approx(matrix[i, i].item() / n)
            hits += m[f"{prefix}/class_top1/{name}"] * n
        else:
            assert f"{prefix}/class_top1/{name}" not in m
    assert hits / samples == pytest.approx(m[f"{prefix}/top1"])  # per-class accuracy adds up to top-1
    artifacts = {a.path for a in MlflowClient(origin.uri).list_artifacts(run.info.run_id, "evaluation")}
    assert {f"evaluation/{prefix}_confusion.png", f"evaluation/{prefix}_per_class.csv",
            f"evaluation/{prefix}_confusion.csv"} <= artifacts


def test_launch_logs_each_eval_split_under_its_prefix(origin):
    run = MlflowClient(origin.uri).get_run(origin.run_id)
    m = run.data.metrics
    assert m["eval/samples"] == 9 and m["eval_val_b/samples"] == 8
    for prefix, samples in (("eval", 9), ("eval_val_b", 8)):
        report = artifact_json(origin, origin.run_id, prefix)
        matrix = torch.tensor(report["confusion"]["matrix"])
        assert matrix.sum() == samples and matrix[2].sum() == (3 if prefix == "eval" else 0)
        assert matrix.diagonal().sum() / samples == pytest.approx(m[f"{prefix}/top1"])


def test_evaluate_a_checkpoint_through_dali(at_origin, capsys):
    code, out, err = run_cli(["evaluate", at_origin.checkpoint], capsys)
    assert code == 0, err
    run = newest_evaluation(at_origin)
    original = MlflowClient(at_origin.uri).get_run(at_origin.run_id)
    assert run.info.experiment_id == original.info.experiment_id
    assert run.info.run_name == f"eval-{at_origin.run_id[:8]}"
    assert f"[{at_origin.run_id}](#/experiments/{original.info.experiment_id}/runs/{at_origin.run_id})" in \
        run.data.tags["mlflow.note.content"]
    # the same weights through the same pipeline score what launch's last evaluation scored
    for key in ("eval/top1", "eval/top5", "eval_val_b/top1"):
        assert run.data.metrics[key] == original.data.metrics[key], key
    assert run.data.metrics["eval/loss"] == pytest.approx(original.data.metrics["eval/loss"], rel=1e-4)
    assert_consistent(at_origin, run, "eval", 9)
    assert_consistent(at_origin, run, "eval_val_b", 8)
    assert "eval: top-1 per class" in out and "eval: confusion matrix (rows: true class, columns: predicted)" in out
    assert "eval_val_b: top-1 per class" in out


def test_evaluate_a_run_id_through_torchvision_on_another_split(at_origin, capsys):
    code, out, err = run_cli(["evaluate", at_origin.run_id[:10], "data.loader=torchvision", "data.eval_split=val_b",
                              "data.eval_splits=[]"], capsys)
    assert code == 0, err
    run = newest_evaluation(at_origin)
    assert run.data.tags["runner.loader"] == "torchvision"
    assert set(k for k in run.data.metrics if not k.startswith("eval/")) == set()  # one split now
    assert_consistent(at_origin, run, "eval", 8)


def test_evaluate_refusals(at_origin, capsys):
    (at_origin.root / "notes.pt").write_text("not a checkpoint")
    torch.save({"model": {}}, at_origin.root / "weights_only.pt")
    store = f"sqlite:///{at_origin.root}/mlflow.db"
    refusals = {
        ("evaluate", "0123abcd"):
            f"RUN_ID: run '0123abcd' is not in {store} (its experiments: tiny, Default). Name the store it was logged "
            "to with --uri, or list runs with: runner compare --experiment NAME --uri URI.",
        ("evaluate", "notes.pt"):
            "CHECKPOINT: checkpoint notes.pt cannot be read (UnpicklingError: invalid load key, 'n'.). runner evaluate "
            "takes a checkpoint that runner launch wrote (a last.pt under trainer.checkpoint_dir), or a run id.",
        ("evaluate", "weights_only.pt"):
            "CHECKPOINT: weights_only.pt is not a checkpoint of runner launch: it holds no 'model' weights and 'config' "
            "(the resolved experiment) beside them, as the last.pt files under trainer.checkpoint_dir do.",
        ("evaluate", "missing/last.pt"): "CHECKPOINT: missing/last.pt: no such checkpoint file.",
        ("evaluate", at_origin.checkpoint, "data.eval_split=val_9"):
            f"command line 'data.eval_split=val_9': data.eval_split: {at_origin.data}/val_9: no such folder; "
            f"{at_origin.data} holds: train, val, val_b. Expected an ImageFolder: ROOT/<class>/<image>.jpg, one folder per class with the images "
            "directly inside.",
    }
    before = len(evaluations_of(at_origin))
    for args, expected in refusals.items():
        code, out, err = run_cli(list(args), capsys)
        assert code == 2, (args, out, err)
        assert "Traceback" not in err and err.count("error: ") == 1, err
        assert err.splitlines()[-1] == f"error: {expected}", (args, err)
    assert len(evaluations_of(at_origin)) == before  # nothing was logged


def test_a_label_map_mismatch_names_both_maps(at_origin, capsys):
    other = at_origin.root / "renamed"
    write_image_folder(other / "train", classes=3, per_class=1, size=(24, 24))
    (other / "train" / "c1").rename(other / "train" / "b1")
    shutil.copytree(at_origin.data / "val", other / "val")
    (other / "val" / "c1").rename(other / "val" / "b1")  # the same folders, one named otherwise: another map
    code, _, err = run_cli(["evaluate", at_origin.checkpoint, f"data.root={other}", "data.eval_splits=[]"], capsys)
    from runner.data.labels import load_label_map

    here, trained = load_label_map(other / "train").digest, load_label_map(at_origin.data / "train").digest
    assert code == 2
    assert err.splitlines()[-1] == (
        f"error: command line 'data.root={other}': data.root: the class folders of renamed/train map class names to "
        f"labels as {here}, but the weights in {at_origin.checkpoint} were trained on {trained}: their "
        "outputs would be scored against other classes' labels. Point data.root (or data.train_split) at the class "
        "folders the run trained on.")


def test_two_process_gloo_evaluation(at_origin):
    run = subprocess.run([sys.executable, "-m", "runner", "evaluate", at_origin.checkpoint, "trainer.devices=2",
                          "trainer.accelerator=cpu"], cwd=at_origin.root, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "starting 2 processes per node with torchrun" in run.stderr
    assert run.stdout.count("tiny: evaluation of run") == 1  # only rank 0 prints
    new = newest_evaluation(at_origin)
    assert new.data.tags["runner.world_size"] == "2"
    original = MlflowClient(at_origin.uri).get_run(at_origin.run_id)
    assert new.data.metrics["eval/top1"] == original.data.metrics["eval/top1"]  # each image once, over two shards
    assert_consistent(at_origin, new, "eval", 9)
    assert_consistent(at_origin, new, "eval_val_b", 8)


def test_a_checkpoint_with_ema_weights_reports_both(at_origin, capsys):
    state = torch.load(at_origin.checkpoint, map_location="cpu", weights_only=False)
    state["ema"] = {k: v.clone() for k, v in state["model"].items()}
    torch.save(state, at_origin.root / "with_ema.pt")
    code, out, err = run_cli(["evaluate", "with_ema.pt", "experiments/tiny.yaml", "data.eval_splits=[]"], capsys)
    assert code == 0, err
    run = newest_evaluation(at_origin)
    assert run.data.tags["runner.experiment_file"] == "experiments/tiny.yaml"  # the experiment named, not the saved one
    m = run.data.metrics
    assert m["eval_ema/top1"] == m["eval/top1"] and m["eval_ema/samples"] == 9  # the same weights
    assert "eval_ema: top-1 per class" in out


def test_a_run_whose_checkpoint_is_not_here(at_origin, capsys):
    client = MlflowClient(at_origin.uri)
    run = client.create_run(client.get_experiment_by_name("tiny").experiment_id)
    client.log_text(run.info.run_id, (at_origin.root / "experiments" / "tiny.yaml").read_text(), "experiment.yaml")
    client.set_tag(run.info.run_id, "runner.checkpoint", "/gone/last.pt")
    client.set_terminated(run.info.run_id)
    code, _, err = run_cli(["evaluate", run.info.run_id], capsys)
    assert code == 2
    assert err == (f"error: RUN_ID: run {run.info.run_id} has no checkpoint in its artifact store or on this machine "
                   f"(tag runner.checkpoint: /gone/last.pt; nothing in checkpoints/tiny/{run.info.run_id}/); evaluate "
                   "it where it ran, or pass its checkpoint file: runner evaluate FILE.\n")
