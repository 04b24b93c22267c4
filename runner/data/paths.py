"""Where an experiment's data lives: the generated set's folder, the data root, each role's split."""
from __future__ import annotations

from pathlib import Path

from runner.config.sections import DataConfig, SynthConfig


def synth_dir(synth: SynthConfig) -> Path:
    """Where the generated dataset for these settings lives (one folder per setting)."""
    from runner.data.synth import FORMAT  # a new generator version gets a new folder

    name = (f"v{FORMAT}-c{synth.classes}-n{synth.per_class}-e{synth.eval_per_class}"
            f"-s{synth.min_side}-{synth.max_side}-q{synth.quality}")
    return Path(synth.dir) / name


def data_root(data: DataConfig) -> Path:
    return Path(data.root) if data.root else synth_dir(data.synth)


def split_dir(data: DataConfig, role: str) -> Path:
    return data_root(data) / (data.train_split if role == "train" else data.eval_split)
