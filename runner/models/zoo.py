"""Models by name: torchvision's classification architectures, and timm's as `timm/<name>` when timm is installed.

Every model starts from random weights (or model.init's, runner/weights/init.py); nothing is downloaded.
"""
from __future__ import annotations

import contextlib
import functools
import inspect
import re
from collections.abc import Callable, Iterator
from typing import Any

from runner.config.sections import ModelConfig
from runner.errors import ConfigError, Locator, did_you_mean, error_at
from runner.registry import Registry

# torch, torchvision and timm are imported where a model is built, for start-up: `runner validate` checks a
# model's name from kept lists without them (~5 s).

TIMM_PREFIX = "timm/"
TIMM_EXTRA = "pip install 'timm>=1.0' (a dependency of runner)"

MODELS: Registry[Callable[..., Any]] = Registry("model")

# torchvision.models.list_models(module=torchvision.models) of torchvision 0.29, written out so that checking a
# name does not import torchvision (3 s); tests/test_models.py holds it to the installed torchvision's list
TORCHVISION_MODELS = (
    "alexnet", "convnext_base", "convnext_large", "convnext_small", "convnext_tiny", "densenet121", "densenet161",
    "densenet169", "densenet201", "efficientnet_b0", "efficientnet_b1", "efficientnet_b2", "efficientnet_b3",
    "efficientnet_b4", "efficientnet_b5", "efficientnet_b6", "efficientnet_b7", "efficientnet_v2_l",
    "efficientnet_v2_m", "efficientnet_v2_s", "googlenet", "inception_v3", "maxvit_t", "mnasnet0_5", "mnasnet0_75",
    "mnasnet1_0", "mnasnet1_3", "mobilenet_v2", "mobilenet_v3_large", "mobilenet_v3_small", "regnet_x_16gf",
    "regnet_x_1_6gf", "regnet_x_32gf", "regnet_x_3_2gf", "regnet_x_400mf", "regnet_x_800mf", "regnet_x_8gf",
    "regnet_y_128gf", "regnet_y_16gf", "regnet_y_1_6gf", "regnet_y_32gf", "regnet_y_3_2gf", "regnet_y_400mf",
    "regnet_y_800mf", "regnet_y_8gf", "resnet101", "resnet152", "resnet18", "resnet34", "resnet50",
    "resnext101_32x8d", "resnext101_64x4d", "resnext50_32x4d", "shufflenet_v2_x0_5", "shufflenet_v2_x1_0",
    "shufflenet_v2_x1_5", "shufflenet_v2_x2_0", "squeezenet1_0", "squeezenet1_1", "swin_b", "swin_s", "swin_t",
    "swin_v2_b", "swin_v2_s", "swin_v2_t", "vgg11", "vgg11_bn", "vgg13", "vgg13_bn", "vgg16", "vgg16_bn", "vgg19",
    "vgg19_bn", "vit_b_16", "vit_b_32", "vit_h_14", "vit_l_16", "vit_l_32", "wide_resnet101_2", "wide_resnet50_2",
)
# GoogLeNet and Inception v3 return their auxiliary classifiers' logits beside the main ones in training; the loss
# reads one output, so they are built without them (init_weights=True: torchvision's default, said without a warning)
_TORCHVISION_FIXED = {"googlenet": {"aux_logits": False}, "inception_v3": {"aux_logits": False}}
_TORCHVISION_DEFAULTS = {"googlenet": {"init_weights": True}, "inception_v3": {"init_weights": True}}

# constructor arguments runner sets itself: the number of classes, and no pretrained weights (nothing downloads)
_RUNNER_SETS = {"num_classes": "model.num_classes sets it",
                "weights": "models start from random weights unless model.init names weights to load", "progress": "nothing is downloaded",
                "pretrained": "models start from random weights unless model.init names weights to load", "pretrained_cfg": "models start from random weights unless model.init names weights to load",
                "pretrained_cfg_overlay": "models start from random weights unless model.init names weights to load",
                "checkpoint_path": "models start from random weights unless model.init names weights to load", "cache_dir": "nothing is downloaded",
                "device": "trainer.accelerator places the model", "dtype": "trainer.precision sets the arithmetic"}


def _torchvision_builder(name: str) -> Callable[..., Any]:
    def build(num_classes: int, **kwargs: Any):
        import torchvision

        kwargs = {**_TORCHVISION_DEFAULTS.get(name, {}), **kwargs, **_TORCHVISION_FIXED.get(name, {})}
        return torchvision.models.get_model_builder(name)(weights=None, num_classes=num_classes, **kwargs)
    build.__name__ = name
    return build


