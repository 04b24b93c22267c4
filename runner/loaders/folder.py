"""The torchvision baseline: ImageFolder + DataLoader, PIL decode and transforms on CPU workers."""
from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset, Sampler, get_worker_info
from torchvision.datasets import ImageFolder
from torchvision.datasets.folder import pil_loader

from runner.data.labels import extra_classes, extra_classes_error
from runner.data.paths import split_dir
from runner.data.skips import skipped_files
from runner.data.splits import train_label_map
from runner.dist import Dist
from runner.errors import DataError, display_path
from runner.loaders.config import LoaderConfig
from runner.loaders.epochs import repeat_indices
from runner.loaders.transforms import build_transforms
from runner.machine import cpu_cores


def load_rgb(path: str):
    """torchvision's PIL loader, with a decode failure that names the file (workers pickle it by name)."""
    try:
        return pil_loader(path)
    except (OSError, ValueError, SyntaxError) as e:
        raise DataError(f"cannot decode {display_path(Path(path))} ({type(e).__name__}: {e}). `runner data check "
                        f"{display_path(Path(path).parent.parent)}` lists every such file, and runs leave them out.") from None


def label_by_name(dataset, labels, at: dict) -> None:
    """Relabel an ImageFolder's samples by class name from the train split's map (data.labels): ImageFolder
    numbers a split's classes by their place among its own class folders."""
    folder = Path(dataset.root)
    extra = extra_classes(labels, folder, tuple(dataset.classes))
    if extra:
        raise extra_classes_error(labels, folder, extra, at)
    index = labels.index
    dataset.class_to_idx = {name: index[name] for name in dataset.classes}
    dataset.samples = dataset.imgs = [(path, index[dataset.classes[c]]) for path, c in dataset.samples]
    dataset.targets = [c for _, c in dataset.samples]


def _skip_listed(dataset, folder) -> int:
    """Drop the files `runner data check` listed for this split (as the DALI loader does)."""
    skipped, _ = skipped_files(folder)
    if not skipped:
        return 0
    keep = [(p, c) for p, c in dataset.samples if str(Path(p).relative_to(folder)) not in skipped]
    dropped = len(dataset.samples) - len(keep)
    dataset.samples = dataset.imgs = keep
    dataset.targets = [c for _, c in keep]
    return dropped


def sample_seed(seed: int, epoch: int, index: int) -> int:
    """The seed of one sample's random transforms: a function of the sample, not of the worker it lands on."""
    return (seed * 0x9E3779B97F4A7C15 + epoch * 0xBF58476D1CE4E5B9 + index) % 2**63


class SeededSamples(Dataset):
    """A dataset indexed by (index, seed): each sample's transforms draw from torch's and Python's RNGs seeded
    with its own seed, so a batch is the same bytes whatever the worker count (workers otherwise seed once
    each, and the batches they get depend on how many there are)."""

    def __init__(self, dataset):
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, key: tuple[int, int]):
        index, seed = key
        if get_worker_info() is not None:  # a worker's RNGs serve its samples alone
            return self._seeded(index, seed)
        with torch.random.fork_rng(devices=[]):  # in the training process: leave its RNGs as they were
            state = random.getstate()
            try:
                return self._seeded(index, seed)
            finally:
                random.setstate(state)

    def _seeded(self, index: int, seed: int):
        torch.default_generator.manual_seed(seed)  # the CPU generator alone: torch.manual_seed costs ~60x more
        random.seed(seed)
        return self.dataset[index]


