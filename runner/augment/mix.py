"""Mixup and CutMix of a training batch on its device, with timm's semantics (timm.data.Mixup).

Each image i is mixed with image B-1-i (the batch flipped, as timm pairs them). The random draws of a step
come from a torch.Generator seeded from (experiment seed, slot, step) alone, never from a global RNG: a run
repeats bit for bit, and a resumed run draws what the uninterrupted one drew at the same step. Draws are
few scalars (or one per image) made on the CPU; the images never leave the device.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass

import torch

from runner.config.sections import MixConfig

Box = tuple[int, int, int, int]  # yl, yh, xl, xh: rows yl:yh and columns xl:xh


@dataclass(frozen=True)
class MixedBatch:
    images: torch.Tensor
    targets: torch.Tensor    # (B, num_classes) probabilities, label smoothing applied
    labels: torch.Tensor     # (B,) the label with the larger weight: what train/top1 counts as right


def mix_generator(seed: int, slot: int, step: int) -> torch.Generator:
    """The step's own generator: the same (seed, slot, step) always draws the same numbers."""
    digest = hashlib.blake2b(f"mix/{seed}/{slot}/{step}".encode(), digest_size=8).digest()
    return torch.Generator(device="cpu").manual_seed(int.from_bytes(digest, "little") >> 1)


def mixup_target(labels: torch.Tensor, num_classes: int, lam: float | torch.Tensor,
                 smoothing: float = 0.0) -> torch.Tensor:
    """lam * onehot(labels) + (1 - lam) * onehot(labels flipped), each one-hot smoothed as timm's mixup_target."""
    off = smoothing / num_classes
    on = 1.0 - smoothing + off
    y1 = torch.full((labels.shape[0], num_classes), off, device=labels.device).scatter_(1, labels.long().view(-1, 1),
                                                                                       on)
    return y1 * lam + y1.flip(0) * (1.0 - lam)


def mix_images(images: torch.Tensor, lam: float, box: Box | None) -> torch.Tensor:
    """One lam for the batch: a blend with the flipped batch, or (box given) the flipped batch's box pasted in."""
    flipped = images.flip(0)
    if box is None:
        return images * lam + flipped * (1.0 - lam)  # timm's mul/mul/add: the same rounding
    yl, yh, xl, xh = box
    out = images.clone()
    out[:, :, yl:yh, xl:xh] = flipped[:, :, yl:yh, xl:xh]
    return out


def mix_images_per_image(images: torch.Tensor, lam: torch.Tensor, cutmix: torch.Tensor,
                         boxes: torch.Tensor) -> torch.Tensor:
    """One lam per image (float32, B): blends where `cutmix` is false, boxes (B, 4: yl, yh, xl, xh) pasted from
    the flipped batch where it is true; images with lam 1 stay as they are. All on the images' device."""
    device, (_, _, h, w) = images.device, images.shape
    lam, cutmix, boxes = lam.to(device), cutmix.to(device), boxes.to(device)
    mixed = lam != 1
    flipped = images.flip(0)
    blend = images * lam.view(-1, 1, 1, 1) + flipped * (1 - lam).view(-1, 1, 1, 1)
    rows, cols = torch.arange(h, device=device), torch.arange(w, device=device)
    in_rows = (rows >= boxes[:, 0:1]) & (rows < boxes[:, 1:2])
    in_cols = (cols >= boxes[:, 2:3]) & (cols < boxes[:, 3:4])
    in_box = in_rows[:, :, None] & in_cols[:, None, :]
    pasted = torch.where(in_box[:, None], flipped, images)
    out = torch.where((mixed & cutmix).view(-1, 1, 1, 1), pasted, images)
    return torch.where((mixed & ~cutmix).view(-1, 1, 1, 1), blend, out)


