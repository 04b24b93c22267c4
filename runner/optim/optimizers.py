"""Optimizers (timm.optim's factory) and learning-rate schedules by name.

Schedules are per optimizer step (not per epoch), so warm-up and decay are smooth and a run cut
by `trainer.max_steps` follows the same curve as a full one up to that point.
"""
from __future__ import annotations

import fnmatch
import inspect
from collections.abc import Callable
from dataclasses import dataclass

from runner.config.sections import OptimizerConfig
from runner.errors import ConfigError, did_you_mean
from runner.files import facts_key, installed_version, kept_facts

# timm.optim is imported where an optimizer is made: its names and parameters are kept facts (start-up).

# runner's own keys that reach the optimizer's constructor when it takes them; the rest go through optimizer.kwargs
COMMON_ARGS = ("momentum", "nesterov", "betas", "eps")
COMMON_OPTIMIZERS = ("sgd", "momentum", "adamw", "lamb", "lars", "lion", "rmsproptf", "adafactor")


@dataclass(frozen=True)
class OptimizerInfo:
    description: str                 # timm's words for it
    parameters: frozenset[str] | None  # its constructor's keyword arguments; None: not buildable here


def optimizer_infos() -> dict[str, OptimizerInfo]:
    """timm.optim's optimizers by name: read from timm once per installed version, then from runner's cache, so that
    checking optimizer.name does not import timm (seconds: it imports torchvision)."""
    key = facts_key(installed_version("timm") or "no timm", installed_version("torch") or "", sources=(__file__,))
    return kept_facts("timm-optimizers", key, _read_optimizer_infos)


def _read_optimizer_infos() -> dict[str, OptimizerInfo]:
    import timm.optim

    return {name: OptimizerInfo(timm.optim.get_optimizer_info(name).description, _constructor_parameters(name))
            for name in timm.optim.list_optimizers()}


def _constructor_parameters(name: str) -> frozenset[str] | None:
    """The keyword arguments optimizer `name`'s constructor takes; None for one this machine cannot build (timm's
    apex and bitsandbytes optimizers need those packages and CUDA)."""
    import timm.optim

    cls = timm.optim.get_optimizer_info(name).opt_class
    if isinstance(cls, str):  # imported on demand by timm
        try:
            cls = timm.optim.get_optimizer_class(name, bind_defaults=False)
        except (AssertionError, ImportError):
            return None
    return frozenset(inspect.signature(cls).parameters) - {"params", "self"}


def optimizer_names(pattern: str | None = None) -> list[str]:
    """The optimizers timm.optim's factory builds (optimizer.name), optionally those matching `pattern`."""
    names = list(optimizer_infos())
    if not pattern:
        return names
    if any(c in pattern for c in "*?["):
        return [n for n in names if fnmatch.fnmatchcase(n, pattern)]
    return [n for n in names if pattern in n]


def optimizer_parameters(name: str) -> set[str] | None:
    """The keyword arguments optimizer `name`'s constructor takes; None for one this machine cannot build."""
    takes = optimizer_infos()[name].parameters
    return None if takes is None else set(takes)


def check_optimizer(cfg: OptimizerConfig, model_name: str, at: Callable[[str], dict]) -> None:
    """optimizer.name is one of timm's, and every setting written reaches its constructor: a ConfigError at the
    first key that would be dropped."""
    names = optimizer_names()
    if cfg.name not in names:
        common = ", ".join(n for n in COMMON_OPTIMIZERS if n in names)
        raise ConfigError(f"unknown optimizer '{cfg.name}'.{did_you_mean(cfg.name, names)} optimizer.name takes one of "
                          f"timm.optim's {len(names)} optimizers, e.g. {common}; `runner optimizers` lists them all "
                          "with what they are.", **at("optimizer.name"))
    takes = optimizer_parameters(cfg.name)
    if takes is None:
        raise ConfigError(f"{cfg.name} cannot be built on this machine: timm imports it from apex or bitsandbytes, "
                          "which need CUDA and that package installed; choose another optimizer (`runner optimizers`).",
                          **at("optimizer.name"))
    for key in ("betas", "eps"):
        if getattr(cfg, key) is not None and key not in takes:
            raise ConfigError(f"{cfg.name} takes no {key}; remove optimizer.{key}, or choose an optimizer that does "
                              "(adamw, lamb, ...).", **at(f"optimizer.{key}"))
    if cfg.nesterov and "nesterov" not in takes:
        raise ConfigError(f"{cfg.name} has no Nesterov momentum; remove optimizer.nesterov, or use sgd or lars.",
                          **at("optimizer.nesterov"))
    for key in cfg.kwargs:
        if key in COMMON_ARGS or key in ("lr", "weight_decay", "params"):
            raise ConfigError(f"'{key}' is a key of the optimizer section itself: write optimizer.{key}, not "
                              f"optimizer.kwargs.{key}.", **at(f"optimizer.kwargs.{key}"))
        if key not in takes:
            raise ConfigError(f"{cfg.name} takes no argument '{key}'.{did_you_mean(key, takes)} Its constructor takes: "
                              f"{', '.join(sorted(takes))}.", **at(f"optimizer.kwargs.{key}"))
    if cfg.layer_decay is not None and not model_name.startswith("timm/"):
        raise ConfigError(f"layer-wise lr decay groups a model's layers from the head down, which timm's models say "
                          f"(group_matcher) and '{model_name}' does not; use a timm model (model.name=timm/resnet50) "
                          "or remove optimizer.layer_decay.", **at("optimizer.layer_decay"))


def scaled_lr(cfg: OptimizerConfig, global_batch: int) -> float:
    """optimizer.lr, scaled linearly when a reference batch is given (Goyal et al. 2017)."""
    if cfg.lr_reference_batch is None:
        return cfg.lr
    return cfg.lr * global_batch / cfg.lr_reference_batch


def create_optimizer(model, cfg: OptimizerConfig, global_batch: int):
    """timm's create_optimizer_v2 with the section's settings: parameter groups without weight decay on norms and
    biases (no_decay_on_norm_and_bias) and with layer-wise lr scales (layer_decay), each group's lr its scale x the
    scaled lr, so the per-step schedule (a LambdaLR over each group's initial lr) keeps the ratios."""
    import timm.optim

    takes = optimizer_parameters(cfg.name)
    extra = {key: getattr(cfg, key) for key in COMMON_ARGS if key in takes and getattr(cfg, key) is not None}
    lr = scaled_lr(cfg, global_batch)
    optimizer = timm.optim.create_optimizer_v2(
        model, opt=cfg.name, lr=lr, weight_decay=cfg.weight_decay, filter_bias_and_bn=cfg.no_decay_on_norm_and_bias,
        layer_decay=cfg.layer_decay, **extra, **cfg.kwargs)
    for group in optimizer.param_groups:
        group["lr"] = lr * group.get("lr_scale", 1.0)
    return optimizer


