"""runner's own augmentations, composed of DALI operators: pipeline steps `augment.*`, as `auto_aug.*` are DALI's.

Each is a function over DALI DataNodes (like nvidia.dali.auto_aug's policies), so it runs on the GPU inside the
pipeline and draws from DALI's RNG. `COMPOSITIONS` is the table the DSL's catalog reads: the argument types it
checks, a value check that runs before anything is built, and whether the step needs DALI conditionals.
`runner compile` emits `from runner import augment` and calls these functions by name.

The compositions import DALI, so they are loaded when first used (a pipeline built, the operator catalog made):
checking an experiment, or mixing a batch (runner.augment.mix, mixup and CutMix on the device), needs no DALI.
"""
from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from runner.augment.policy import parse_timm_policy
from runner.errors import ConfigError


@dataclass(frozen=True)
class Arg:
    type: str                             # the DALI argument type the DSL checks a constant against; "": `check` does
    doc: str                              # what it means, for `runner ops NAME`
    kind: str = ""                        # the type in words where `type` is ""


@dataclass(frozen=True)
class Composition:
    module: str                           # the module of runner.augment that defines the step's function
    args: dict[str, Arg]
    check: str                            # MODULE:FUNCTION: the constant arguments -> raises ConfigError(where=...)
    streams: frozenset[str] = field(default_factory=frozenset)  # arguments that may take a stream
    conditionals: bool = False            # built on DALI's conditional execution (auto_aug's select)


def load(step: str) -> Callable:
    """The function of composition `step` ("augment.random_erasing"), its module imported (and DALI with it)."""
    module = importlib.import_module(f"runner.augment.{COMPOSITIONS[step].module}")
    return getattr(module, step.rpartition(".")[2])


def resolve_check(reference: str) -> Callable[[dict], None]:
    """The check a composition names as MODULE:FUNCTION (MODULE empty: this package)."""
    module, _, name = reference.partition(":")
    return getattr(importlib.import_module(f"runner.augment.{module}" if module else __name__), name)


def check_timm_auto_augment(args: dict) -> None:
    """Raise a ConfigError for a policy string timm's grammar does not give, or a fill value that is not a number;
    `where` names the argument, the DSL adds the step."""
    if "policy" in args:
        try:
            parse_timm_policy(args["policy"])
        except ConfigError as e:
            raise ConfigError(e.message, where="argument 'policy'") from None
    fill = args.get("fill_value", 128)
    if fill is not None and (isinstance(fill, bool) or not isinstance(fill, (int, float))):
        raise ConfigError(f"the value warps pad with (0-255), or None to repeat the border; got {fill!r}.",
                          where="argument 'fill_value'")


COMPOSITIONS = {
    "augment.random_erasing": Composition(
        module="erasing",
        args={"probability": Arg("FLOAT", "chance an image is erased (timm --reprob)"),
              "min_area": Arg("FLOAT", "smallest box area, a fraction of the image's"),
              "max_area": Arg("FLOAT", "largest box area, a fraction of the image's"),
              "min_aspect": Arg("FLOAT", "smallest box height / width (log-uniform)"),
              "max_aspect": Arg("", "largest box height / width; None: 1 / min_aspect", "a number or None"),
              "mode": Arg("STRING", "fill: const (0), rand (N(0, 1) per channel), pixel (per pixel) (timm --remode)"),
              "min_count": Arg("INT32", "fewest boxes per erased image"),
              "max_count": Arg("", "most boxes per erased image (timm --recount); None: min_count",
                               "an integer or None"),
              "layout": Arg("STRING", "the images' layout: CHW or HWC")},
        check="erasing:check_random_erasing"),
    "augment.timm_auto_augment": Composition(
        module="timm_augment",
        args={"policy": Arg("STRING", "timm's RandAugment string (timm --aa), such as rand-m9-mstd0.5-inc1"),
              "shape": Arg("_INT32_VEC", "(height, width) that scales translations; default: each image's own"),
              "fill_value": Arg("", "what rotations, shears and translations pad with; None: repeat the border",
                                "a number or None"),
              "interp_type": Arg("INTERP_TYPE", "warp interpolation (DALI's default: INTERP_LINEAR)")},
        check=":check_timm_auto_augment", streams=frozenset({"shape"}), conditionals=True),
}



def __getattr__(name: str) -> Any:
    """augment.random_erasing, augment.timm_auto_augment: what `runner compile`'s code calls, loaded on first use."""
    step = f"augment.{name}"
    if step in COMPOSITIONS:
        return load(step)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["COMPOSITIONS", "Arg", "Composition", "load", "parse_timm_policy", "resolve_check"]
