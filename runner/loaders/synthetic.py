"""Random batches created once on the device: the loader costs nothing, so this is the compute ceiling."""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch

from runner.dist import Dist
from runner.loaders.config import LoaderConfig


class SyntheticLoader:
    def __init__(self, images: torch.Tensor, labels: torch.Tensor, steps: int, role: str):
        self.images, self.labels, self.role = images, labels, role
        self.steps_per_epoch = steps

    @classmethod
    def create(cls, cfg: LoaderConfig, role: str, target: Dist) -> SyntheticLoader:
        device = target.device
        batch = cfg.data.batch_size if role == "train" else (cfg.data.eval_batch_size or cfg.data.batch_size)
        synth = cfg.data.synth
        # an "epoch" is as long as one over the synthetic JPEG set of the same settings
        samples = synth.classes * (synth.per_class if role == "train" else synth.eval_per_class)
        steps = max(1, samples // (batch * target.world))
        g = torch.Generator(device="cpu").manual_seed(cfg.seed + target.rank)
        images = torch.randn(batch, 3, cfg.data.image_size, cfg.data.image_size, generator=g).to(device)
        labels = torch.randint(0, cfg.num_classes, (batch,), generator=g).to(device)
        return cls(images, labels, steps, role)

    def epoch(self, start_batch: int = 0) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        for _ in range(start_batch, self.steps_per_epoch):
            yield self.images, self.labels

    def state(self) -> Any:
        return None

    def close(self) -> None:
        pass
