"""A model on this rank's device: its memory format, autocast for trainer.precision, and what it is fed."""
from __future__ import annotations

from typing import Any

import torch
from torch import nn

from runner.dist import Dist
from runner.models.zoo import create_model

AMP_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def autocast_args(precision: str, device: torch.device) -> dict[str, Any]:
    """torch.autocast's arguments for trainer.precision (fp32: autocast off)."""
    return {"device_type": device.type, "dtype": AMP_DTYPES.get(precision, torch.float32),
            "enabled": precision in AMP_DTYPES}


def model_input(images: torch.Tensor, channels_last: bool, amp: dict) -> torch.Tensor:
    """A loader's images as the model takes them: in the memory format trainer.channels_last asks for (a no-op for
    a pipeline that already makes channels-last images), and in fp32 when autocast is off, since a pipeline may make
    fp16 or bf16 images."""
    images = images.contiguous(memory_format=torch.channels_last if channels_last else torch.contiguous_format)
    return images if amp["enabled"] else images.float()


def predict(net, images: torch.Tensor, tta: str = "none") -> torch.Tensor:
    """The logits of `images`; with tta "flip" the mean of theirs and their mirror images' (trainer.eval_tta)."""
    logits = net(images)
    if tta == "flip":
        logits = (logits + net(images.flip(3))) / 2
    return logits


def build_model(cfg, d: Dist) -> nn.Module:
    """The experiment's model on this rank's device, in the memory format trainer.channels_last asks for."""
    model = create_model(cfg.model).to(d.device)
    if cfg.trainer.channels_last:
        model = model.to(memory_format=torch.channels_last)  # NHWC: the layout tensor-core convolutions want
    return model