class _ShardSampler(Sampler):
    """This rank's slice of a per-epoch permutation shared by all ranks (train), or a plain slice (eval), as
    (index, seed) pairs for SeededSamples."""

    def __init__(self, n: int, target: Dist, seed: int, shuffle: bool, batch: int, drop_last: bool, repeats: int = 1):
        self.n, self.target, self.seed, self.shuffle, self.repeats = n, target, seed, shuffle, repeats
        per_rank = n // target.world if drop_last else -(-n // target.world)
        if repeats > 1:  # timm's RepeatAugSampler's epoch: as many samples per rank as without repeats
            per_rank = len(repeat_indices(n, repeats, target.rank, target.world, seed, 0))
        self.length = (per_rank // batch) * batch if drop_last else per_rank
        self.epoch, self.skip = 0, 0

    def indices(self) -> list[int]:
        if self.repeats > 1:
            return repeat_indices(self.n, self.repeats, self.target.rank, self.target.world, self.seed,
                                  self.epoch)[:self.length]
        if self.shuffle:
            g = torch.Generator().manual_seed(self.seed + self.epoch)
            order = torch.randperm(self.n, generator=g).tolist()
        else:
            order = list(range(self.n))
        mine = order[self.target.rank::self.target.world]
        return mine[:self.length]

    def __iter__(self):
        return iter([(i, sample_seed(self.seed, self.epoch, i)) for i in self.indices()[self.skip:]])

    def __len__(self) -> int:
        return self.length - self.skip


class FolderLoader:
    def __init__(self, dataset, sampler: _ShardSampler, loader: DataLoader, role: str, batch: int,
                 device: torch.device):
        self.dataset, self.sampler, self.loader, self.role, self.device = dataset, sampler, loader, role, device
        self.steps_per_epoch = -(-sampler.length // batch)
        self.batch = batch
        self._epoch = 0

    @classmethod
    def create(cls, loader: LoaderConfig, role: str, target: Dist, *, state: Any = None) -> FolderLoader:

        cfg, device = loader.data, target.device
        tv = cfg.torchvision
        train_tf, eval_tf = build_transforms(tv, loader.locate)
        root = split_dir(cfg, role)
        if not root.is_dir():
            raise DataError(f"{role} data folder {root} does not exist (data.root/{cfg.train_split if role == 'train' else cfg.eval_split}).")
        dataset = ImageFolder(str(root), transform=train_tf if role == "train" else eval_tf, loader=load_rgb)
        label_by_name(dataset, train_label_map(cfg, loader.at), loader.at("data.root"))
        if cfg.skip_bad_files:
            _skip_listed(dataset, root)
        batch = cfg.batch_size if role == "train" else (cfg.eval_batch_size or cfg.batch_size)
        sampler = _ShardSampler(len(dataset), target, loader.seed, shuffle=role == "train", batch=batch,
                                drop_last=role == "train", repeats=cfg.repeats if role == "train" else 1)
        if role == "train" and sampler.length == 0:
            raise DataError(f"the training set has {len(dataset)} images: fewer than one batch of {batch} per process.")
        # auto: the process's cores, less the training thread's, split between its reader slots
        workers = max(0, cpu_cores() // (target.local_world * target.slots) - 1) if tv.num_workers == "auto" \
            else tv.num_workers
        loader = DataLoader(SeededSamples(dataset), batch_size=batch, sampler=sampler, num_workers=workers,
                            generator=torch.Generator().manual_seed(loader.seed),  # not the training RNG's draws
                            pin_memory=tv.pin_memory and device.type == "cuda", drop_last=role == "train",
                            persistent_workers=tv.persistent_workers and workers > 0,
                            prefetch_factor=tv.prefetch_factor if workers > 0 else None)
        out = cls(dataset, sampler, loader, role, batch, device)
        if state:
            out._epoch = state["epoch"]
        return out

    def epoch(self, start_batch: int = 0) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        self.sampler.epoch, self.sampler.skip = self._epoch, start_batch * self.batch
        try:
            for images, labels in self.loader:
                yield images.to(self.device, non_blocking=True), labels.to(self.device, non_blocking=True)
        except DataError as e:  # from a worker: torch wraps it in its own traceback text; keep our paragraph
            raise DataError(str(e).strip().splitlines()[-1].split("DataError: ", 1)[-1]) from None
        self.sampler.skip = 0
        self._epoch += 1

    def state(self) -> Any:
        return {"epoch": self._epoch}

    def close(self) -> None:
        self.loader = None
