"""A checkpoint's model evaluated on an experiment's eval pipeline, in this one process (no training, no run)."""
from __future__ import annotations

from typing import Any

from runner.errors import ConfigError


def evaluate_checkpoint(v, state: dict[str, Any]) -> dict[str, float]:
    """eval/top1, eval/top5, eval/loss and eval/samples of the checkpoint's model on `v`'s eval split."""
    from torch import nn

    from runner.dist import Dist
    from runner.loaders import create_loader
    from runner.train import autocast_args, build_model, evaluate

    d = Dist(accelerator=v.target.accelerator)
    loader = create_loader(v, "eval", d)
    if loader is None:
        raise ConfigError("the experiment has no eval pipeline to evaluate the checkpoint with; set pipelines.eval.",
                          **v.loaded.at("pipelines.eval"))
    model = build_model(v.config, d)
    model.load_state_dict(state["model"])
    tc = v.config.trainer
    return evaluate(model, loader, nn.CrossEntropyLoss(label_smoothing=tc.label_smoothing), d,
                    autocast_args(tc.precision, d.device), tc.channels_last)
