"""torchvision transforms written in YAML as calls: "RandomResizedCrop(224)", "Normalize(mean=[...], std=[...])".

Parsed with `ast` (literal arguments only) and looked up in a registry of transform classes.
"""
from __future__ import annotations

import ast
import inspect
from typing import Any

from runner.config.sections import TorchvisionConfig
from runner.errors import ConfigError, Locator, error_at
from runner.registry import Registry

# torchvision is imported where transforms are built, for start-up: `runner validate` checks their names
# without it (~2 s with torch).

TRANSFORM_NAMES = [
    "AutoAugment", "CenterCrop", "ColorJitter", "ConvertImageDtype", "GaussianBlur", "Grayscale",
    "Normalize", "PILToTensor", "RandAugment", "RandomCrop", "RandomErasing", "RandomGrayscale",
    "RandomHorizontalFlip", "RandomResizedCrop", "RandomRotation", "RandomVerticalFlip", "Resize",
    "ToTensor", "TrivialAugmentWide",
]


def transform_registry() -> Registry:
    import torchvision.transforms as T

    reg: Registry = Registry("transform")
    for name in TRANSFORM_NAMES:
        reg.add(name, getattr(T, name))
    return reg


def parse_transform(text: str) -> tuple[str, list[Any], dict[str, Any]]:
    """'Resize(256)' -> ('Resize', [256], {}); only literal arguments."""
    try:
        node = ast.parse(text.strip(), mode="eval").body
    except SyntaxError as e:
        raise ValueError(f"syntax error: {e.msg}") from None
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
        raise ValueError("write a transform as a call, e.g. RandomResizedCrop(224) or ToTensor()")
    try:
        args = [ast.literal_eval(a) for a in node.args]
        kwargs = {k.arg: ast.literal_eval(k.value) for k in node.keywords if k.arg}
    except ValueError:
        raise ValueError("arguments must be literals (numbers, strings, lists)") from None
    return node.func.id, args, kwargs


def _build(texts: list[str], key: str, locate: Locator | None, registry: Registry) -> list:
    out = []
    for i, text in enumerate(texts):
        at = error_at(f"{key}[{i}]", locate)
        try:
            name, args, kwargs = parse_transform(text)
        except ValueError as e:
            raise ConfigError(f"'{text}': {e}.", **at) from None
        cls = registry.get(name, **at)
        try:
            inspect.signature(cls).bind(*args, **kwargs)
            out.append(cls(*args, **kwargs))
        except (TypeError, ValueError) as e:
            raise ConfigError(f"'{text}': {e}. Signature: {name}{inspect.signature(cls)}.", **at) from None
    return out


def check_transforms(cfg: TorchvisionConfig, locate: Locator | None = None) -> None:
    build_transforms(cfg, locate)


def build_transforms(cfg: TorchvisionConfig, locate: Locator | None = None):
    """(train, eval) torchvision.transforms.Compose objects."""
    import torchvision.transforms as T

    registry = transform_registry()
    return (T.Compose(_build(cfg.train, "data.torchvision.train", locate, registry)),
            T.Compose(_build(cfg.eval, "data.torchvision.eval", locate, registry)))