def cutmix_boxes(h: int, w: int, lam: torch.Tensor, g: torch.Generator, minmax: tuple[float, float] | None,
                 correct_lam: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """timm's cutmix_bbox_and_lam for each lam: a square box of area ~(1 - lam) centred anywhere (clipped at the
    border), or sides drawn from `minmax`. Returns boxes (N, 4: yl, yh, xl, xh) and lam, corrected to each box's
    true area when asked (always with minmax), in float64."""
    n = lam.shape[0]
    if minmax is not None:
        low_h, low_w = int(h * minmax[0]), int(w * minmax[0])
        cut_h = torch.randint(low_h, max(int(h * minmax[1]), low_h + 1), (n,), generator=g)
        cut_w = torch.randint(low_w, max(int(w * minmax[1]), low_w + 1), (n,), generator=g)
        yl = (torch.rand(n, generator=g, dtype=torch.float64) * (h - cut_h + 1)).long()  # randint(0, h - cut_h + 1)
        xl = (torch.rand(n, generator=g, dtype=torch.float64) * (w - cut_w + 1)).long()
        boxes = torch.stack([yl, yl + cut_h, xl, xl + cut_w], dim=1)
    else:
        cy, cx = torch.randint(0, h, (n,), generator=g), torch.randint(0, w, (n,), generator=g)
        boxes = square_boxes(h, w, lam, cy, cx)
    lam = lam.double()
    if correct_lam or minmax is not None:
        area = (boxes[:, 1] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 2])
        lam = 1.0 - area.double() / float(h * w)  # int / float is float32 in torch; timm divides in float64
    return boxes, lam