for _name in TORCHVISION_MODELS:
    MODELS.add(_name, _torchvision_builder(_name))


def _import_timm():
    """timm, or None when it is not installed."""
    try:
        import timm
    except ImportError:
        return None
    return timm


def _timm_builder(name: str) -> Callable[..., Any]:
    def build(num_classes: int, **kwargs: Any):
        import timm

        return timm.create_model(name, pretrained=False, num_classes=num_classes, **kwargs)
    build.__name__ = name
    return build


@functools.cache
def timm_models() -> Registry[Callable[..., Any]] | None:
    """timm's architectures as `timm/<name>` (timm.list_models()), or None when timm is not installed."""
    timm = _import_timm()
    if timm is None:
        return None
    registry: Registry[Callable[..., Any]] = Registry(
        "model", listing=lambda names: f"`runner models timm/` lists timm's {len(names)} models (a glob narrows it: "
                                       "`runner models 'timm/resnet*'`).")
    for name in timm.list_models():
        registry.add(TIMM_PREFIX + name, _timm_builder(name))
    return registry


def model_sources(pattern: str | None = None) -> list[tuple[str, str]]:
    """(name, source) of every name model.name accepts, torchvision's then timm's, each sorted; with `pattern`,
    those containing it, or matching it as a glob (as Registry.names)."""
    rows = [(n, "torchvision") for n in MODELS.names(pattern)]
    timm = timm_models()
    if timm is not None:
        rows += [(n, "timm") for n in timm.names(pattern)]
    return rows


def find_model(name: str, at: dict[str, Any]) -> Callable[..., Any]:
    """The builder `name` resolves to, or a ConfigError at `at` (error_at's keyword arguments)."""
    if name.startswith(TIMM_PREFIX):
        timm = timm_models()
        if timm is None:
            raise ConfigError(f"{name} is one of timm's models, and timm is not installed. Install it: "
                              f"{TIMM_EXTRA}; `runner models timm/` then lists its models.", **at)
        if name not in timm and "." in name:
            return _tagged_timm_builder(name, timm, at)
        return timm.get(name, **at)
    timm = timm_models() if name not in MODELS else None
    if timm is not None and TIMM_PREFIX + name in timm:
        raise ConfigError(f"unknown model '{name}'. torchvision has no {name}; timm's is written "
                          f"'{TIMM_PREFIX}{name}'.", **at)
    return MODELS.get(name, **at)


def _tagged_timm_builder(name: str, registry: Registry, at: dict[str, Any]) -> Callable[..., Any]:
    """`timm/ARCH.TAG` (timm/resnet50.a1_in1k): the architecture built under the pretrained tag's configuration
    (its classifier names, mean, std), randomly initialised as every model is; model.init loads the weights."""
    import timm

    timm_name = name[len(TIMM_PREFIX):]
    arch, tag = timm_name.split(".", 1)
    registry.get(TIMM_PREFIX + arch, **at)  # an unknown architecture: the registry's error and nearest names
    tagged = timm.list_pretrained(f"{arch}.*")
    if timm_name not in tagged:
        tags = [t.split(".", 1)[1] for t in tagged]
        raise ConfigError(f"unknown model '{name}': timm's {arch} has no pretrained tag '{tag}'."
                          f"{did_you_mean(tag, tags)} Its tags: {', '.join(tags) or 'none'}.", **at)
    return _timm_builder(timm_name)


def check_model(cfg: ModelConfig, locate: Locator | None = None) -> None:
    """Raise ConfigError for an unknown model, kwargs its constructor rejects, or a timm model without a classifier
    (each built on 'meta'). `locate(key)` gives the file and line of a key for the error."""
    build = find_model(cfg.name, error_at("model.name", locate))
    is_timm = cfg.name.startswith(TIMM_PREFIX)
    if not cfg.kwargs and not is_timm:
        return
    at = error_at("model.kwargs", locate)
    fixed = _TORCHVISION_FIXED.get(cfg.name, {})
    for key in cfg.kwargs:
        if key in _RUNNER_SETS or key in fixed:
            why = _RUNNER_SETS.get(key) or f"runner builds {cfg.name} with {key}={fixed.get(key)}, one output to train"
            raise ConfigError(f"{cfg.name}: '{key}' is not an argument model.kwargs can set: {why}.", **at)
    try:
        model = build_on_meta(build, cfg.num_classes, **cfg.kwargs)
    except Exception as e:  # TypeError for unknown names, ValueError/AssertionError for bad values
        reason = (str(e).strip().splitlines() or [type(e).__name__])[0].rstrip(".!")
        takes = accepted_kwargs(cfg.name)
        unknown = re.search(r"unexpected keyword argument(?:\(s\): \[)? ?'(\w+)'", reason)
        hint = did_you_mean(unknown.group(1), takes) if unknown else ""
        raise ConfigError(f"{cfg.name} does not accept these arguments: {reason}.{hint} It takes: "
                          f"{', '.join(takes) or 'no extra arguments'}.", **at) from None
    if is_timm and getattr(model, "num_classes", None) != cfg.num_classes:  # timm's encoders (*_enc) have no head
        raise ConfigError(f"{cfg.name} has no classifier: it returns features, not model.num_classes logits. Pick "
                          "one of timm's classification models (`runner models timm/`).",
                          **error_at("model.name", locate))


