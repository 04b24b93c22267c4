"""runner/models/zoo.py: torchvision's and timm's architectures by name, their kwargs, and their classifiers."""
from __future__ import annotations

import pytest
import torch
import torchvision

from runner.config.sections import ModelConfig
from runner.models.zoo import (
    MODELS,
    TIMM_PREFIX,
    TORCHVISION_MODELS,
    build_on_meta,
    check_model,
    classifier_keys,
    create_model,
    find_model,
    model_sources,
    timm_models,
)

timm = pytest.importorskip("timm")


# the input side each architecture needs (the rest run at 64 px)
SIDE = {"vit": 224, "swin": 224, "maxvit": 224, "inception": 96}


def side(name: str) -> int:
    return next((s for prefix, s in SIDE.items() if name.removeprefix(TIMM_PREFIX).startswith(prefix)), 64)


def on_meta(name: str, num_classes: int, **kwargs):
    return build_on_meta(find_model(name, {}), num_classes, **kwargs)


def test_the_registry_is_every_torchvision_classification_architecture():
    assert list(TORCHVISION_MODELS) == torchvision.models.list_models(module=torchvision.models)
    assert MODELS.names() == sorted(TORCHVISION_MODELS)


def test_timm_names_are_timm_list_models_with_the_prefix():
    names = timm_models().names()
    assert names == sorted(TIMM_PREFIX + n for n in timm.list_models())
    assert {"timm/resnet50d", "timm/convnext_tiny", "timm/vit_small_patch16_224"} <= set(names)


def test_model_sources_lists_torchvision_then_timm_and_filters_both():
    rows = model_sources("resnet18")
    assert rows[0] == ("resnet18", "torchvision") and ("timm/resnet18", "timm") in rows
    assert {s for _, s in rows} == {"torchvision", "timm"}
    assert model_sources("timm/resnet5*")[:2] == [("timm/resnet50", "timm"), ("timm/resnet50_clip", "timm")]
    assert all(s == "timm" for _, s in model_sources("timm/resnet5*"))
    assert model_sources("resnet1*") == [("resnet101", "torchvision"), ("resnet152", "torchvision"),
                                         ("resnet18", "torchvision")]  # a glob is anchored: timm/ is not in it


@pytest.mark.parametrize("name", TORCHVISION_MODELS)
def test_every_torchvision_model_builds_on_meta_and_gives_num_classes_logits(name):
    model = on_meta(name, 7).train()
    out = model(torch.empty(2, 3, side(name), side(name), device="meta"))
    assert isinstance(out, torch.Tensor) and out.shape == (2, 7)  # a tensor in training too (no aux logits)
    head = dict(model.named_modules())[classifier_keys(model)[0]]
    assert getattr(head, "out_features", None) or head.out_channels == 7


def test_a_constructor_that_computes_with_tensors_builds_with_its_parameters_on_meta():
    model = on_meta("regnet_y_400mf", 7)  # RegNet reads its block widths from tensors: torch.device("meta") fails
    assert {p.device.type for p in model.parameters()} == {"meta"}
    assert {b.device.type for b in model.buffers()} == {"meta"}
    assert torch.nn.Linear(2, 2).weight.device.type == "cpu"  # and registering is itself again afterwards


@pytest.mark.parametrize("name,keys", [
    ("resnet18", ["fc"]), ("resnext50_32x4d", ["fc"]), ("efficientnet_b0", ["classifier.1"]),
    ("mobilenet_v3_small", ["classifier.3"]), ("convnext_tiny", ["classifier.2"]), ("vit_b_16", ["heads.head"]),
    ("swin_t", ["head"]), ("maxvit_t", ["classifier.5"]), ("densenet121", ["classifier"]),
    ("vgg11", ["classifier.6"]), ("squeezenet1_0", ["classifier.1"]), ("inception_v3", ["fc"]),
    ("regnet_y_400mf", ["fc"]),
    ("timm/resnet18", ["fc"]), ("timm/convnext_atto", ["head.fc"]), ("timm/vit_tiny_patch16_224", ["head"]),
    ("timm/efficientnet_b0", ["classifier"]), ("timm/mobilenetv3_small_050", ["classifier"]),
    ("timm/deit_tiny_distilled_patch16_224", ["head", "head_dist"]),
])
def test_classifier_keys_name_the_layers_that_give_the_logits(name, keys):
    model = on_meta(name, 7)
    assert classifier_keys(model) == keys
    state = model.state_dict()
    for key in keys:
        assert state[f"{key}.weight"].shape[0] == 7


@pytest.mark.parametrize("name", ["timm/resnet18", "timm/convnext_atto", "timm/mobilenetv3_small_050",
                                  "timm/vit_tiny_patch16_224", "timm/efficientnet_b0"])
def test_timm_models_run_forward_on_cpu(name):
    torch.manual_seed(0)
    model = create_model(ModelConfig(name=name, num_classes=7)).eval()
    with torch.no_grad():
        out = model(torch.randn(2, 3, side(name), side(name)))
    assert out.shape == (2, 7) and torch.isfinite(out).all()
    assert model.num_classes == 7


def test_a_timm_pretrained_tag_builds_its_architecture_under_the_tags_configuration():
    check_model(ModelConfig(name="timm/vit_tiny_patch16_224.augreg_in21k", num_classes=3))
    model = create_model(ModelConfig(name="timm/vit_tiny_patch16_224.augreg_in21k", num_classes=3))
    plain = create_model(ModelConfig(name="timm/vit_tiny_patch16_224", num_classes=3))
    assert model.pretrained_cfg["tag"] == "augreg_in21k" and model.pretrained_cfg["mean"] == (0.5, 0.5, 0.5)
    assert plain.pretrained_cfg["tag"] != "augreg_in21k"
    assert model.state_dict().keys() == plain.state_dict().keys() and model.num_classes == 3
    assert model(torch.randn(1, 3, 224, 224)).shape == (1, 3)


def test_timm_kwargs_reach_the_model():
    model = create_model(ModelConfig(name="timm/resnet18", num_classes=3, kwargs={"drop_rate": 0.25}))
    assert model.drop_rate == 0.25


def test_torchvision_aux_heads_are_left_out():
    assert on_meta("googlenet", 3).aux1 is None and on_meta("inception_v3", 3).AuxLogits is None
