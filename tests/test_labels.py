"""Labels by class name: the train split's class folders define the map, every other split is read by name."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from mlflow import MlflowClient

from tests.conftest import run_cli, write_image_folder
from tests.test_loaders import PATHS, names

TINY = """\
name: tiny
seed: 3
model: {{name: resnet18, num_classes: {classes}}}
optimizer: {{lr: 0.02}}
trainer: {{epochs: 1, max_steps: 2, log_every_n_steps: 1}}
data: {{root: {root}, batch_size: 4, loader: {loader}}}
pipelines:
  train: {{use: {train}, params: {{size: 32}}}}
  eval: {{use: {eval}, params: {{size: 32, resize_shorter: 36}}}}
tracking: {{experiment: tiny}}
"""


def dataset(root: Path, train: tuple[str, ...], val: tuple[str, ...], per_class: int = 5) -> Path:
    """ROOT/train and ROOT/val with the named class folders (small random JPEGs)."""
    for split, classes, seed in (("train", train, 1), ("val", val, 2)):
        write_image_folder(root / split / "all", classes=len(classes), per_class=per_class, seed=seed)
        for i, name in enumerate(classes):
            (root / split / "all" / f"c{i}").rename(root / split / name)
        (root / split / "all").rmdir()
    return root


@pytest.fixture
def gapped(tmp_path) -> Path:
    """val/ lacks the middle class of train/."""
    return dataset(tmp_path / "gapped", ("ant", "bee", "cat"), ("ant", "cat"))


def experiment(project: Path, root: Path, *, classes: int = 3, loader: str = "dali", train: str = "imagenet_train",
               eval: str = "imagenet_eval", name: str = "tiny.yaml") -> Path:
    path = project / "experiments" / name
    path.write_text(TINY.format(root=root, classes=classes, loader=loader, train=train, eval=eval))
    return path


def run_count(project: Path) -> int:
    db = project / "mlflow.db"
    if not db.exists():
        return 0
    client = MlflowClient(f"sqlite:///{db}")
    return len(client.search_runs([e.experiment_id for e in client.search_experiments()]))


def dali_labels(project: Path, root: Path, role: str) -> dict[str, int]:
    """{class/file: label} as the DALI loader yields them, read from real batches (file paths as images)."""
    from runner.dist import Dist
    from runner.loaders import create_loader
    from runner.validate import validate

    path = project / "experiments" / "paths.yaml"
    path.write_text(PATHS.format(root=root, batch=4))
    loader = create_loader(validate(path, accelerator="cpu"), role, Dist())
    folder = root / ("train" if role == "train" else "val")
    out = {}
    for images, labels in loader.epoch():
        for file, label in zip(names(images), labels.tolist()):
            out[str(Path(file).relative_to(folder)) if Path(file).is_absolute() else file] = label
    return out


def torchvision_labels(project: Path, root: Path, role: str) -> dict[str, int]:
    from runner.dist import Dist
    from runner.loaders import create_loader
    from runner.validate import validate

    v = validate(experiment(project, root, loader="torchvision", name="tv.yaml"), accelerator="cpu")
    dataset = create_loader(v, role, Dist()).dataset
    folder = Path(dataset.root)
    return {str(Path(p).relative_to(folder)): label for p, label in dataset.samples}


# ---- the DALI loader -------------------------------------------------------------------------------

def test_an_eval_split_missing_a_middle_class_is_labelled_by_the_train_map(project, gapped):
    labels = dali_labels(project, gapped, "eval")
    assert len(labels) == 10
    assert {name.split("/")[0]: label for name, label in labels.items()} == {"ant": 0, "cat": 2}  # not cat=1
    train = dali_labels(project, gapped, "train")
    assert {name.split("/")[0]: label for name, label in train.items()} == {"ant": 0, "bee": 1, "cat": 2}


def reader_samples(root: Path, shards: int, shard: int, **kwargs) -> list[list[tuple[str, int]]]:
    """Three epochs of fn.readers.file's batches as (sha256 of the file, label) pairs."""
    import hashlib

    import numpy as np
    from nvidia.dali import fn, pipeline_def

    @pipeline_def(batch_size=5, num_threads=1, device_id=None, seed=11)
    def read():
        files, labels = fn.readers.file(file_root=str(root), name="Reader", shard_id=shard, num_shards=shards,
                                        pad_last_batch=True, **kwargs)
        return files, labels

    pipe = read()
    pipe.build()
    size = pipe.reader_meta("Reader")["epoch_size_padded"] // shards
    out = []
    for _ in range(3):
        for _ in range(-(-size // 5)):
            files, labels = pipe.run()
            out.append([(hashlib.sha256(np.array(files[i]).tobytes()).hexdigest(), int(np.array(labels[i]).item()))
                        for i in range(len(files))])
        pipe.reset()
    return out


@pytest.mark.parametrize("shuffle", [{}, {"shuffle_after_epoch": True, "shuffle_after_epoch_seed": 3},
                                     {"random_shuffle": True, "initial_fill": 8}])
@pytest.mark.parametrize("shards,shard", [(1, 0), (2, 1)])
def test_the_injected_file_list_reads_what_file_root_reads_when_the_folders_agree(project, image_dataset, shuffle,
                                                                                   shards, shard):
    """Same files, same order, same labels, epoch after epoch: runs whose splits agree keep their batches."""
    from runner.validate import validate

    v = validate(experiment(project, image_dataset), accelerator="cpu")
    for role, split in (("train", "train"), ("eval", "val")):
        node = v.graphs[role].steps[0].node
        assert "file_list" in node.injected
        listed = dict(node.kwargs)["file_list"].value
        root = image_dataset / split
        assert reader_samples(root, shards, shard, file_list=listed, **shuffle) == \
            reader_samples(root, shards, shard, **shuffle)
