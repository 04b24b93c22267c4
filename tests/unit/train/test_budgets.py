"""trainer.stop_at, trainer.time_to and trainer.eval_tta without training: the budget's bookkeeping, flip TTA's
averaged logits, and the errors. tests/e2e/test_budgets.py launches to a target."""
from __future__ import annotations

import pytest
import torch

from runner.config.sections import StopAtConfig, TimeToConfig, TrainerConfig
from runner.models.device import predict
from runner.train.budgets import Budgets
from tests.helpers import write


def test_time_to_each_value_once_and_the_stop():
    tc = TrainerConfig(stop_at=StopAtConfig(value=0.7), time_to=TimeToConfig(values=[0.5, 0.6, 0.7]))
    b = Budgets(tc)
    assert b.after_evaluation({"eval/top1": 0.4}, epoch=1, seconds=10.0) == ({}, None)
    got, why = b.after_evaluation({"eval/top1": 0.62}, epoch=2, seconds=20.0)
    assert got == {"time_to/eval/top1/0.5/seconds": 20.0, "time_to/eval/top1/0.5/epochs": 2.0,
                   "time_to/eval/top1/0.6/seconds": 20.0, "time_to/eval/top1/0.6/epochs": 2.0} and why is None
    resumed = Budgets(tc, b.state(25.0))  # a resume: 25 s before it, the values reached so far
    got, why = resumed.after_evaluation({"eval/top1": 0.71}, epoch=3, seconds=5.0)
    assert got == {"time_to/eval/top1/0.7/seconds": 30.0, "time_to/eval/top1/0.7/epochs": 3.0}
    assert why == "eval/top1 0.71 >= 0.7 at epoch 3 (trainer.stop_at)"
    loss = Budgets(TrainerConfig(stop_at=StopAtConfig(metric="eval/loss", value=1.0, mode="min")))
    assert loss.after_evaluation({"eval/loss": 1.2}, epoch=1, seconds=1)[1] is None
    assert loss.after_evaluation({"eval/loss": 0.9}, epoch=2, seconds=2)[1] == \
        "eval/loss 0.9 <= 1 at epoch 2 (trainer.stop_at)"


def test_flip_tta_averages_the_mirrored_logits():
    net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 4 * 5, 6))
    images = torch.randn(2, 3, 4, 5, generator=torch.Generator().manual_seed(0))
    assert torch.equal(predict(net, images), net(images))
    assert torch.allclose(predict(net, images, "flip"), (net(images) + net(images.flip(3))) / 2)
    assert not torch.allclose(predict(net, images, "flip"), net(images))  # the mirror changes this net's logits


@pytest.mark.parametrize("text,expected", [
    ("trainer.stop_at={metric: eval/top1}", "command line 'trainer.stop_at={metric: eval/top1}': trainer.stop_at: "
                                            "needs value: the metric's value to stop at, e.g. value: 0.75 for 75% "
                                            "top-1."),
    ("trainer.time_to={metric: train/top1, values: [0.5]}", "command line 'trainer.time_to={metric: train/top1, "
                                                            "values: [0.5]}': trainer.time_to.metric: 'train/top1' is "
                                                            "not an evaluation metric. Did you mean 'eval/top1'? It is "
                                                            "read after each evaluation: eval/top1, eval/top5, "
                                                            "eval/loss, or the same of another eval split or the EMA "
                                                            "model (eval_NAME/top1, eval_ema/top1, ...)."),
])
def test_bad_budgets(project, text, expected):
    from runner.config.load import load_experiment
    from runner.errors import ConfigError

    path = write(project, "pipelines: {train: {use: imagenet_train}}\n")
    with pytest.raises(ConfigError) as e:
        load_experiment(path, [text])
    assert str(e.value) == expected