def square_boxes(h: int, w: int, lam: torch.Tensor, cy: torch.Tensor, cx: torch.Tensor) -> torch.Tensor:
    """timm's rand_bbox around the centres (cy, cx): sides sqrt(1 - lam) of the image's, clipped to it; computed
    in lam's dtype as timm computes it in its lam's (float64 per batch, float32 per image)."""
    ratio = torch.sqrt(1 - lam)
    cut_h, cut_w = (h * ratio).long(), (w * ratio).long()  # int(): truncation, the values are positive
    return torch.stack([(cy - cut_h // 2).clamp(0, h), (cy + (cut_h + 1) // 2).clamp(0, h),
                        (cx - cut_w // 2).clamp(0, w), (cx + (cut_w + 1) // 2).clamp(0, w)], dim=1)


class Mixer:
    """pipelines.train.mix for one experiment: call it on a batch with the step's (slot, step)."""

    def __init__(self, cfg: MixConfig, *, num_classes: int, label_smoothing: float, seed: int):
        self.cfg, self.num_classes, self.smoothing, self.seed = cfg, num_classes, label_smoothing, seed
        # timm forces cutmix_alpha to 1 when min-max boxes are on (config.recipes refuses other values)
        self.cutmix_alpha = 1.0 if cfg.cutmix_minmax is not None else cfg.cutmix_alpha

    @classmethod
    def create(cls, mix: MixConfig | None, *, num_classes: int, label_smoothing: float, seed: int) -> Mixer | None:
        """pipelines.train.mix with the model's class count, trainer.label_smoothing and the experiment's seed; None
        without one."""
        return None if mix is None else cls(mix, num_classes=num_classes, label_smoothing=label_smoothing, seed=seed)

    def __call__(self, images: torch.Tensor, labels: torch.Tensor, *, slot: int, step: int) -> MixedBatch:
        g = mix_generator(self.seed, slot, step)
        if self.cfg.mode == "batch":
            lam, use_cutmix = self.batch_params(g)
            if lam != 1.0 and use_cutmix:
                boxes, lams = cutmix_boxes(images.shape[-2], images.shape[-1], torch.tensor([lam], dtype=torch.float64),
                                           g, self.cfg.cutmix_minmax, self.cfg.correct_lam)
                lam = float(lams[0])
                images = mix_images(images, lam, tuple(boxes[0].tolist()))
            elif lam != 1.0:
                images = mix_images(images, lam, None)
            targets = mixup_target(labels, self.num_classes, lam, self.smoothing)
            return MixedBatch(images=images, targets=targets, labels=labels if lam >= 0.5 else labels.flip(0))
        else:
            lam_t, cutmix, boxes = self.image_params(images.shape, g)
            images = mix_images_per_image(images, lam_t, cutmix, boxes)
            weight = lam_t.to(images.device, images.dtype).unsqueeze(1)
            keep_own = (lam_t >= 0.5).to(labels.device)
        targets = mixup_target(labels, self.num_classes, weight, self.smoothing)
        return MixedBatch(images=images, targets=targets, labels=torch.where(keep_own, labels, labels.flip(0)))

    def batch_params(self, g: torch.Generator) -> tuple[float, bool]:
        """timm's _params_per_batch, drawn from `g` in the same order: (lam, whether cutmix)."""
        c = self.cfg
        if _rand(g) >= c.prob:
            return 1.0, False
        if c.mixup_alpha > 0 and self.cutmix_alpha > 0:
            use_cutmix = _rand(g) < c.switch_prob
            return _beta(self.cutmix_alpha if use_cutmix else c.mixup_alpha, g), use_cutmix
        if c.mixup_alpha > 0:
            return _beta(c.mixup_alpha, g), False
        return _beta(self.cutmix_alpha, g), True

    def image_params(self, shape: torch.Size, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """timm's _params_per_elem (pair mode: per mirrored pair) and each image's box: (lam float32 (B),
        cutmix bool (B), boxes int64 (B, 4)), lam corrected to the boxes' areas as timm does."""
        c, b, (h, w) = self.cfg, shape[0], shape[-2:]
        n = b // 2 if c.mode == "pair" else b
        use_cutmix = torch.zeros(n, dtype=torch.bool)
        if c.mixup_alpha > 0 and self.cutmix_alpha > 0:
            use_cutmix = torch.rand(n, generator=g, dtype=torch.float64) < c.switch_prob
            lam_mix = torch.where(use_cutmix, _beta_n(self.cutmix_alpha, n, g), _beta_n(c.mixup_alpha, n, g))
        elif c.mixup_alpha > 0:
            lam_mix = _beta_n(c.mixup_alpha, n, g)
        else:
            use_cutmix = torch.ones(n, dtype=torch.bool)
            lam_mix = _beta_n(self.cutmix_alpha, n, g)
        apply = torch.rand(n, generator=g, dtype=torch.float64) < c.prob
        lam = torch.where(apply, lam_mix.float(), torch.ones(n))
        boxes = torch.zeros(n, 4, dtype=torch.int64)
        cut = use_cutmix & (lam != 1)
        if cut.any():
            boxes[cut], corrected = cutmix_boxes(h, w, lam[cut], g, c.cutmix_minmax, c.correct_lam)
            lam[cut] = corrected.float()
        if c.mode == "pair":  # image B-1-i takes pair i's lam and box: each pasted into the other
            middle = b - 2 * n
            lam = torch.cat([lam, torch.ones(middle), lam.flip(0)])
            use_cutmix = torch.cat([use_cutmix, torch.zeros(middle, dtype=torch.bool), use_cutmix.flip(0)])
            boxes = torch.cat([boxes, torch.zeros(middle, 4, dtype=torch.int64), boxes.flip(0)])
        return lam, use_cutmix, boxes


def _rand(g: torch.Generator) -> float:
    return float(torch.rand((), generator=g, dtype=torch.float64))


def _randint(low: int, high: int, g: torch.Generator) -> int:
    return int(torch.randint(low, high, (), generator=g))


def _beta_n(alpha: float, n: int, g: torch.Generator) -> torch.Tensor:
    """Beta(alpha, alpha) as the ratio of two Gamma(alpha) draws; torch.distributions takes no generator."""
    concentration = torch.full((2, n), alpha, dtype=torch.float64)
    gammas = torch._standard_gamma(concentration, generator=g)
    total = gammas.sum(0)
    return torch.where(total > 0, gammas[0] / total, torch.full_like(total, 0.5))  # both underflowed: a fair mix


def _beta(alpha: float, g: torch.Generator) -> float:
    return float(_beta_n(alpha, 1, g)[0])
