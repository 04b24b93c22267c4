"""An exponential moving average of the model's weights (trainer.ema), as timm's ModelEmaV3 keeps it.

A copy of the model in fp32 on the training device; every `every_n_steps` optimizer steps each floating
parameter and buffer (BatchNorm's running statistics too) moves towards the model's by 1 - decay, integer
buffers (BatchNorm's batch counter) are copied. One torch._foreach_lerp_ over all tensors does the update:
torch.optim.swa_utils.AveragedModel would do the same lerp, but with one fixed decay (no warm-up), an extra
`n_averaged` buffer and a module wrapper around the state dict, none of which this needs.

Under DDP the parameters are the same on every rank (the gradients are all-reduced), the BatchNorm
statistics are not (each rank's own batches). As DDP's broadcast_buffers makes rank 0's buffers the model's,
rank 0's averaged buffers are broadcast to the others before each evaluation and checkpoint (`sync`).
"""
from __future__ import annotations

import copy
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from runner.config.sections import EmaConfig


def ema_decay(cfg: EmaConfig, step: int) -> float:
    """timm's ModelEmaV3.get_decay after `step` optimizer steps: 0 (a copy) at the first, then `decay`, or with
    warm-up 1 - (1 + (step - 1) / warmup_gamma) ** -warmup_power kept between min_decay and decay."""
    step = max(0, step - 1)
    if step <= 0:
        return 0.0
    if not cfg.warmup:
        return cfg.decay
    decay = 1 - (1 + step / cfg.warmup_gamma) ** -cfg.warmup_power
    return max(min(decay, cfg.decay), cfg.min_decay)


class ModelEma:
    """The averaged copy of `model`; `module` is what evaluation runs."""

    def __init__(self, model: nn.Module, cfg: EmaConfig):
        self.cfg = cfg
        self.module = copy.deepcopy(model).float().eval().requires_grad_(False)
        # the state dicts' tensors share storage with the modules': the optimizer and BatchNorm update the
        # model's in place, and the lerp writes the average's in place
        pairs = list(zip(self.module.state_dict().values(), model.state_dict().values()))
        # the lists each update passes to one foreach call: building them per step costs the launch thread time
        self._ema_floats = [e for e, m in pairs if e.is_floating_point()]
        self._model_floats = [m for e, m in pairs if e.is_floating_point()]
        self._fp32 = all(m.dtype == torch.float32 for m in self._model_floats)  # else: .float() copies per update
        self._ema_ints = [e for e, m in pairs if not e.is_floating_point()]
        self._model_ints = [m for e, m in pairs if not e.is_floating_point()]

    @torch.no_grad()
    def update(self, step: int) -> None:
        """After optimizer step number `step` (1, 2, ...) of the model: average when it is an update step."""
        if step % self.cfg.every_n_steps:
            return
        if self._ema_ints:
            torch._foreach_copy_(self._ema_ints, self._model_ints)
        model = self._model_floats if self._fp32 else [m.float() for m in self._model_floats]
        torch._foreach_lerp_(self._ema_floats, model, weight=1.0 - ema_decay(self.cfg, step))

    @torch.no_grad()
    def sync(self, d) -> None:
        """Rank 0's buffers on every rank (parameters are already equal): one model, evaluated and saved."""
        if not d.enabled:
            return
        for buffer in self.module.buffers():
            dist.broadcast(buffer, src=0)

    def state_dict(self) -> dict[str, Any]:
        return self.module.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.module.load_state_dict(state)


