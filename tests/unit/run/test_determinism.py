"""Determinism of the batches: DALI's do not depend on its threads or prefetch depth, torchvision's not on its
workers. tests/e2e/test_determinism.py trains twice, from a second checkout, on one process and on two."""
from __future__ import annotations

import hashlib


def batch_digest(overrides: list[str], **validate_args) -> str:
    """sha256 of two epochs of experiments/det.yaml's training batches (images and labels) under `overrides`."""
    from runner.dist import Dist
    from runner.loaders.loader import create_loader
    from runner.run.validate import validate

    loader = create_loader(validate("experiments/det.yaml", overrides, **validate_args).loaders, "train", Dist())
    h = hashlib.sha256()
    for _ in range(2):
        for images, labels in loader.epoch():
            h.update(images.numpy().tobytes())
            h.update(labels.numpy().tobytes())
    loader.close()
    return h.hexdigest()


def test_dali_batches_do_not_depend_on_threads_or_prefetch(origin):
    """The DALI CPU pipeline's batches (images and labels, two epochs) are the same bytes whatever the thread
    count and queue depth; only the seed changes them."""
    def digest(*overrides: str) -> str:
        return batch_digest(list(overrides))

    base = digest("data.num_threads=1")
    assert digest("data.num_threads=3", "data.prefetch=1") == base
    assert digest("data.num_threads=2", "data.prefetch=3") == base
    assert digest("data.num_threads=1", "seed=6") != base


def test_torchvision_batches_do_not_depend_on_workers(origin):
    """The torchvision loader's batches (two epochs) are the same bytes with 0, 1 or 2 workers: each sample's
    transforms are seeded from the sample, not from the worker; the training process's RNG is left alone."""
    import torch

    tv = ["data.loader=torchvision", 'data.torchvision.train=["RandomResizedCrop(32)", "RandomHorizontalFlip()", '
                                     '"ColorJitter(0.4, 0.4, 0.4)", "ToTensor()"]']

    def digest(*overrides: str) -> str:
        return batch_digest([*tv, *overrides], accelerator="cpu")

    untouched = torch.rand(3, generator=torch.Generator().manual_seed(0))
    torch.manual_seed(0)
    base = digest("data.torchvision.num_workers=0")  # transforms run in this process
    assert torch.equal(torch.rand(3), untouched)
    assert digest("data.torchvision.num_workers=1") == base
    assert digest("data.torchvision.num_workers=2", "data.torchvision.persistent_workers=false") == base
    assert digest("data.torchvision.num_workers=0", "seed=6") != base
