"""Checkpoints written atomically: a kill during the write never damages the last good one."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

from runner.config.sections import Experiment, HybridConfig
from runner.errors import ConfigError, DataError, display_path
from runner.loaders.slots import global_batch

# torch is imported where a checkpoint is saved or loaded, for start-up: `runner validate` reads this module
# to check checkpoint settings (~4 s).

LAST = "last.pt"


def run_dir(checkpoint_dir: str | Path, experiment: str, run_id: str) -> Path:
    """Where one run keeps its checkpoints: CHECKPOINT_DIR/EXPERIMENT/RUN_ID/."""
    return Path(checkpoint_dir) / (experiment or "experiment") / run_id


def save(state: dict[str, Any], directory: Path, name: str = LAST) -> Path:
    """Write to a temporary file in the same folder, fsync, then rename over `name` (atomic on POSIX)."""
    import torch  # start-up: `runner validate` reads this module's settings without torch

    directory.mkdir(parents=True, exist_ok=True)
    target = directory / name
    fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save(state, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
        dir_fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dir_fd)  # make the rename itself durable
        finally:
            os.close(dir_fd)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target


def load(path: Path) -> dict[str, Any]:
    import torch  # start-up: `runner validate` reads this module's settings without torch

    try:
        return torch.load(path, map_location="cpu", weights_only=False)
    except FileNotFoundError:
        raise DataError(f"checkpoint {path} does not exist.") from None
    except Exception as e:  # a foreign or damaged file
        raise DataError(f"checkpoint {path} cannot be read ({type(e).__name__}: {e}).") from None


def find_latest(checkpoint_dir: str | Path, experiment: str) -> Path | None:
    """The most recently written last.pt of an experiment, if any."""
    root = Path(checkpoint_dir) / (experiment or "experiment")
    found = sorted(root.glob(f"*/{LAST}"), key=lambda p: p.stat().st_mtime)
    return found[-1] if found else None


def fixed_settings(cfg: Experiment, world: int, *, hybrid: HybridConfig | None,
                   label_digest: str | None) -> dict[str, Any]:
    """The settings a checkpoint's state is shaped by: the model's and optimizer's state dicts, and the readers'
    positions (which files each process lists, in which order, in batches of what size, in which epoch's pipeline),
    and whether it holds averaged weights (trainer.ema). Saved with it. `hybrid`: the train pipeline's
    (its source's, with its file's); `label_digest`: the train split's label map's."""
    return {"model.name": cfg.model.name, "model.num_classes": cfg.model.num_classes,
            "model.kwargs": dict(cfg.model.kwargs), "optimizer.name": cfg.optimizer.name,
            "scheduler.name": cfg.scheduler.name, "seed": cfg.seed, "data.loader": cfg.data.loader,
            "data.root": cfg.data.root, "data.train_split": cfg.data.train_split,
            "data.batch_size": cfg.data.batch_size, "processes": world,
            "trainer.global_batch_size": global_batch(cfg, world),
            "data.label_map": label_digest,
            "pipelines.train.hybrid": None if hybrid is None else f"share {hybrid.share:g}, deal {hybrid.deal}",
            "trainer.ema": "on" if cfg.trainer.ema is not None else "off",
            "data.repeats": cfg.data.repeats, "pipelines.train.resolution": _ramp(cfg.pipelines.train.resolution)}


def _ramp(r) -> str | None:
    return None if r is None else f"{r.param} {r.min}-{r.max} px over epochs {r.start_epoch}-{r.end_epoch}, " \
                                  f"multiples of {r.multiple}"


def check_resumable(state: dict[str, Any], path: Path, settings: dict[str, Any]) -> None:
    """Refuse to resume under settings the checkpoint's state does not fit, before anything starts or is logged."""
    saved = state.get("fixed_settings", {})
    differ = [f"{key}: {_show(saved[key])} in the checkpoint, {_show(now)} now"
              for key, now in settings.items() if key in saved and saved[key] != now]
    if differ:
        raise ConfigError(f"checkpoint {display_path(path)} cannot resume under these settings: "
                          f"{'; '.join(differ)}. Its model, optimizer and data readers' positions were saved under "
                          "the checkpoint's values: launch with those, or start a new run without --resume.",
                          where="--resume")


def _show(value: Any) -> str:
    return "none" if value is None else str(value)
