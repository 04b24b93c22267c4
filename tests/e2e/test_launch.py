"""`runner launch` end to end on the CPU: real DALI, real torch, a real MLflow store, real gloo DDP."""
import pytest
from mlflow import MlflowClient

from tests.helpers import LAYOUTS as LAYOUT_PIPELINE
from tests.helpers import run_cli


def only_run(project, experiment="tiny"):
    client = MlflowClient(f"sqlite:///{project}/mlflow.db")
    exp = client.get_experiment_by_name(experiment)
    runs = client.search_runs([exp.experiment_id])
    assert len(runs) == 1
    return client, runs[0]


def test_launch_trains_evaluates_and_records_the_run(tiny, project, capsys):
    code, out, err = run_cli(["launch", tiny], capsys)
    assert code == 0, err
    assert "tiny: summary" in out and "FINISHED" in out and "eval top-1" in out
    client, run = only_run(project)
    assert run.info.status == "FINISHED"
    # params: the flattened resolved config, seeds and the data fingerprint
    p = run.data.params
    assert p["model.name"] == "resnet18" and p["data.batch_size"] == "4" and p["optimizer.lr"] == "0.02"
    assert p["data.fingerprint.train.files"] == "24" and p["data.fingerprint.eval.files"] == "9"
    assert p["seed.torch"] == "3"
    # tags: code, versions, machine
    t = run.data.tags
    assert t["runner.world_size"] == "1" and t["runner.accelerator"] == "cpu"
    assert t["version.dali"].startswith("2.") and "git.commit" in t
    # metrics by group; per-epoch ones at steps 1 and 2
    h = {k: client.get_metric_history(run.info.run_id, k) for k in
         ("eval/top1", "eval/samples", "epoch/images_per_s", "epoch/data_wait_share", "train/loss",
          "cpu/train_thread_busy_pct")}
    assert [m.step for m in h["eval/top1"]] == [1, 2]
    assert [m.value for m in h["eval/samples"]] == [9, 9]  # every val image, once
    assert all(m.value > 0 for m in h["epoch/images_per_s"])
    assert all(0 <= m.value < 1 for m in h["epoch/data_wait_share"])
    # 24 train images, batch 4: 6 steps an epoch, logged every 2 steps
    assert [m.step for m in h["train/loss"]] == [2, 4, 6, 8, 10, 12]
    # the training thread's share of the wall time on a core: it trains on the CPU here, so most of it
    assert [m.step for m in h["cpu/train_thread_busy_pct"]] == [2, 4, 6, 8, 10, 12]
    assert all(10 < m.value < 110 for m in h["cpu/train_thread_busy_pct"])
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {"experiment.yaml", "summary.json", "pipelines"} <= artifacts
    # the checkpoint of the last epoch
    ckpt = project / "checkpoints" / "tiny" / run.info.run_id / "last.pt"
    assert ckpt.is_file()
    import torch

    state = torch.load(ckpt, weights_only=False)
    assert state["step"] == 12 and state["epoch"] == 2 and state["run_id"] == run.info.run_id


def test_plain_log_lines_when_not_a_terminal(tiny, capsys):
    code, out, _ = run_cli(["launch", tiny, "trainer.epochs=1", "tracking.enabled=false"], capsys)
    assert code == 0
    assert "epoch 1/1 step 2/6 (global 2)" in out and "img/s" in out
    assert "epoch 1/1 done" in out


def test_max_steps_stops_early(tiny, project, capsys):
    code, out, err = run_cli(["launch", tiny, "trainer.max_steps=3", "trainer.epochs=5"], capsys)
    assert code == 0, err
    client, run = only_run(project)
    assert [m.step for m in client.get_metric_history(run.info.run_id, "train/loss")][-1] == 3


def test_two_process_gloo_ddp(tiny, project, capsys):
    import subprocess
    import sys

    run = subprocess.run([sys.executable, "-m", "runner", "launch", tiny, "trainer.devices=2"],
                         cwd=project, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert run.stdout.count("tiny: summary") == 1  # only rank 0 prints
    assert "starting 2 processes per node with torchrun" in run.stderr
    client, r = only_run(project)  # one MLflow run for both ranks
    assert r.data.tags["runner.world_size"] == "2"
    # 24 images over 2 ranks, batch 4: 12 per rank, 3 steps an epoch; eval counts each val image once
    assert [m.step for m in client.get_metric_history(r.info.run_id, "train/loss")] == [2, 3, 4, 6]
    assert [m.value for m in client.get_metric_history(r.info.run_id, "eval/samples")] == [9, 9]
    ips = client.get_metric_history(r.info.run_id, "loader/images_per_s")
    per = client.get_metric_history(r.info.run_id, "loader/images_per_s_per_device")
    assert ips[-1].value == pytest.approx(2 * per[-1].value)


# the loader test's data and train pipeline (its output layout and dtype are params), with a model and an eval
LAYOUTS = """\
name: layouts
seed: 5
model: {{name: resnet18, num_classes: 3}}
optimizer: {{lr: 0.02}}
trainer: {{epochs: 1, log_every_n_steps: 1, deterministic: true}}
tracking: {{experiment: layouts}}
""" + LAYOUT_PIPELINE + """\
  eval: {{use: imagenet_eval, params: {{size: 32, resize_shorter: 36}}}}
"""


def test_a_channels_last_pipeline_trains_as_the_channels_first_one_and_fp16_images_train_in_fp32(
        project, image_dataset, capsys):
    import torch

    (project / "experiments" / "layouts.yaml").write_text(LAYOUTS.format(root=image_dataset))
    losses = {}
    try:
        for name, overrides in {"chw": [], "hwc": ["pipelines.train.params.layout=HWC"],
                                "fp16": ["pipelines.train.params.dtype=FLOAT16"]}.items():
            code, out, err = run_cli(["launch", "experiments/layouts.yaml", *overrides,
                                      f"tracking.experiment=layouts-{name}"], capsys)
            assert code == 0, err
            client, run = only_run(project, f"layouts-{name}")
            assert run.data.params["trainer.precision"] == "fp32"
            losses[name] = [m.value for m in client.get_metric_history(run.info.run_id, "train/loss")]
    finally:
        torch.use_deterministic_algorithms(False)  # train.configure_torch sets it for the whole process
    assert len(losses["chw"]) == 6  # 24 images, batch 4
    assert losses["hwc"] == losses["chw"]  # the same images, the same model input, bit for bit
    # fp16 images, rounded once, then the same fp32 model: the first loss (before any update) nearly the same
    assert losses["fp16"][0] != losses["chw"][0] and losses["fp16"][0] == pytest.approx(losses["chw"][0], rel=5e-3)
