"""Weights that travel: checkpoints in the run's artifact store (last, best, keep N; queued while the store is
down, delivered by `runner tracking sync`), fetched back from another store, and model.init fine-tuning from a
checkpoint file, a run id or a torchvision state dict. Real MLflow stores, real torch, real launches."""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torchvision
from mlflow import MlflowClient

from runner.errors import ConfigError
from tests.conftest import REPO, run_cli, write_image_folder

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
# random batches: no data to read, so a launch takes seconds
SYNTH = """\
name: %(name)s
seed: 1
model: {name: %(model)s, num_classes: %(classes)d}
optimizer: {lr: 0.01}
trainer: {epochs: %(epochs)d, log_every_n_steps: 1}
data: {loader: synthetic, image_size: 32, batch_size: 4, synth: {classes: 2, per_class: 4, eval_per_class: 4}}
tracking: {experiment: %(name)s}
"""


def synth(path: Path, name: str = "ft", model: str = "mobilenet_v3_small", classes: int = 2, epochs: int = 1) -> Path:
    path.write_text(SYNTH % {"name": name, "model": model, "classes": classes, "epochs": epochs})
    return path


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


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


@pytest.mark.slow
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


@pytest.mark.slow
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


@pytest.mark.slow
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


def torchvision_resnet18(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "resnet18.pth"
    torch.manual_seed(0)
    torch.save(torchvision.models.resnet18().state_dict(), path)
    return path


def planned(project: Path, *overrides: str):
    from runner.run.validate import validate
    from runner.weights.init import plan_init

    return plan_init(validate(synth(project / "experiments" / "ft.yaml", model="resnet18", classes=5), overrides))


def test_fine_tune_from_a_torchvision_state_dict(project):
    from runner.models.zoo import create_model
    from runner.run.validate import validate
    from runner.weights.init import apply_init

    file = torchvision_resnet18(project / "weights")
    plan = planned(project, f"model.init.source={file}", "model.init.new_head=true")
    assert (plan.skipped, plan.missing, plan.unexpected, plan.mismatched) == (("fc.weight", "fc.bias"), (), (), ())
    assert len(plan.loaded) == plan.total - 2 == 120 and plan.sha256 == sha256(file)
    model = create_model(validate(project / "experiments" / "ft.yaml").config.model)
    fresh_fc = model.fc.weight.detach().clone()
    apply_init(model, plan)
    saved = torch.load(file)
    assert torch.equal(model.conv1.weight, saved["conv1.weight"])
    assert torch.equal(model.layer4[1].bn2.running_var, saved["layer4.1.bn2.running_var"])
    assert torch.equal(model.fc.weight, fresh_fc) and model.fc.weight.shape == (5, 512)


def test_a_ddp_state_dict_loads_without_its_prefix_and_skip_patterns_leave_keys_fresh(project):
    from safetensors.torch import save_file

    state = {f"module.{k}": v for k, v in torchvision.models.resnet18(num_classes=5).state_dict().items()}
    save_file(state, project / "w.safetensors")
    plan = planned(project, "model.init.source=w.safetensors", "model.init.skip=[layer4.*, fc.bias]")
    assert "conv1.weight" in plan.loaded and "fc.weight" in plan.loaded and plan.missing == ()
    assert plan.skipped[-1] == "fc.bias" and all(k.startswith("layer4.") for k in plan.skipped[:-1])


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


def test_strict_names_every_key_that_does_not_fit(project):
    file = torchvision_resnet18(project / "weights")
    with pytest.raises(ConfigError) as e:
        planned(project, f"model.init.source={file}")
    assert str(e.value) == (
        f"command line 'model.init.source={file}': model.init.source: weights/resnet18.pth does not fit resnet18 "
        "with 5 classes: 2 differ in shape (fc.weight: [1000, 512] in the file, [5, 512] in the model; fc.bias: "
        "[1000] in the file, [5] in the model), 0 missing from the file, 0 not in the model. Under "
        "model.init.strict: true every key must load; set model.init.new_head=true for a fresh classifier (fc.weight, "
        "fc.bias), leave keys fresh with model.init.skip patterns, or set model.init.strict=false to load what fits.")


def test_resume_ignores_model_init(project, capsys):
    exp = synth(project / "experiments" / "ft.yaml", model="resnet18", classes=5, epochs=1)
    code, _, err = run_cli(["launch", exp, "tracking.enabled=false"], capsys)
    assert code == 0, err
    last = next((project / "checkpoints" / "ft").glob("*/last.pt"))
    code, _, err = run_cli(["launch", exp, "tracking.enabled=false", "trainer.epochs=2", "model.init.source=nowhere.pt",
                            "--resume", last], capsys)
    assert code == 0, err
    assert "note: model.init (nowhere.pt) is ignored: --resume continues from the checkpoint's weights.\n" in err


def test_classifier_keys_of_torchvision_models():
    from runner.weights.init import classifier_keys

    with torch.device("meta"):
        found = {name: classifier_keys(getattr(torchvision.models, name)())
                 for name in ("resnet18", "mobilenet_v3_small", "efficientnet_b0", "vit_b_32", "convnext_tiny")}
    assert found == {"resnet18": ["fc.weight", "fc.bias"],
                     "mobilenet_v3_small": ["classifier.3.weight", "classifier.3.bias"],
                     "efficientnet_b0": ["classifier.1.weight", "classifier.1.bias"],
                     "vit_b_32": ["heads.head.weight", "heads.head.bias"],
                     "convnext_tiny": ["classifier.2.weight", "classifier.2.bias"]}


@pytest.mark.slow
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


@pytest.mark.slow
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
