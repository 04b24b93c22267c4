"""trainer.stop_at, trainer.time_to and trainer.eval_tta: the budget's bookkeeping, a CPU launch that stops at its
target and logs the time-to metrics (shown by runner compare), a resume that keeps the clock, flip TTA, errors."""
from __future__ import annotations

from mlflow import MlflowClient

from runner.train.budgets import time_to_key
from tests.helpers import launched, run_cli, write, write_image_folder

EXPERIMENT = """\
name: budget
seed: 3
model: {name: resnet18, num_classes: 3}
optimizer: {name: lamb, lr: 0.005, weight_decay: 0.02}
trainer:
  epochs: 4
  log_every_n_steps: 2
  loss: {name: bce, target_threshold: 0.2}
  eval_tta: flip
  stop_at: {metric: eval/top1, value: 0.0}
  time_to: {metric: eval/top1, values: [0.0, 1.5]}
data: {root: data, batch_size: 4}
pipelines:
  train: {use: imagenet_train, params: {size: 32}}
  eval: {use: imagenet_eval, params: {size: 32, resize_shorter: 36}}
tracking: {experiment: budget}
"""


def test_a_launch_stops_at_its_target_and_compare_shows_the_time(project, capsys):
    write(project, EXPERIMENT, "budget.yaml")
    write_image_folder(project / "data" / "train", classes=3, per_class=8, seed=1)
    write_image_folder(project / "data" / "val", classes=3, per_class=3, seed=2)
    out = launched(project, "experiments/budget.yaml")
    assert "stopped: eval/top1 " in out and ">= 0 at epoch 1 (trainer.stop_at)" in out
    client = MlflowClient(f"sqlite:///{project}/mlflow.db")
    (run,) = client.search_runs([client.get_experiment_by_name("budget").experiment_id])
    assert run.info.status == "FINISHED" and run.data.tags["runner.stopped_at"].endswith("at epoch 1 (trainer.stop_at)")
    epochs = client.get_metric_history(run.info.run_id, "eval/top1")
    assert [m.step for m in epochs] == [1]  # stopped after the first of 4 epochs
    assert run.data.metrics[time_to_key("eval/top1", 0.0, "epochs")] == 1.0
    assert 0 < run.data.metrics[time_to_key("eval/top1", 0.0, "seconds")] < 600
    assert time_to_key("eval/top1", 1.5, "epochs") not in run.data.metrics  # never reached
    assert run.data.params["trainer.loss.name"] == "bce" and run.data.params["optimizer.name"] == "lamb"
    code, out, err = run_cli(["compare", run.info.run_id, "--out", "cmp"], capsys)
    assert code == 0, err
    assert "min to 0" in out and "ep to 0" in out
    assert "| epochs to eval/top1 0 | A | 1 | 1 | - | 1 – 1 |" in (project / "cmp" / "compare.md").read_text()
