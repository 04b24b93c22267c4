"""The loaders `runner bench` compares, each as overrides of the experiment under test."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from PIL import Image

from runner.config.load import LoadedExperiment
from runner.config.sections import DataConfig
from runner.data.paths import data_root
from runner.errors import ConfigError, did_you_mean
from runner.loaders.transforms import build_transforms


@dataclass(frozen=True)
class Variant:
    name: str
    overrides: tuple[str, ...]
    description: str


def cache_dir(data: DataConfig) -> Path:
    """Where bench puts (or finds) the decoded cache of the experiment's data."""
    root = data_root(data)
    return root.parent / f"{root.name}-cache256"


def _size(role: str, source) -> tuple[str, ...]:
    return (f"pipelines.{role}.params.size={source.params['size']}",) if source and "size" in source.params else ()


DALI_LOADERS = {"dali", "dali-cpu", "cache"}
LOADERS = ("synthetic", "dali", "dali-cpu", "cache", "torchvision")
DEFAULT_LOADERS = ",".join(LOADERS)  # runner bench --loaders
MODES = ("loader", "e2e", "bare", "beside")
TRAINING_MODES = ("e2e", "beside")  # the modes whose img/s is the model's, each taken as a share of its ceiling


def ceiling_side(loaded: LoadedExperiment) -> int:
    """The side of the ceiling's square images: the train pipeline's `size` param, else data.image_size."""
    train = loaded.pipelines.get("train")
    return train.params["size"] if train and "size" in train.params else loaded.config.data.image_size


def torchvision_size(loaded: LoadedExperiment) -> tuple[int, int]:
    """(height, width) of what data.torchvision.train makes of an image, found by running it on one."""
    train, _ = build_transforms(loaded.config.data.torchvision, loaded.locate)
    out = train(Image.new("RGB", (320, 240)))
    return tuple(out.shape[-2:]) if hasattr(out, "shape") else out.size[::-1]


def size_note(loaded: LoadedExperiment, chosen: list[Variant]) -> str | None:
    """A warning when torchvision trains on other images than the ceiling (its transforms are its own)."""
    names = [c.name for c in chosen]
    if "torchvision" not in names or len(names) < 2:
        return None
    tv, side = torchvision_size(loaded), ceiling_side(loaded)
    if tv == (side, side):
        return None
    return (f"data.torchvision.train makes {tv[0]}x{tv[1]} images, the ceiling and the pipelines {side}x{side}: the "
            "torchvision row trains on other images than the rest. Give data.torchvision.train the same crop to "
            "compare them.")


def _params(params: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in params.items())


def variants(loaded: LoadedExperiment, names: list[str]) -> list[Variant]:
    """The overrides for each named loader, checked against the experiment."""
    train = loaded.pipelines.get("train")
    # the ceiling trains on the same image size as the pipelines it is compared with
    size = (f"data.image_size={train.params['size']}",) if train and "size" in train.params else ()
    side = ceiling_side(loaded)
    table = {
        "synthetic": Variant("synthetic", ("data.loader=synthetic", *size),
                             f"random tensors on the device (ceiling), {side}x{side}"),
        "dali": Variant("dali", ("data.loader=dali",), f"DALI, {train.name if train else '?'} as configured"
                        + (f"; a copy with {_params(train.hybrid.params)} makes {train.hybrid.share:g} of each batch"
                           if train and train.hybrid else "")),
        "dali-cpu": Variant("dali-cpu", ("data.loader=dali", "pipelines.train.params.decode_device=cpu",
                                         "pipelines.train.hybrid=null"),
                            "DALI, JPEG decode on CPU threads"),
        # the cache pipelines have their own parameters: those of the JPEG pipelines are dropped first
        "cache": Variant("cache", ("data.loader=dali", f"data.root={cache_dir(loaded.config.data)}", "~pipelines.train.params",
                                   "pipelines.train.hybrid=null",
                                   "pipelines.train.use=imagenet_train_cache", *_size("train", train),
                                   "~pipelines.eval", "pipelines.eval.use=imagenet_eval_cache"),
                         "DALI from the pre-decoded cache (max side 256)"),
        "torchvision": Variant("torchvision", ("data.loader=torchvision",),
                               "torchvision DataLoader (PIL on CPU)" + ("" if "torchvision" not in names else
                                                                        ", {}x{}".format(*torchvision_size(loaded)))),
    }
    out = []
    for name in names:
        if name not in table:
            raise ConfigError(f"unknown loader '{name}'.{did_you_mean(name, table)} Loaders: {', '.join(table)}.",
                              file="command line", where="--loaders")
        if name in DALI_LOADERS and train is None:
            raise ConfigError(f"loader '{name}' needs the experiment's DALI pipelines, and this experiment has none "
                              f"(data.loader is {loaded.config.data.loader}); benchmark an experiment with pipelines, "
                              "e.g. experiments/resnet50_dali.yaml.", file=loaded.path)
        if name == "dali-cpu" and train is not None and "decode_device" not in train.params:
            raise ConfigError(f"loader 'dali-cpu' sets pipelines.train.params.decode_device=cpu, but pipeline "
                              f"'{train.name}' has no decode_device parameter.", file=train.file)
        out.append(table[name])
    return out


def step_settings(v) -> dict:
    """What one training step computes, whatever feeds it: a ratio is taken only between rows that agree on all
    of these (the loader variants change data.* and pipelines.* alone, so every variant of an experiment does)."""
    cfg = v.config
    return {"model": cfg.model.name, "classes": cfg.model.num_classes, "batch": cfg.data.batch_size,
            "image": ceiling_side(v.loaded), "precision": cfg.trainer.precision, "channels_last": cfg.trainer.channels_last,
            "compile": cfg.trainer.compile, "compile_mode": cfg.trainer.compile_mode if cfg.trainer.compile else None,
            "optimizer": cfg.optimizer.name, "label_smoothing": cfg.trainer.label_smoothing,
            "loss": _loss(cfg.trainer.loss),
            "mix": _recipe(cfg.pipelines.train.mix), "ema": _recipe(cfg.trainer.ema),
            "accelerator": v.target.accelerator, "processes": v.processes}


def _loss(loss) -> str:
    """trainer.loss as one comparable value: its name, then its non-default keys."""
    rest = _recipe(loss).replace(f"name {loss.name}", "").strip(", ")
    return loss.name + (f" ({rest})" if rest and rest != "on" else "")


def _recipe(section) -> str:
    """A recipe section (pipelines.train.mix, trainer.ema) as one comparable value: its non-default keys."""
    if section is None:
        return "off"
    default = type(section)()
    return ", ".join(f"{k} {v}" for k, v in vars(section).items() if v != getattr(default, k)) or "on"


def ceiling_label(settings: dict, every: list[dict]) -> str:
    """The ceiling's name in tables: eager or compiled (and the mode), then whatever else differs among the
    ceilings of one bench."""
    label = "eager" if not settings["compile"] else "compiled" + (
        "" if settings["compile_mode"] == "default" else f" {settings['compile_mode']}")
    shown = {"model": "{}", "classes": "{} classes", "batch": "batch {}", "image": "{} px", "precision": "{}",
             "channels_last": "channels_last {}", "optimizer": "{}", "label_smoothing": "smoothing {}",
             "loss": "{}", "mix": "mix: {}", "ema": "ema: {}",
             "accelerator": "{}", "processes": "{} processes"}
    varying = [k for k in shown if len({str(s[k]) for s in every}) > 1]
    return ", ".join([label, *(shown[k].format(settings[k]) for k in varying)])
