"""Which checkpoints a run keeps, here and in its artifact store.

Here, in the run's folder: last.pt (what --resume reads), best.pt (the best by trainer.checkpoint_best) and
index.json. In the run's artifact store, through the tracker's queue (so an unreachable store delays them and an
offline bundle keeps them for `runner tracking sync`): checkpoints/step-NNNNNNN.pt for the latest
trainer.checkpoint_keep checkpoints and the best, and checkpoints/index.json naming them. A checkpoint file is never
stored twice: best.pt is a hard link to the last.pt it was, and the store names the best among the kept steps.
"""
from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

BEST = "best.pt"
INDEX = "index.json"
STORE_DIR = "checkpoints"


def step_name(step: int) -> str:
    return f"{STORE_DIR}/step-{step:07d}.pt"


class CheckpointLog:
    """Rank 0's bookkeeping after each checkpoint.save: best.pt, index.json, and the store's kept set."""

    def __init__(self, tc, directory: Path, tracker):
        self.best_cfg, self.keep, self.upload = tc.checkpoint_best, tc.checkpoint_keep, tc.checkpoint_log
        self.directory, self.tracker = directory, tracker
        saved = directory / INDEX
        self.index: dict[str, Any] = json.loads(saved.read_text()) if saved.is_file() else {}  # a resumed run's
        self.index.setdefault("recent", [])
        self.index.setdefault("sizes", {})
        self.index.setdefault("steps", {})

    def better(self, metrics: dict[str, float] | None) -> bool:
        """Whether these epoch metrics beat the best so far (False without trainer.checkpoint_best)."""
        if self.best_cfg is None or not metrics or self.best_cfg.metric not in metrics:
            return False
        value = float(metrics[self.best_cfg.metric])
        if math.isnan(value):
            return False
        old = self.index.get("best_value")
        return old is None or (value > old if self.best_cfg.mode == "max" else value < old)

    def saved(self, path: Path, *, step: int, epoch: int, metrics: dict[str, float] | None) -> None:
        """`path` (last.pt) was just written at `step`: update best.pt, index.json and the store."""
        name = step_name(step)
        is_best = self.better(metrics)
        if is_best:
            _link(path, self.directory / BEST)
            self.index.update(best=name, best_value=float(metrics[self.best_cfg.metric]), best_epoch=epoch,
                              metric=self.best_cfg.metric, mode=self.best_cfg.mode, best_metrics=dict(metrics))
        recent = [n for n in self.index["recent"] if n != name] + [name]
        dropped = recent[:-self.keep]
        self.index.update(last=name, last_epoch=epoch, recent=recent[-self.keep:])
        self.index["sizes"][name] = path.stat().st_size
        self.index["steps"][name] = step
        kept = set(self.kept())
        for gone in dropped:
            if gone not in kept:
                self.index["sizes"].pop(gone, None)
                self.index["steps"].pop(gone, None)
                if self.upload:
                    self.tracker.delete_artifact(gone)
        text = json.dumps(self.index, indent=1) + "\n"
        _write_atomic(self.directory / INDEX, text)
        if self.upload:
            with tempfile.TemporaryDirectory(prefix=".upload-", dir=self.directory) as tmp:
                link = Path(tmp) / Path(name).name
                _link_or_copy(path, link)  # the tracker takes its own copy before this folder goes
                self.tracker.log_artifact(link, STORE_DIR)
            self.tracker.log_text(text, f"{STORE_DIR}/{INDEX}")

    def kept(self) -> list[str]:
        """The store's checkpoint files: the latest `keep` and the best."""
        best = self.index.get("best")
        return self.index["recent"] + ([best] if best and best not in self.index["recent"] else [])


def _link(src: Path, dst: Path) -> None:
    """dst becomes another name of src's file, atomically (last.pt is replaced by rename, so the link keeps it)."""
    tmp = dst.with_name(f".{dst.name}.link")
    tmp.unlink(missing_ok=True)
    _link_or_copy(src, tmp)
    os.replace(tmp, dst)


def _link_or_copy(src: Path, dst: Path) -> None:
    try:
        os.link(src, dst)
    except OSError:  # a file system without hard links
        shutil.copy2(src, dst)


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
