"""Labels by class name: the train split's class folders define the map, every other split is read by name."""
from __future__ import annotations

from pathlib import Path

import pytest
from mlflow import MlflowClient

from tests.fixtures.labels import dataset, experiment
from tests.helpers import PATHS, names, run_cli


def run_count(project: Path) -> int:
    db = project / "mlflow.db"
    if not db.exists():
        return 0
    client = MlflowClient(f"sqlite:///{db}")
    return len(client.search_runs([e.experiment_id for e in client.search_experiments()]))


def dali_labels(project: Path, root: Path, role: str, filters: str = "") -> dict[str, int]:
    """{class/file: label} as the DALI loader yields them, read from real batches (file paths as images)."""
    from runner.dist import Dist
    from runner.loaders.loader import create_loader
    from runner.run.validate import validate

    path = project / "experiments" / "paths.yaml"
    text = PATHS.format(root=root, batch=4)
    path.write_text(text.replace("file_root=$data_root", f"file_root=$data_root{filters}"))
    loader = create_loader(validate(path, accelerator="cpu").loaders, role, Dist(), feeds_model=False)
    folder = root / ("train" if role == "train" else "val")
    out = {}
    for images, labels in loader.epoch():
        for file, label in zip(names(images), labels.tolist()):
            out[str(Path(file).relative_to(folder)) if Path(file).is_absolute() else file] = label
    return out


def torchvision_labels(project: Path, root: Path, role: str) -> dict[str, int]:
    from runner.dist import Dist
    from runner.loaders.loader import create_loader
    from runner.run.validate import validate

    v = validate(experiment(project, root, loader="torchvision", name="tv.yaml"), accelerator="cpu")
    dataset = create_loader(v.loaders, role, Dist()).dataset
    folder = Path(dataset.root)
    return {str(Path(p).relative_to(folder)): label for p, label in dataset.samples}


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
    from runner.run.validate import validate

    v = validate(experiment(project, image_dataset), accelerator="cpu")
    for role, split in (("train", "train"), ("eval", "val")):
        node = v.graphs[role].steps[0].node
        assert "file_list" in node.injected
        listed = dict(node.kwargs)["file_list"].value
        root = image_dataset / split
        assert reader_samples(root, shards, shard, file_list=listed, **shuffle) == \
            reader_samples(root, shards, shard, **shuffle)


EXTRA = ("error: experiments/tiny.yaml:6: data.root: extra/val holds 1 class folder(s) that the train split "
         "extra/train lacks: 'dog'. Labels are numbered by the train split's class folders (3: ant, bee, cat), so "
         "these images would have no label; add the class to the train split (and to model.num_classes), or move "
         "it out of extra/val.")


@pytest.mark.parametrize("command", ["launch", "validate", "compile"])
def test_an_eval_class_the_train_split_lacks_stops_before_any_work(project, command, capsys):
    root = dataset(project / "extra", ("ant", "bee", "cat"), ("ant", "bee", "cat", "dog"))
    code, out, err = run_cli([command, experiment(project, root)], capsys)
    assert code == 2 and err.strip().splitlines()[-1] == EXTRA, err
    assert "Traceback" not in err and run_count(project) == 0 and not (project / "mlflow.db").exists()


def test_the_torchvision_loader_refuses_an_extra_eval_class_too(project, capsys):
    root = dataset(project / "extra", ("ant", "bee", "cat"), ("ant", "bee", "cat", "dog"))
    code, _, err = run_cli(["validate", experiment(project, root, loader="torchvision")], capsys)
    assert code == 2 and err.strip().splitlines()[-1] == EXTRA, err


def test_too_few_model_outputs_stop_and_too_many_are_noted(project, gapped, capsys):
    path = experiment(project, gapped, classes=2)
    code, _, err = run_cli(["launch", path], capsys)
    assert code == 2 and err.strip().splitlines()[-1] == (
        "error: experiments/tiny.yaml:3: model.num_classes: 2 outputs for the 3 classes of the train split "
        "gapped/train (ant, bee, cat): label 2 is out of the model's range. Set model.num_classes=3."), err
    assert run_count(project) == 0
    code, _, err = run_cli(["validate", path, "model.num_classes=1"], capsys)
    assert code == 2 and "command line 'model.num_classes=1': model.num_classes: 1 outputs for the 3 classes" in err
    assert "labels 1 to 2 are out of the model's range" in err
    code, out, err = run_cli(["validate", experiment(project, gapped, classes=5)], capsys)
    assert code == 0, err
    assert err.count("note: model.num_classes is 5 but the train split gapped/train has 3 classes: outputs 3 to 4 "
                     "are never a target.") == 1
    assert "3 classes, numbered by the class folders of gapped/train; every split is labelled by class name" in out


def test_torchvision_and_the_decoded_cache_label_every_file_as_the_dali_loader_does(project, gapped, capsys):
    from runner.data.labels import load_label_map

    expected = load_label_map(gapped / "train").index
    for role in ("train", "eval"):
        tv = torchvision_labels(project, gapped, role)
        assert dali_labels(project, gapped, role).items() <= tv.items()  # training drops its last partial batch
        assert len(tv) == (15 if role == "train" else 10)
        assert all(label == expected[name.split("/")[0]] for name, label in tv.items())
    cache = project / "cache"
    code, _, err = run_cli(["data", "cache", gapped, cache, "--max-side", "48"], capsys)
    assert code == 0, err
    for role in ("train", "eval"):
        cached = {name.removesuffix(".npy"): label for name, label in dali_labels(project, cache, role,
                                                                                 ', file_filters=["*.npy"]').items()}
        assert cached.items() <= torchvision_labels(project, gapped, role).items() and len(cached) >= 10
    from runner.dist import Dist
    from runner.loaders.loader import create_loader
    from runner.run.validate import validate

    v = validate(experiment(project, cache, train="imagenet_train_cache", eval="imagenet_eval_cache",
                            name="cache.yaml"), accelerator="cpu")
    assert v.labels.index == expected
    labels = [label for _, batch in create_loader(v.loaders, "eval", Dist()).epoch() for label in batch.tolist()]
    assert labels == [0] * 5 + [2] * 5  # the cache pipeline's own batches, 'cat' still 2


def test_a_skip_list_keeps_the_train_maps_labels(project, gapped, capsys):
    """`runner data check` lists a bad file of the gapped val split: the reader leaves it out, labels stay by name."""
    (gapped / "val" / "cat" / "002.jpg").write_bytes(b"not a jpeg")
    code, out, err = run_cli(["data", "check", gapped / "val"], capsys)
    assert code == 1 and "cat/002.jpg" in out, err
    labels = dali_labels(project, gapped, "eval")
    assert "cat/002.jpg" not in labels and len(labels) == 9
    assert {name.split("/")[0]: label for name, label in labels.items()} == {"ant": 0, "cat": 2}
