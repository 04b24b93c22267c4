"""model.init's weights without training: a torchvision state dict, a DDP state dict without its prefix, skip
patterns, strict mode naming every key that does not fit, and each model's classifier keys.
tests/e2e/test_weights.py launches, keeps checkpoints in stores and fine-tunes from them."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torchvision

from runner.errors import ConfigError
from tests.fixtures.weights import sha256, synth, torchvision_resnet18


def planned(project: Path, *overrides: str):
    from runner.run.validate import validate
    from runner.weights.init import plan_init

    v = validate(synth(project / "experiments" / "ft.yaml", model="resnet18", classes=5), overrides)
    return plan_init(v.config.model, v.weights_place)


def test_fine_tune_from_a_torchvision_state_dict(project):
    from runner.models.zoo import create_model
    from runner.run.validate import validate
    from runner.weights.init import apply_init

    file = torchvision_resnet18(project / "weights")
    plan = planned(project, f"model.init.source={file}", "model.init.new_head=true")
    assert (plan.skipped, plan.missing, plan.unexpected, plan.mismatched) == (("fc.weight", "fc.bias"), (), (), ())
    assert len(plan.loaded) == plan.total - 2 == 120 and plan.sha256 == sha256(file)
    model = create_model(validate(project / "experiments" / "ft.yaml").config.model)
    fresh_fc = model.fc.weight.detach().clone()
    apply_init(model, plan)
    saved = torch.load(file)
    assert torch.equal(model.conv1.weight, saved["conv1.weight"])
    assert torch.equal(model.layer4[1].bn2.running_var, saved["layer4.1.bn2.running_var"])
    assert torch.equal(model.fc.weight, fresh_fc) and model.fc.weight.shape == (5, 512)


def test_a_ddp_state_dict_loads_without_its_prefix_and_skip_patterns_leave_keys_fresh(project):
    from safetensors.torch import save_file

    state = {f"module.{k}": v for k, v in torchvision.models.resnet18(num_classes=5).state_dict().items()}
    save_file(state, project / "w.safetensors")
    plan = planned(project, "model.init.source=w.safetensors", "model.init.skip=[layer4.*, fc.bias]")
    assert "conv1.weight" in plan.loaded and "fc.weight" in plan.loaded and plan.missing == ()
    assert plan.skipped[-1] == "fc.bias" and all(k.startswith("layer4.") for k in plan.skipped[:-1])


def test_strict_names_every_key_that_does_not_fit(project):
    file = torchvision_resnet18(project / "weights")
    with pytest.raises(ConfigError) as e:
        planned(project, f"model.init.source={file}")
    assert str(e.value) == (
        f"command line 'model.init.source={file}': model.init.source: weights/resnet18.pth does not fit resnet18 "
        "with 5 classes: 2 differ in shape (fc.weight: [1000, 512] in the file, [5, 512] in the model; fc.bias: "
        "[1000] in the file, [5] in the model), 0 missing from the file, 0 not in the model. Under "
        "model.init.strict: true every key must load; set model.init.new_head=true for a fresh classifier (fc.weight, "
        "fc.bias), leave keys fresh with model.init.skip patterns, or set model.init.strict=false to load what fits.")


def test_classifier_keys_of_torchvision_models():
    from runner.weights.init import classifier_keys

    with torch.device("meta"):
        found = {name: classifier_keys(getattr(torchvision.models, name)())
                 for name in ("resnet18", "mobilenet_v3_small", "efficientnet_b0", "vit_b_32", "convnext_tiny")}
    assert found == {"resnet18": ["fc.weight", "fc.bias"],
                     "mobilenet_v3_small": ["classifier.3.weight", "classifier.3.bias"],
                     "efficientnet_b0": ["classifier.1.weight", "classifier.1.bias"],
                     "vit_b_32": ["heads.head.weight", "heads.head.bias"],
                     "convnext_tiny": ["classifier.2.weight", "classifier.2.bias"]}
