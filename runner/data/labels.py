"""Class names -> label indices, defined once by the train split and applied by name to every other split.

fn.readers.file(file_root=SPLIT) numbers a split's classes by the place of each subfolder among the split's
own subfolders, so a val/ without one of train/'s classes would score every later class under its
neighbour's label. runner numbers the train split's class folders as the reader would (byte-sorted names,
see data.scan) and gives every split's reader a `file_list` labelled by class name from that map
(data.skips.write_file_list); torchvision's ImageFolder gets the same map (loaders.folder).
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from runner.data.scan import class_folders
from runner.data.shardset import LABELS, find_shard_split
from runner.errors import ConfigError, DataError, display_path, first_names, list_names


@dataclass(frozen=True)
class LabelMap:
    """The train split's class names in label order: classes[i] is label i."""
    classes: tuple[str, ...]
    folder: Path  # the train split whose class folders define it

    def __len__(self) -> int:
        return len(self.classes)

    @property
    def index(self) -> dict[str, int]:
        return {name: i for i, name in enumerate(self.classes)}

    def to_json(self) -> str:
        """{class name: index}, the run's `label_map.json`."""
        return json.dumps(self.index, indent=2, ensure_ascii=False) + "\n"

    @property
    def digest(self) -> str:
        """"N classes, sha256 X": what a checkpoint records of the map (same names, same order, same digest)."""
        text = "\n".join(self.classes).encode("utf-8", "surrogateescape")
        return f"{len(self)} classes, sha256 {hashlib.sha256(text).hexdigest()[:16]}"


def load_label_map(train_folder: str | Path) -> LabelMap:
    """The map the train split's class folders define (DataError when the folder is not an ImageFolder); for a
    split of shards, the map `runner data shard` took from its source's train split."""
    shards = find_shard_split(train_folder)
    if shards is not None:
        return LabelMap(classes=shards.classes, folder=Path(train_folder))
    return LabelMap(classes=class_folders(train_folder), folder=Path(train_folder))


def parse_label_map(text: str) -> dict[str, int]:
    """A logged `label_map.json` back to {class name: index}."""
    return {str(name): int(index) for name, index in json.loads(text).items()}


def extra_classes(label_map: LabelMap, folder: Path, classes: tuple[str, ...] | None = None) -> list[str]:
    """Class folders of `folder` that the train split lacks."""
    known = label_map.index
    return [name for name in (classes if classes is not None else class_folders(folder)) if name not in known]


def missing_classes(label_map: LabelMap, folder: Path) -> list[str]:
    """Train classes that `folder` has no folder for."""
    present = set(class_folders(folder))
    return [name for name in label_map.classes if name not in present]


def extra_classes_error(label_map: LabelMap, folder: Path, extra: list[str], at: dict) -> DataError:
    shown = first_names([f"'{n}'" for n in extra], 8)
    return DataError(f"{display_path(folder)} holds {len(extra)} class folder(s) that the train split "
                     f"{display_path(label_map.folder)} lacks: {shown}. Labels are numbered by the train split's "
                     f"class folders ({len(label_map)}: {list_names(label_map.classes, 6)}), so these images would "
                     "have no label; add the class to the train split (and to model.num_classes), or move it out of "
                     f"{display_path(folder)}.", **at)


def split_classes(label_map: LabelMap, folder: Path) -> tuple[list[str], list[str]]:
    """(class folders of `folder` the train split lacks, train classes `folder` lacks). A split of shards carries
    labels already, numbered by its set's map: a DataError unless that map is the train split's."""
    shards = find_shard_split(folder)
    if shards is None:
        return extra_classes(label_map, folder), missing_classes(label_map, folder)
    if shards.classes != label_map.classes:
        differ = next((i for i, (a, b) in enumerate(zip(shards.classes, label_map.classes)) if a != b),
                      min(len(shards.classes), len(label_map)))
        raise DataError(f"holds shards whose labels number {len(shards.classes)} classes by the map in "
                        f"{display_path(shards.root / LABELS)}, but the train split {display_path(label_map.folder)} "
                        f"numbers {len(label_map)} classes otherwise (first difference at label {differ}). Its images "
                        "would be scored under other classes' labels; shard the splits together (one `runner data "
                        "shard` of a folder of splits), or evaluate on the split's images.", file=folder)
    return [], []


def labelled_files(label_map: LabelMap, folder: Path, files: list[tuple[str, int]], classes: tuple[str, ...],
                   at: dict | None = None) -> list[tuple[str, int]]:
    """(path, label) pairs of a scan of `folder` (labelled by its own folder positions, `classes`), relabelled
    by class name from the train map."""
    extra = extra_classes(label_map, folder, classes)
    if extra:
        raise extra_classes_error(label_map, folder, extra, at or {})
    index = label_map.index
    return [(path, index[classes[label]]) for path, label in files]


def missing_note(label_map: LabelMap, folder: Path, missing: list[str]) -> str:
    shown = first_names([f"'{n}'" for n in missing], 8)
    return (f"{display_path(folder)} has no folder for {len(missing)} of the {len(label_map)} classes of "
            f"{display_path(label_map.folder)} ({shown}); evaluation counts the images it has, each labelled by "
            "its class name as in the train split.")


def check_num_classes(num_classes: int, label_map: LabelMap, at: dict) -> str | None:
    """Raise when the model has fewer outputs than the train split has classes; a note when it has more."""
    if num_classes < len(label_map):
        out = (f"label {num_classes} is" if num_classes == len(label_map) - 1
               else f"labels {num_classes} to {len(label_map) - 1} are")
        raise ConfigError(f"{num_classes} outputs for the {len(label_map)} classes of the train split "
                          f"{display_path(label_map.folder)} ({list_names(label_map.classes, 6)}): {out} out of "
                          f"the model's range. Set model.num_classes={len(label_map)}.", **at)
    if num_classes > len(label_map):
        return (f"model.num_classes is {num_classes} but the train split {display_path(label_map.folder)} has "
                f"{len(label_map)} classes: outputs {len(label_map)} to {num_classes - 1} are never a target.")
    return None
