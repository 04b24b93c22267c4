"""Rules between the keys of the training-recipe sections (pipelines.train.mix, trainer.ema) that the
per-field types and ranges cannot say: settings that would silently do nothing or something else."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from runner.config.sections import EmaConfig, Experiment, LossConfig, MixConfig
from runner.errors import ConfigError

Locate = Callable[[str], tuple[Any, int | None]]


def check_recipes(cfg: Experiment, locate: Locate) -> None:
    if cfg.pipelines.eval is not None and cfg.pipelines.eval.mix is not None:
        raise _error(locate, "pipelines.eval.mix", "only the train pipeline's batches can be mixed; remove "
                                                   "'pipelines.eval.mix' (evaluation measures the model on the "
                                                   "images as they are).")
    if cfg.pipelines.train.mix is not None:
        check_mix(cfg.pipelines.train.mix, "pipelines.train.mix", locate)
    if cfg.trainer.ema is not None:
        check_ema(cfg.trainer.ema, "trainer.ema", locate)
    check_loss(cfg.trainer.loss, "trainer.loss", locate)


def check_loss(loss: LossConfig, key: str, locate: Locate) -> None:
    if loss.name == "bce":
        return
    default = LossConfig()
    for name in ("target_threshold", "sum_classes", "pos_weight"):
        if getattr(loss, name) != getattr(default, name):
            raise _error(locate, f"{key}.{name}", f"{getattr(loss, name)} is a setting of the binary cross entropy, but "
                                                  f"{key}.name is {loss.name}; set {key}.name=bce, or remove "
                                                  f"{key}.{name}.")


def check_mix(m: MixConfig, key: str, locate: Locate) -> None:
    default = MixConfig()
    cutmix = m.cutmix_alpha > 0 or m.cutmix_minmax is not None
    if m.mixup_alpha == 0 and not cutmix:
        raise _error(locate, key, "mixup_alpha and cutmix_alpha are both 0, so no batch would be mixed; set "
                                  f"{key}.mixup_alpha (e.g. 0.2) and/or {key}.cutmix_alpha (e.g. 1.0) above 0, or "
                                  f"remove '{key}'.")
    if m.prob == 0:
        raise _error(locate, f"{key}.prob", f"0 mixes no batch; set a chance above 0 (at most 1), or remove '{key}'.")
    if m.cutmix_minmax is not None:
        low, high = m.cutmix_minmax
        if low >= high:
            raise _error(locate, f"{key}.cutmix_minmax", f"[{low:g}, {high:g}]: the box's smallest side fraction "
                                                         "must be below its largest, e.g. [0.2, 0.8].")
        if m.cutmix_alpha not in (0, 1):
            raise _error(locate, f"{key}.cutmix_alpha", f"{m.cutmix_alpha:g} has no effect with {key}.cutmix_minmax "
                                                        "set: the box is drawn from the min-max fractions and lam is "
                                                        "its area (cutmix_alpha 1, as in timm); remove one of them.")
        if not m.correct_lam:
            raise _error(locate, f"{key}.correct_lam", f"false has no effect with {key}.cutmix_minmax set: lam is "
                                                       "always the min-max box's area; remove one of them.")
    if m.switch_prob != default.switch_prob and not (m.mixup_alpha > 0 and cutmix):
        only = "cutmix" if cutmix else "mixup"
        raise _error(locate, f"{key}.switch_prob", f"{m.switch_prob:g} chooses between mixup and cutmix, but only "
                                                   f"{only} is on; set both {key}.mixup_alpha and "
                                                   f"{key}.cutmix_alpha above 0, or remove switch_prob.")


def check_ema(e: EmaConfig, key: str, locate: Locate) -> None:
    default = EmaConfig()
    if not e.warmup:
        for name in ("warmup_gamma", "warmup_power", "min_decay"):
            if getattr(e, name) != getattr(default, name):
                raise _error(locate, f"{key}.{name}", f"{getattr(e, name):g} is set but {key}.warmup is false, so "
                                                      f"the decay would stay {e.decay:g} from the first update; set "
                                                      f"{key}.warmup=true, or remove {key}.{name}.")
    if e.min_decay > e.decay:
        raise _error(locate, f"{key}.min_decay", f"{e.min_decay:g} is above {key}.decay ({e.decay:g}): the warm-up's "
                                                 "decay rises to decay from min_decay, so min_decay must be at most "
                                                 "decay.")


def _error(locate: Locate, key: str, message: str) -> ConfigError:
    file, line = locate(key)
    return ConfigError(message, file=file, line=line, where=key)
