"""Models by name: torchvision architectures, randomly initialised (nothing is downloaded)."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from runner.config.sections import ModelConfig
from runner.errors import ConfigError, Locator, error_at
from runner.registry import Registry

MODELS: Registry[Callable[..., Any]] = Registry("model")

_TORCHVISION = [
    "resnet18", "resnet34", "resnet50", "resnet101", "resnet152", "wide_resnet50_2", "resnext50_32x4d",
    "mobilenet_v2", "mobilenet_v3_small", "mobilenet_v3_large", "efficientnet_b0", "efficientnet_b1",
    "efficientnet_b2", "efficientnet_b3", "regnet_y_400mf", "regnet_y_1_6gf", "convnext_tiny",
    "vit_b_16", "vit_b_32", "swin_t",
]


def _torchvision_builder(name: str) -> Callable[..., Any]:
    def build(num_classes: int, **kwargs: Any):
        import torchvision

        return getattr(torchvision.models, name)(weights=None, num_classes=num_classes, **kwargs)
    build.__name__ = name
    return build


for _name in _TORCHVISION:
    MODELS.add(_name, _torchvision_builder(_name))


def check_model(cfg: ModelConfig, locate: Locator | None = None) -> None:
    """Raise ConfigError for an unknown model, or kwargs its constructor rejects (checked on 'meta').

    `locate(key)` gives the file and line of a key for the error."""
    build = MODELS.get(cfg.name, **error_at("model.name", locate))
    if cfg.kwargs:
        import torch

        try:
            with torch.device("meta"):
                build(cfg.num_classes, **cfg.kwargs)
        except Exception as e:  # TypeError for unknown names, ValueError/AssertionError for bad values
            reason = (str(e).strip().splitlines() or [type(e).__name__])[0].rstrip(".!")
            raise ConfigError(f"{cfg.name} does not accept these arguments: {reason}. It takes: "
                              f"{', '.join(accepted_kwargs(cfg.name)) or 'no extra arguments'}.",
                              **error_at("model.kwargs", locate)) from None


def accepted_kwargs(name: str) -> list[str]:
    """Keyword arguments the torchvision model class takes (besides num_classes)."""
    import inspect

    import torchvision

    builder = getattr(torchvision.models, name)
    model_cls = inspect.signature(builder).return_annotation
    if not inspect.isclass(model_cls):
        return []
    return [p for p in inspect.signature(model_cls.__init__).parameters
            if p not in ("self", "num_classes", "args", "kwargs")]


def create_model(cfg: ModelConfig):
    """A fresh torch.nn.Module for `cfg`."""
    return MODELS.get(cfg.name, where="model.name")(cfg.num_classes, **cfg.kwargs)
