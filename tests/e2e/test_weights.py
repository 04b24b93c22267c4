"""Weights that travel: checkpoints in the run's artifact store (last, best, keep N; queued while the store is
down, delivered by `runner tracking sync`), fetched back from another store, and model.init fine-tuning from a
checkpoint file, a run id or a torchvision state dict. Real MLflow stores, real torch, real launches."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from mlflow import MlflowClient

from tests.fixtures.weights import sha256, synth, torchvision_resnet18
from tests.helpers import REPO, run_cli, write_image_folder

DALI_RUN = """\
name: tiny
seed: 3
model: {name: mobilenet_v3_small, num_classes: 3}
optimizer: {lr: 0.02}
trainer: {epochs: 3, log_every_n_steps: 3, checkpoint_best: {metric: eval/top1, mode: max}, checkpoint_keep: 1}
data: {root: data, batch_size: 4}
pipelines:
  train: {use: imagenet_train, params: {size: 32, decode_device: cpu}}
  eval: {use: imagenet_eval, params: {size: 32, resize_shorter: 36, decode_device: cpu}}
tracking: {experiment: tiny, uri: "sqlite:///%s"}
"""


def stored_files(client: MlflowClient, run_id: str, folder: str = "checkpoints") -> set[str]:
    return {a.path for a in client.list_artifacts(run_id, folder)}


@pytest.fixture(scope="module")
def trained(module_tmp):
    """One real DALI launch into a store of its own (not the working directory's): (folder, uri, run id)."""
    root = module_tmp
    import shutil
    shutil.copytree(REPO / "pipelines", root / "pipelines")
    write_image_folder(root / "data" / "train", classes=3, per_class=8, seed=1)
    write_image_folder(root / "data" / "val", classes=3, per_class=3, seed=2)
    (root / "other").mkdir()
    db = root / "other" / "mlflow.db"
    (root / "tiny.yaml").write_text(DALI_RUN % db)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-m", "runner", "launch", "tiny.yaml"], cwd=root, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    client = MlflowClient(f"sqlite:///{db}")
    run = client.search_runs([client.get_experiment_by_name("tiny").experiment_id])[0]
    return root, f"sqlite:///{db}", run.info.run_id


def test_the_store_keeps_the_last_and_the_best_checkpoint(trained):
    root, uri, run_id = trained
    client = MlflowClient(uri)
    top1 = sorted((m.step, m.value) for m in client.get_metric_history(run_id, "eval/top1"))
    assert [s for s, _ in top1] == [1, 2, 3]
    best_epoch = max(top1, key=lambda sv: (sv[1], -sv[0]))[0]  # the first epoch reaching the highest top-1
    last, best = "checkpoints/step-0000018.pt", f"checkpoints/step-{best_epoch * 6:07d}.pt"
    assert stored_files(client, run_id) == {"checkpoints/index.json", last, best}  # keep 1: older ones deleted
    index = json.loads(Path(client.download_artifacts(run_id, "checkpoints/index.json", str(root))).read_text())
    assert (index["last"], index["best"], index["metric"], index["best_epoch"]) == (last, best, "eval/top1",
                                                                                   best_epoch)
    assert index["best_value"] == max(v for _, v in top1)
    here = root / "checkpoints" / "tiny" / run_id
    assert sorted(p.name for p in here.iterdir()) == ["best.pt", "index.json", "last.pt"]
    assert json.loads((here / "index.json").read_text()) == index
    # the LoggedModel points at the best checkpoint: no second copy of the weights
    models = client.search_logged_models(experiment_ids=[client.get_run(run_id).info.experiment_id])
    assert [(m.name, m.source_run_id, m.tags["runner.checkpoint"]) for m in models] == [
        ("tiny", run_id, f"runs:/{run_id}/{best}")]
    assert sorted(a.path for a in client.list_logged_model_artifacts(models[0].model_id)) == [
        "checkpoint.json", "experiment.yaml", "label_map.json"]
    assert [o.model_id for o in client.get_run(run_id).outputs.model_outputs] == [models[0].model_id]


def test_fetch_run_weights_from_another_store(trained, tmp_path, monkeypatch):
    from runner.errors import RunnerError
    from runner.weights.store import fetch_run_weights

    root, uri, run_id = trained
    monkeypatch.chdir(tmp_path)  # its ./mlflow.db (the default store) does not exist
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    with pytest.raises(RunnerError, match=f"no tracking store at {tmp_path}/mlflow.db"):
        fetch_run_weights(run_id)
    monkeypatch.setenv("RUNNER_CACHE", str(tmp_path / "cache"))
    last = fetch_run_weights(run_id[:10], tracking_uri=uri, which="last")
    assert last == tmp_path / "cache" / "weights" / run_id / "step-0000018.pt"
    state = torch.load(last, map_location="cpu", weights_only=False)
    assert (state["step"], state["run_id"], state["label_map"]) == (18, run_id, {"c0": 0, "c1": 1, "c2": 2})
    assert state["config"]["model"]["name"] == "mobilenet_v3_small" and state["config"]["trainer"]["epochs"] == 3
    assert sha256(last) == sha256(root / "checkpoints" / "tiny" / run_id / "last.pt")
    best = fetch_run_weights(run_id, tracking_uri=uri)
    assert sha256(best) == sha256(root / "checkpoints" / "tiny" / run_id / "best.pt")


def test_fine_tune_from_a_run_id_with_a_new_head(trained, project, capsys, monkeypatch):
    root, uri, run_id = trained
    monkeypatch.setenv("RUNNER_CACHE", str(project / "cache"))
    exp = synth(project / "experiments" / "ft.yaml", classes=2)
    code, out, err = run_cli(["launch", exp, f"model.init.source={run_id}", f"model.init.uri={uri}",
                              "model.init.new_head=true"], capsys)
    assert code == 0, err
    fetched = project / "cache" / "weights" / run_id
    best = next(fetched.iterdir())
    shown = best.relative_to(project)
    assert (f"note: model.init: mobilenet_v3_small starts from {shown} (run {run_id}): 242 of 244 tensors loaded, 2 "
            "left fresh by skip/new_head (classifier.3.weight, classifier.3.bias).\n") in err
    client = MlflowClient(f"sqlite:///{project}/mlflow.db")
    run = client.search_runs([client.get_experiment_by_name("ft").experiment_id])[0]
    p = run.data.params
    assert (p["model.init.sha256"], p["model.init.run_id"], p["model.init.file"], p["model.init.loaded"]) == (
        sha256(best), run_id, str(best), "242 of 244 tensors")
    assert p["model.init.source"] == run_id


def test_fine_tune_from_a_checkpoint_file_non_strict_lists_what_did_not_load(project, capsys):
    from runner.models.device import build_model  # noqa: F401 - the same model the loop builds

    file = torchvision_resnet18(project / "weights")
    state = torch.load(file)
    state.pop("layer1.0.conv1.weight")
    state["extra.weight"] = torch.zeros(3)
    torch.save({"model": state, "fixed_settings": {}, "label_map": {"a": 0}}, project / "ck.pt")  # a runner checkpoint
    exp = synth(project / "experiments" / "ft.yaml", model="resnet18", classes=5)
    code, out, err = run_cli(["launch", exp, "model.init.source=ck.pt", "model.init.strict=false",
                              "tracking.enabled=false"], capsys)
    assert code == 0, err
    assert ("note: model.init: resnet18 starts from ck.pt: 119 of 122 tensors loaded; not loaded "
            "(model.init.strict: false): 2 differ in shape (fc.weight: [1000, 512] in the file, [5, 512] in the "
            "model; fc.bias: [1000] in the file, [5] in the model), 1 missing from the file (layer1.0.conv1.weight), "
            "1 not in the model (extra.weight).\n") in err


def test_resume_ignores_model_init(project, capsys):
    exp = synth(project / "experiments" / "ft.yaml", model="resnet18", classes=5, epochs=1)
    code, _, err = run_cli(["launch", exp, "tracking.enabled=false"], capsys)
    assert code == 0, err
    last = next((project / "checkpoints" / "ft").glob("*/last.pt"))
    code, _, err = run_cli(["launch", exp, "tracking.enabled=false", "trainer.epochs=2", "model.init.source=nowhere.pt",
                            "--resume", last], capsys)
    assert code == 0, err
    assert "note: model.init (nowhere.pt) is ignored: --resume continues from the checkpoint's weights.\n" in err


def test_store_down_checkpoints_wait_in_the_bundle_and_sync_delivers_them(project, server, capsys):
    """The store never answers during the run: the kept checkpoints (only those) go to the offline bundle."""
    exp = synth(project / "experiments" / "down.yaml", name="down", epochs=3)
    code, out, err = run_cli(["launch", exp, f"tracking.uri={server.uri}", "trainer.checkpoint_keep=1"], capsys)
    assert code == 0, err
    bundle = next((project / "mlflow-offline").iterdir())
    files = sorted(p.relative_to(bundle / "artifacts").as_posix() for p in (bundle / "artifacts").rglob("*.pt"))
    assert files == ["checkpoints/step-0000006.pt"]  # 2 and 4 were superseded before they were ever sent
    server.start()
    code, out, err = run_cli(["tracking", "sync", bundle, "--uri", server.uri], capsys)
    assert code == 0, err
    client = MlflowClient(server.uri)
    run_id = json.loads((bundle / "synced.json").read_text())["run_id"]
    assert stored_files(client, run_id) == {"checkpoints/index.json", "checkpoints/step-0000006.pt"}
    local = next((project / "checkpoints" / "down").glob("*/last.pt"))
    fetched = Path(client.download_artifacts(run_id, "checkpoints/step-0000006.pt", str(project)))
    assert sha256(fetched) == sha256(local)


def test_reproduce_weights_evaluates_the_stored_checkpoint_here(trained, capsys, monkeypatch):
    root, uri, run_id = trained
    monkeypatch.chdir(root)
    monkeypatch.setenv("RUNNER_CACHE", str(root / "cache"))
    code, out, err = run_cli(["reproduce", run_id, "--uri", uri, "--weights", "last"], capsys)
    assert code == 0, err
    assert f"note: evaluating the last checkpoint of run {run_id[:8]} (step 18, epoch 3; " in err
    rows = {line.split("│")[1].strip(): line.split("│")[2:4] for line in out.splitlines() if line.count("│") == 4}
    logged = {m: MlflowClient(uri).get_metric_history(run_id, m)[-1].value for m in ("eval/top1", "eval/loss")}
    for metric, value in logged.items():  # the same weights on the same files: the run's own numbers
        assert [c.strip() for c in rows[metric]] == [f"{value:.4f}", f"{value:.4f}"], out
    assert not list(MlflowClient(uri).search_runs([MlflowClient(uri).get_experiment_by_name("tiny").experiment_id],
                                                  "tags.`runner.reproduces` != ''"))  # nothing trained or logged
