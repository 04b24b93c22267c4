"""Train input that changes with the epoch: the resolution schedule (pipelines.train.resolution, FFCV's progressive
resizing) and repeated augmentation (data.repeats, timm's RepeatAugSampler).

A DALI pipeline is built for fixed parameters and a fixed file list, so EpochLoader builds the train pipeline again
when the epoch asks for another side or another file list, and keeps it otherwise. Its state is the epoch and the
pipeline's own reader position, so a resume in the middle of the ramp rebuilds the pipeline of that epoch and
continues where it stopped. The torchvision loader takes repeats in its sampler and needs no rebuild."""
from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator
from typing import Any

from runner.config.sections import ResolutionConfig
from runner.errors import ConfigError
from runner.loaders.config import LoaderConfig

# timm is imported where repeated-augmentation indices are made, for start-up (`runner validate`, ~1 s).


def resolution_at(r: ResolutionConfig, epoch: int) -> int:
    """FFCV's get_resolution (ffcv-imagenet train_imagenet.py): min_res up to start_ramp, max_res from end_ramp, and
    the linear interpolation between them rounded to the nearest multiple (of 32) in between."""
    if epoch <= r.start_epoch:
        return r.min
    if epoch >= r.end_epoch:
        return r.max
    side = r.min + (r.max - r.min) * (epoch - r.start_epoch) / (r.end_epoch - r.start_epoch)
    return int(round(side / r.multiple)) * r.multiple  # round half to even, as numpy's np.round


def repeat_indices(n: int, repeats: int, rank: int, world: int, seed: int, epoch: int) -> list[int]:
    """Rank `rank`'s sample indices of an epoch under repeated augmentation: timm's RepeatAugSampler itself (each
    index `repeats` times in a row of one shuffled order, dealt round-robin to the ranks so the copies land on
    different ones, as many per rank as without repeats), shuffled by seed + epoch."""
    from timm.data.distributed_sampler import RepeatAugSampler

    sampler = RepeatAugSampler(range(n), num_replicas=world, rank=rank, num_repeats=repeats)
    sampler.set_epoch(seed + epoch)
    return list(sampler)


def scheduled(cfg: LoaderConfig) -> bool:
    """Whether the experiment's DALI train pipeline changes with the epoch."""
    return cfg.pipelines.train.resolution is not None or cfg.data.repeats > 1


def epoch_key(cfg: LoaderConfig, epoch: int) -> Hashable:
    """What the DALI train pipeline of `epoch` is built from: its side, and the epoch itself when its file list
    (repeats) is new each epoch."""
    r = cfg.pipelines.train.resolution
    return (resolution_at(r, epoch) if r is not None else None, epoch if cfg.data.repeats > 1 else None)


def epoch_view(cfg: LoaderConfig, epoch: int) -> LoaderConfig:
    """The loaders' config as epoch `epoch` trains: the train pipeline's resolution param set."""
    r = cfg.pipelines.train.resolution
    return cfg if r is None else cfg.with_params("train", {r.param: resolution_at(r, epoch)})


def check_epoch_plan(loaded) -> None:
    """The resolution schedule and repeats are settings the loader can carry out as written."""
    cfg = loaded.config
    r, data = cfg.pipelines.train.resolution, cfg.data
    if cfg.pipelines.eval is not None and cfg.pipelines.eval.resolution is not None:
        raise ConfigError("the resolution schedule is the train pipeline's; evaluation runs at one side, its "
                          "pipeline's own param (e.g. pipelines.eval.params.size). Remove pipelines.eval.resolution.",
                          **loaded.at("pipelines.eval.resolution"))
    if r is not None:
        key = "pipelines.train.resolution"
        if data.loader != "dali":
            raise ConfigError(f"the resolution schedule sets a param of the DALI train pipeline, and data.loader is "
                              f"'{data.loader}'; set data.loader=dali, or remove {key}.", **loaded.at(key))
        if r.min > r.max:
            raise ConfigError(f"{r.min} is above {key}.max ({r.max}): the side grows from min to max.",
                              **loaded.at(f"{key}.min"))
        if r.start_epoch >= r.end_epoch:
            raise ConfigError(f"{r.start_epoch} is not before {key}.end_epoch ({r.end_epoch}): the ramp runs from "
                              "start_epoch to end_epoch.", **loaded.at(f"{key}.start_epoch"))
        source = loaded.pipelines.get("train")
        if source is not None and r.param not in source.params:
            declared = ", ".join(sorted(source.params)) or "none"
            raise ConfigError(f"'{r.param}' is not a param of the train pipeline ({source.name}), so the schedule would "
                              f"change nothing; its params: {declared}. Set {key}.param to the one that sets its "
                              "output side.", **loaded.at(f"{key}.param"))
    if data.repeats > 1:
        if data.loader == "synthetic":
            raise ConfigError("the synthetic loader repeats one random batch already; repeated augmentation needs "
                              "images: set data.loader=dali or torchvision, or data.repeats=1.",
                              **loaded.at("data.repeats"))
        if cfg.pipelines.train.hybrid is not None and data.loader == "dali":
            raise ConfigError("a hybrid train pipeline deals the split's files between its two copies, and repeated "
                              "augmentation deals each epoch's copies between the processes; use one of the two "
                              "(remove pipelines.train.hybrid or set data.repeats=1).", **loaded.at("data.repeats"))


class EpochLoader:
    """A DALI train loader built again whenever epoch_key changes (`build(epoch, state)` makes one)."""

    role = "train"

    def __init__(self, build: Callable[[int, Any], Any], key: Callable[[int], Hashable], state: Any = None):
        self.build, self.key = build, key
        self.current = state["epoch"] if state else 0
        self.loader = build(self.current, state["loader"] if state else None)
        self.built = key(self.current)
        self.steps_per_epoch = self.loader.steps_per_epoch
        self.waited: dict[str, float] = {}  # the pipelines' waits before the last rebuild

    def set_epoch(self, epoch: int) -> None:
        """Before epoch `epoch` (counted from 0): its pipeline, built unless the one held is it."""
        self.current = epoch
        if self.key(epoch) != self.built:
            for name, seconds in self.part_waits().items():
                self.waited[name] = seconds
            self.loader.close()
            self.loader = self.build(epoch, None)
            self.built = self.key(epoch)

    def epoch(self, start_batch: int = 0) -> Iterator:
        return self.loader.epoch(start_batch)

    def part_waits(self) -> dict[str, float]:
        """A hybrid pipeline's waits since the loader was made, over its rebuilds."""
        now = getattr(self.loader, "part_waits", dict)()
        return {name: self.waited.get(name, 0.0) + now.get(name, 0.0) for name in now | self.waited}

    def state(self) -> Any:
        return {"epoch": self.current, "loader": self.loader.state()}

    def close(self) -> None:
        self.loader.close()
