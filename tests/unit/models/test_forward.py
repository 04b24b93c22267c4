"""Every model of the zoo runs a forward pass on the CPU, with the head runner gives it."""
import pytest
import torch

from runner.config.sections import ModelConfig
from runner.models.zoo import MODELS, build_on_meta, create_model, find_model

# 60M parameters or more (at 1000 classes): initialising their random weights takes seconds each on a CPU (up to
# 15 s for regnet_y_128gf), which is torchvision's code, not runner's. They are built on the meta device as
# `runner validate` builds a model to check model.kwargs (models.zoo.build_on_meta), then given uninitialised CPU
# memory, so the forward pass (what this checks) runs the same kernels on the same shapes. Swin's relative-position
# index is a buffer its constructor computes, so swin_b and swin_v2_b are built for real.
BUILT_ON_META = {"alexnet", "convnext_base", "convnext_large", "efficientnet_b7", "efficientnet_v2_l", "regnet_x_32gf",
                 "regnet_y_128gf", "regnet_y_16gf", "regnet_y_32gf", "resnext101_32x8d", "resnext101_64x4d", "vgg11",
                 "vgg11_bn", "vgg13", "vgg13_bn", "vgg16", "vgg16_bn", "vgg19", "vgg19_bn", "vit_b_16", "vit_b_32",
                 "vit_h_14", "vit_l_16", "vit_l_32", "wide_resnet101_2", "wide_resnet50_2"}


@pytest.mark.parametrize("name", MODELS.names())
def test_every_model_runs_forward_on_cpu(name):
    if name in BUILT_ON_META:
        model = build_on_meta(find_model(name, {}), 7).to_empty(device="cpu")
    else:
        model = create_model(ModelConfig(name=name, num_classes=7))
    size = 224 if name.startswith(("vit", "swin", "maxvit")) else 96 if name == "inception_v3" else 64
    with torch.no_grad():
        out = model.eval()(torch.randn(1, 3, size, size))
    assert out.shape == (1, 7)