def build_on_meta(build: Callable[..., Any], num_classes: int, **kwargs: Any):
    """`build(num_classes, **kwargs)` with its parameters and buffers on 'meta': no memory, no initialisation.

    Under torch.device('meta') where the constructor allows it; a constructor that reads values of tensors it
    computes (RegNet's block widths) runs on the CPU instead, each parameter and buffer moved to 'meta' as it is
    registered, before the layer initialises it (accelerate's init_empty_weights does the same)."""
    import torch

    try:
        with torch.device("meta"):
            return build(num_classes, **kwargs)
    except NotImplementedError as e:
        if "meta" not in str(e):
            raise
    with _registered_on_meta():
        return build(num_classes, **kwargs)


@contextlib.contextmanager
def _registered_on_meta() -> Iterator[None]:
    import torch.nn as nn

    register_parameter, register_buffer = nn.Module.register_parameter, nn.Module.register_buffer

    def parameter_on_meta(module, name, param):
        register_parameter(module, name, param)
        if param is not None:
            module._parameters[name] = type(param)(param.to("meta"), requires_grad=param.requires_grad)

    def buffer_on_meta(module, name, tensor, persistent=True):
        register_buffer(module, name, None if tensor is None else tensor.to("meta"), persistent)

    nn.Module.register_parameter, nn.Module.register_buffer = parameter_on_meta, buffer_on_meta
    try:
        yield
    finally:
        nn.Module.register_parameter, nn.Module.register_buffer = register_parameter, register_buffer


def _model_class(name: str) -> type | None:
    """The nn.Module class `name` builds: torchvision's from its builder's annotation, timm's by building the model
    on 'meta' (timm.create_model hands its kwargs to the class)."""
    if name.startswith(TIMM_PREFIX):
        return type(build_on_meta(find_model(name, {}), 1))
    import torchvision

    cls = inspect.signature(torchvision.models.get_model_builder(name)).return_annotation
    return cls if inspect.isclass(cls) else None


def accepted_kwargs(name: str) -> list[str]:
    """Keyword arguments model.kwargs may set for `name`: its class's constructor's, less those runner sets."""
    cls = _model_class(name)
    if cls is None:
        return []
    skip = {"self", "args", "kwargs", *_RUNNER_SETS, *_TORCHVISION_FIXED.get(name, {})}
    return [p for p in inspect.signature(cls.__init__).parameters if p not in skip]


def create_model(cfg: ModelConfig):
    """A fresh torch.nn.Module for `cfg`."""
    return find_model(cfg.name, {"where": "model.name"})(cfg.num_classes, **cfg.kwargs)


def classifier_keys(model) -> list[str]:
    """Names of the modules that map features to class logits (their state_dict keys start with NAME.): what a new
    head replaces when fine-tuning. timm's from its pretrained_cfg (get_classifier() otherwise); torchvision's is
    its last nn.Linear (fc, classifier.1, heads.head), or SqueezeNet's last Conv2d."""
    import torch.nn as nn

    modules = dict(model.named_modules())
    names = getattr(model, "pretrained_cfg", {}).get("classifier")
    names = [names] if isinstance(names, str) else list(names or ())
    if names and all(n in modules for n in names):
        return names
    if hasattr(model, "get_classifier"):
        head = model.get_classifier()
        found = [n for n, m in modules.items() if m is head and n]
        if found:
            return found[:1]
    for kind in (nn.Linear, nn.Conv2d):
        found = [n for n, m in modules.items() if isinstance(m, kind)]
        if found:
            return found[-1:]
    raise ValueError(f"{type(model).__name__} has no nn.Linear or nn.Conv2d to call its classifier")

