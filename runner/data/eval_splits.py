"""More eval sets (data.eval_splits): folders under data.root beside the eval split, each read by the eval
pipeline (or the torchvision eval transforms) at every evaluation and logged under its own metric prefix,
`eval_NAME/...`; data.eval_split keeps `eval/...`.

Each extra split is the experiment with data.eval_split set to it (split_view): the same pipeline, its
`data_root` bound to that folder, its files labelled by class name from the train split's map, and checked
as the eval split is (scan_split, extra and missing classes).
"""
from __future__ import annotations

import dataclasses
import re

from runner.config.load import LoadedExperiment
from runner.data.labels import extra_classes_error, missing_note, split_classes
from runner.data.paths import split_dir
from runner.data.scan import filter_suffixes
from runner.data.splits import scan_split, train_label_map
from runner.errors import ConfigError, DataError, display_path

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
KEY = "data.eval_splits"


def extra_splits(data) -> list[str]:
    """The extra eval splits in order, without data.eval_split (evaluated as the main one) and repeats."""
    return list(dict.fromkeys(name for name in data.eval_splits if name != data.eval_split))


def split_prefix(name: str) -> str:
    """The metric prefix of an extra eval split."""
    return f"eval_{name}"


def check_split_names(loaded: LoadedExperiment) -> None:
    """ConfigError at data.eval_splits for a name that is not one folder name fit for a metric prefix, the train
    split, or a DALI eval pipeline that reads a folder of its own."""
    data = loaded.config.data
    for name in data.eval_splits:
        if not _NAME.match(name):
            raise ConfigError(f"'{name}' is not a split folder name: each entry names one folder under data.root "
                              "(letters, digits, _ . -, no '/'), logged as eval_NAME/... .", **loaded.at(KEY))
        if name == data.train_split:
            raise ConfigError(f"'{name}' is the train split (data.train_split); an eval split holds images the "
                              "model does not train on.", **loaded.at(KEY))
    source = loaded.pipelines.get("eval")
    if extra_splits(data) and data.loader == "dali" and source is not None and not _binds_data_root(source):
        raise ConfigError("the eval pipeline reads a folder of its own (pipelines.eval.params.data_root is set, or "
                          "it declares no data_root parameter), so it cannot read the splits data.eval_splits names; "
                          "leave data_root unset so that runner binds it to each split.", **loaded.at(KEY))


def _binds_data_root(source) -> bool:
    return "data_root" in source.params and (
        "data_root" not in source.explicit_params or source.params["data_root"] is None)


def split_view(loaded: LoadedExperiment, name: str) -> LoadedExperiment:
    """The experiment with data.eval_split = `name`: what launch checks of that split."""
    config = loaded.config
    data = dataclasses.replace(config.data, eval_split=name)
    return dataclasses.replace(loaded, config=dataclasses.replace(config, data=data))


def check_eval_splits(loaded: LoadedExperiment, world: int, suffixes: tuple[str, ...]) -> list[str]:
    """Check every extra split as launch checks the eval split (folder, layout, classes by name, one file per
    process for DALI's reader); returns the notes to print (classes a split has no folder for)."""
    labels, notes = train_label_map(loaded.config.data, loaded.at), []
    for name in extra_splits(loaded.config.data):
        view = split_view(loaded, name)
        folder = split_dir(view.config.data, "eval")
        try:
            scan = scan_split(view, "eval", suffixes or filter_suffixes(None))
        except DataError as e:
            if not folder.is_dir():  # the split's own folder is not there: name this key (scan_split named the folder)
                raise DataError(e.message, **loaded.at(KEY)) from None
            raise
        if labels is not None:
            extra, missing = split_classes(labels, folder)
            if extra:
                raise extra_classes_error(labels, folder, extra, loaded.at(KEY))
            if missing:
                notes.append(missing_note(labels, folder, missing))
        if loaded.config.data.loader == "dali" and len(scan) < world:
            raise DataError(f"{display_path(folder)} holds {len(scan)} image(s) that the reader reads, fewer "
                            f"than the {world} processes that each evaluate a share of them (DALI's reader needs at "
                            "least one per process); add images, or run fewer processes.", **loaded.at(KEY))
    return notes
