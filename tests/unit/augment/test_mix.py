"""pipelines.train.mix: the mixing against timm's Mixup on the same lam and box, the soft targets with label
smoothing, the draws (from (seed, slot, step) alone), and training runs with it that repeat bit for bit."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from timm.data import mixup as timm_mixup
from timm.loss import SoftTargetCrossEntropy

from runner.augment.mix import (
    Mixer,
    cutmix_boxes,
    mix_generator,
    mix_images,
    mix_images_per_image,
    mixup_target,
    square_boxes,
)
from runner.config.sections import MixConfig

B, C, H, W, CLASSES = 6, 3, 20, 28, 5


@pytest.fixture
def batch() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return torch.randn(B, C, H, W, generator=g), torch.tensor([0, 1, 2, 3, 4, 1])


def feed_centres(monkeypatch, values: list[int]) -> None:
    """timm draws cutmix centres with np.random.randint: hand it these, in order."""
    it = iter(values)
    monkeypatch.setattr(np.random, "randint", lambda *a, **k: next(it))


@pytest.mark.parametrize("lam", [0.0, 0.3, 0.5, 0.731])
@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_batch_mixup_is_timms_for_the_same_lam(batch, lam, smoothing, monkeypatch):
    images, labels = batch
    timm = timm_mixup.Mixup(mixup_alpha=1.0, label_smoothing=smoothing, num_classes=CLASSES)
    monkeypatch.setattr(timm, "_params_per_batch", lambda: (lam, False))
    timm_images, timm_targets = timm(images.clone(), labels)
    assert torch.equal(mix_images(images, lam, None), timm_images)
    assert torch.equal(mixup_target(labels, CLASSES, lam, smoothing), timm_targets)


@pytest.mark.parametrize("lam,cy,cx", [(0.3, 10, 14), (0.6, 0, 27), (0.05, 19, 3), (0.9, 5, 5)])
@pytest.mark.parametrize("correct_lam", [True, False])
def test_batch_cutmix_is_timms_for_the_same_lam_and_box(batch, lam, cy, cx, correct_lam, monkeypatch):
    images, labels = batch
    timm = timm_mixup.Mixup(mixup_alpha=0.0, cutmix_alpha=1.0, correct_lam=correct_lam, label_smoothing=0.1,
                            num_classes=CLASSES)
    monkeypatch.setattr(timm, "_params_per_batch", lambda: (lam, True))
    feed_centres(monkeypatch, [cy, cx])
    timm_images, timm_targets = timm(images.clone(), labels)

    box = square_boxes(H, W, torch.tensor([lam], dtype=torch.float64), torch.tensor([cy]), torch.tensor([cx]))[0]
    area = int((box[1] - box[0]) * (box[3] - box[2]))
    ours_lam = 1 - area / (H * W) if correct_lam else lam
    assert torch.equal(mix_images(images, ours_lam, tuple(box.tolist())), timm_images)
    assert torch.equal(mixup_target(labels, CLASSES, ours_lam, 0.1), timm_targets)


def test_cutmix_boxes_draw_centres_and_correct_lam_as_timm(monkeypatch):
    g = torch.Generator().manual_seed(4)
    lam = torch.tensor([0.42], dtype=torch.float64)
    cy, cx = torch.randint(0, H, (1,), generator=g), torch.randint(0, W, (1,), generator=g)  # cutmix_boxes' draws
    feed_centres(monkeypatch, [int(cy), int(cx)])
    (yl, yh, xl, xh), timm_lam = timm_mixup.cutmix_bbox_and_lam((B, C, H, W), 0.42, correct_lam=True)
    boxes, ours = cutmix_boxes(H, W, lam, torch.Generator().manual_seed(4), None, True)
    assert boxes[0].tolist() == [yl, yh, xl, xh] and float(ours[0]) == timm_lam


def test_minmax_boxes_lie_in_the_image_with_sides_in_range():
    g = torch.Generator().manual_seed(1)
    boxes, lam = cutmix_boxes(H, W, torch.full((200,), 0.5, dtype=torch.float64), g, (0.2, 0.8), False)
    sides_h, sides_w = boxes[:, 1] - boxes[:, 0], boxes[:, 3] - boxes[:, 2]
    assert sides_h.min() >= int(H * 0.2) and sides_h.max() < int(H * 0.8)
    assert sides_w.min() >= int(W * 0.2) and sides_w.max() < int(W * 0.8)
    assert boxes[:, 0].min() >= 0 and boxes[:, 1].max() <= H and boxes[:, 2].min() >= 0 and boxes[:, 3].max() <= W
    assert torch.equal(lam, 1 - (sides_h * sides_w).double() / (H * W))  # min-max boxes always correct lam


def test_per_image_mixing_is_timms_elem_mode(batch, monkeypatch):
    images, labels = batch
    lam = np.array([1.0, 0.3, 0.8, 0.55, 0.2, 1.0], dtype=np.float32)
    cutmix = np.array([False, True, False, True, True, True])
    centres = {1: (4, 9), 3: (15, 20), 4: (0, 0)}  # the cutmix images with lam != 1, in order
    timm = timm_mixup.Mixup(mixup_alpha=1.0, cutmix_alpha=1.0, mode="elem", label_smoothing=0.1, num_classes=CLASSES)
    monkeypatch.setattr(timm, "_params_per_elem", lambda n: (lam.copy(), cutmix))
    feed_centres(monkeypatch, [v for i in sorted(centres) for v in centres[i]])
    timm_images, timm_targets = timm(images.clone(), labels)

    ours_lam, boxes = torch.from_numpy(lam.copy()), torch.zeros(B, 4, dtype=torch.int64)
    for i, (cy, cx) in centres.items():
        boxes[i] = square_boxes(H, W, ours_lam[i:i + 1], torch.tensor([cy]), torch.tensor([cx]))[0]
        ours_lam[i] = 1 - float((boxes[i, 1] - boxes[i, 0]) * (boxes[i, 3] - boxes[i, 2])) / (H * W)
    mixed = mix_images_per_image(images, ours_lam, torch.from_numpy(cutmix), boxes)
    assert torch.equal(mixed, timm_images)
    assert torch.equal(mixup_target(labels, CLASSES, ours_lam.unsqueeze(1), 0.1), timm_targets)


def test_soft_targets_with_label_smoothing_and_their_loss():
    labels = torch.tensor([0, 2, 3, 1])  # flipped partners: 1, 3, 2, 0
    targets = mixup_target(labels, 4, 0.7, smoothing=0.2)
    off, on = 0.2 / 4, 1 - 0.2 + 0.2 / 4
    expected = torch.full((4, 4), off)
    for i, (a, b) in enumerate(zip(labels.tolist(), labels.flip(0).tolist())):
        expected[i, a] = 0.7 * on + 0.3 * off
        expected[i, b] = 0.3 * on + 0.7 * off
    assert torch.allclose(targets, expected, atol=1e-7) and torch.allclose(targets.sum(1), torch.ones(4))
    logits = torch.randn(4, 4, generator=torch.Generator().manual_seed(2))
    soft = torch.nn.CrossEntropyLoss()(logits, targets)
    assert torch.allclose(soft, SoftTargetCrossEntropy()(logits, targets))
    # an unmixed batch's targets give the loss trainer.label_smoothing gives the labels
    plain = torch.nn.CrossEntropyLoss()(logits, mixup_target(labels, 4, 1.0, smoothing=0.2))
    assert torch.allclose(plain, torch.nn.CrossEntropyLoss(label_smoothing=0.2)(logits, labels))


def mixer(**kw) -> Mixer:
    return Mixer(MixConfig(**kw), num_classes=CLASSES, label_smoothing=0.1, seed=7)


@pytest.mark.parametrize("mode", ["batch", "elem", "pair"])
def test_the_draws_come_from_seed_slot_and_step_alone(batch, mode):
    images, labels = batch
    m = mixer(mixup_alpha=0.4, cutmix_alpha=1.0, mode=mode)
    torch.manual_seed(0)
    first = m(images, labels, slot=0, step=3)
    torch.manual_seed(123)  # the global RNG plays no part
    torch.rand(5)
    again = m(images, labels, slot=0, step=3)
    assert torch.equal(first.images, again.images) and torch.equal(first.targets, again.targets)
    for other in (m(images, labels, slot=1, step=3), m(images, labels, slot=0, step=4)):
        assert not torch.equal(first.targets, other.targets)
    seeds = {mix_generator(seed, slot, step).initial_seed() for seed in (0, 1) for slot in (0, 1) for step in (0, 1)}
    assert len(seeds) == 8 and mix_generator(7, 0, 3).initial_seed() == mix_generator(7, 0, 3).initial_seed()


def test_train_top1_counts_the_label_with_the_larger_weight(batch):
    images, labels = batch
    for step in range(20):
        out = mixer(mixup_alpha=1.0, mode="elem")(images, labels, slot=0, step=step)
        # the smoothed targets' argmax is that label, unless the two weights tie
        heavier = out.targets.argmax(1)
        own = out.targets.gather(1, labels.view(-1, 1)).flatten()
        partner = out.targets.gather(1, labels.flip(0).view(-1, 1)).flatten()
        untied = own != partner
        assert torch.equal(out.labels[untied], heavier[untied])
        assert torch.equal(out.labels[~untied], labels[~untied])


def test_prob_zero_images_and_a_batch_mode_step_that_draws_no_mix(batch):
    images, labels = batch
    m = mixer(mixup_alpha=1.0, prob=0.5)
    steps = [m(images, labels, slot=0, step=s) for s in range(40)]
    unmixed = [o for o in steps if torch.equal(o.images, images)]
    assert 5 < len(unmixed) < 35  # about half the batches
    for o in unmixed:  # an unmixed batch still has the smoothed one-hot targets
        assert torch.equal(o.targets, mixup_target(labels, CLASSES, 1.0, 0.1)) and torch.equal(o.labels, labels)


def test_pair_mode_mixes_each_pair_both_ways(batch):
    images, labels = batch
    out = mixer(cutmix_alpha=1.0, mode="pair")(images, labels, slot=0, step=1)
    # image i got a box of image B-1-i and the other way round: the pasted areas are each other's
    changed = out.images != images
    assert changed.any() and torch.equal(changed, changed.flip(0))
    assert torch.equal(out.images[changed], images.flip(0)[changed])


def test_an_odd_batch_leaves_the_middle_image_itself():
    g = torch.Generator().manual_seed(3)
    images, labels = torch.randn(5, 3, 8, 8, generator=g), torch.tensor([0, 1, 2, 3, 4])
    for mode in ("elem", "pair"):
        out = mixer(cutmix_alpha=1.0, mode=mode)(images, labels, slot=0, step=2)
        assert torch.equal(out.images[2], images[2]) and out.labels[2] == 2
