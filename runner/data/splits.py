"""An experiment's splits as its readers see them: their scans, sizes and the label map the train split
defines, with a DataError that names the experiment's data key as well as the folder."""
from __future__ import annotations

from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path

from runner.config.load import LoadedExperiment
from runner.config.sections import DataConfig
from runner.data.labels import (
    LabelMap,
    check_num_classes,
    extra_classes_error,
    load_label_map,
    missing_note,
    split_classes,
)
from runner.data.manifest import cache_problem
from runner.data.paths import data_root, split_dir
from runner.data.scan import filter_suffixes, scan_image_folder
from runner.data.shardset import check_shard_split, find_shard_split
from runner.data.skips import readable_files
from runner.errors import DataError, display_path


def scan_split(loaded: LoadedExperiment, role: str, suffixes: tuple[str, ...] | None = None):
    """The reader's view of the role's split; a DataError names the experiment's data key as well as the folder."""
    data = loaded.config.data
    return scan_split_at(data, role, split_dir(data, role), suffixes, num_classes=loaded.config.model.num_classes,
                         at=loaded.at)


def scan_split_at(data: DataConfig, role: str, folder: Path, suffixes: tuple[str, ...] | None = None, *,
                  num_classes: int, at: Callable[[str], dict]):
    """scan_split for the folder the role's reader reads (its split, unless the pipeline names another); a shard
    split's labels are checked against `num_classes` (model.num_classes)."""
    with naming_data_key(data, role, folder, at):
        shards = find_shard_split(folder)
        if shards is not None:  # a split of `runner data shard`: its shards, indexes and labels checked instead
            check_shard_split(shards, num_classes)
            return shards
        return scan_image_folder(folder, suffixes or filter_suffixes(None))


@contextmanager
def naming_data_key(data: DataConfig, role: str, folder: Path, at: Callable[[str], dict]):
    """A DataError about the role's folder, raised inside, names the experiment's data key too (`at(key)`)."""
    try:
        yield
    except DataError as e:
        key = "data.root"
        if data_root(data).is_dir() and not folder.exists():  # the root is there, the split name is not
            key = "data.train_split" if role == "train" else "data.eval_split"
        raise DataError(f"{e.file}: {e.message}", **at(key)) from None


def check_split_sizes(loaded: LoadedExperiment, world: int, suffixes: dict[str, tuple[str, ...]], *,
                      accumulation: int = 1) -> None:
    """A DataError when the train split holds less than one batch for each of `world` processes (for each of their
    `accumulation` reader slots), or DALI's eval reader would have a process with no image (it refuses more shards
    than files)."""
    data = loaded.config.data
    files = _readable_count(data, "train", suffixes["train"])
    slots = world * accumulation
    if files // slots < data.batch_size:
        fix = f"lower data.batch_size to at most {files // slots}, or add images" if files >= slots else "add images"
        per = "per process" if accumulation == 1 else f"per batch, {accumulation} batches accumulated per step,"
        raise DataError(f"{data.batch_size} images {per} for {world} process(es) need at least "
                        f"{data.batch_size * slots} training images, but {display_path(split_dir(data, 'train'))} "
                        f"holds {files} that the reader reads; {fix}.", **loaded.at("data.batch_size"))
    if "eval" in suffixes and data.loader == "dali" and loaded.config.trainer.eval_every_n_epochs:
        files = _readable_count(data, "eval", suffixes["eval"])
        if files < world:
            raise DataError(f"{display_path(split_dir(data, 'eval'))} holds {files} image(s) that the reader reads, "
                            f"fewer than the {world} processes that each evaluate a share of them (DALI's reader "
                            "needs at least one per process); add images, or run fewer processes.",
                            **loaded.at("data.eval_split"))


def _readable_count(data: DataConfig, role: str, suffixes: tuple[str, ...]) -> int:
    shards = find_shard_split(split_dir(data, role))
    if shards is not None:
        return shards.samples
    return len(readable_files(split_dir(data, role), suffixes, keep_skipped=not data.skip_bad_files))


def train_label_map(data: DataConfig, at: Callable[[str], dict]) -> LabelMap | None:
    """The label map the train split's class folders define (data.labels), or None where no folder is read
    (the synthetic loader) or the train split is not there yet."""
    folder = split_dir(data, "train")
    if data.loader == "synthetic" or not folder.is_dir():
        return None
    with naming_data_key(data, "train", folder, at):
        return load_label_map(folder)


def check_caches(loaded: LoadedExperiment) -> None:
    """DataError at data.root when a split the run reads is a cache that must not be read as it is (an unfinished
    build, entries without a source image: runner.data.manifest.cache_problem)."""
    data = loaded.config.data
    if data.loader == "synthetic" or not data.root:
        return
    for folder in dict.fromkeys([split_dir(data, "train"), split_dir(data, "eval"),
                                 *(data_root(data) / name for name in data.eval_splits)]):
        problem = cache_problem(folder)
        if problem:
            raise DataError(problem, **loaded.at("data.root"))


def check_labels(loaded: LoadedExperiment) -> tuple[LabelMap | None, list[str]]:
    """(the train split's label map or None, notes to print once): raises when the eval split holds classes the
    train split lacks, or model.num_classes is below the class count. After checked_pipelines, whose scans of
    the folders (with the readers' file filters) report a broken split first."""
    labels = train_label_map(loaded.config.data, loaded.at)
    if labels is None:
        return None, []
    data, notes = loaded.config.data, []
    if data.loader == "torchvision":
        scan_split(loaded, "train")
    folder = split_dir(data, "eval")
    reads_eval = data.loader == "torchvision" or loaded.config.pipelines.eval is not None
    if reads_eval and folder.is_dir() and folder.resolve() != labels.folder.resolve():
        with naming_data_key(data, "eval", folder, loaded.at):
            extra, missing = split_classes(labels, folder)
        if extra:
            raise extra_classes_error(labels, folder, extra, loaded.at("data.root"))
        if missing:
            notes.append(missing_note(labels, folder, missing))
    too_many = check_num_classes(loaded.config.model.num_classes, labels, loaded.at("model.num_classes"))
    return labels, notes + ([too_many] if too_many else [])
