"""Where an experiment's data lives: the generated set's folder, the data root, each role's split."""
from __future__ import annotations

from pathlib import Path

from runner.config.sections import DataConfig, SynthConfig

# bump when the images change, so that a set made by an older generator is not taken for this one
FORMAT = 1  # the generated set's version, part of its folder name

# where `runner data check` writes its list unless told otherwise, relative to the checked folder. A
# file, not a folder such as ROOT/.runner/: the reader would number any subfolder as a class.
DEFAULT_SKIP_LIST = ".runner-bad-files.txt"


def synth_dir(synth: SynthConfig) -> Path:
    """Where the generated dataset for these settings lives (one folder per setting)."""
    name = (f"v{FORMAT}-c{synth.classes}-n{synth.per_class}-e{synth.eval_per_class}"
            f"-s{synth.min_side}-{synth.max_side}-q{synth.quality}")
    return Path(synth.dir) / name


def data_root(data: DataConfig) -> Path:
    return Path(data.root) if data.root else synth_dir(data.synth)


def split_dir(data: DataConfig, role: str) -> Path:
    return data_root(data) / (data.train_split if role == "train" else data.eval_split)
