"""What a run records so that someone else can re-run it: params, data inputs, the resolved YAML, the pipelines."""
from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from runner import console
from runner.config.frozen import as_logged
from runner.config.sections import DataConfig
from runner.data import manifest
from runner.data.labels import LabelMap
from runner.data.manifest import stale_source_note
from runner.data.paths import split_dir
from runner.data.scan import fingerprint
from runner.loaders.dali_plan import compiled_source, reader_suffixes
from runner.loaders.slots import check_accumulation
from runner.run import runinfo
from runner.run.snapshot import pipeline_files
from runner.tracking import data_input, flatten
from runner.tracking.logged_model import log_logged_model
from runner.weights.kept import INDEX

LABEL_MAP_ARTIFACT = "label_map.json"  # {class name: label} of the train split, logged with every run


def split_fingerprints(data: DataConfig, graphs: Mapping[str, Any]) -> dict[str, tuple[Path, dict]]:
    """role -> (split folder, fingerprint) of the folders the run's readers read (none when synthetic); `graphs`:
    the checked DALI pipelines, whose readers' file filters say which files are read."""
    if data.loader == "synthetic":
        return {}
    found = {}
    for role in ("train", "eval"):
        folder = split_dir(data, role)
        if folder.is_dir():
            found[role] = (folder, fingerprint(folder, reader_suffixes(graphs.get(role))))
    return found


def stale_cache_notes(fingerprints: dict[str, tuple[Path, dict]]) -> None:
    """Say when a split the run reads is a cache whose source, on this machine, has changed since it was built."""
    for folder, _ in fingerprints.values():
        note = stale_source_note(folder)
        if note:
            console.note(note)


def run_params(v, world: int, fingerprints: dict[str, tuple[Path, dict]] | None = None) -> dict[str, str]:
    """The flattened resolved config, plus seeds and the dataset fingerprint: the run's params."""
    accumulation = check_accumulation(v.loaded, world)
    extra = {"trainer.accumulation": accumulation, **runinfo.seeds(v.config, world * accumulation)}  # seeds per slot
    if v.labels is not None:
        extra["data.num_classes"] = len(v.labels)
    if fingerprints is None:
        fingerprints = split_fingerprints(v.config.data, v.graphs)
    for role, (folder, fp) in fingerprints.items():
        extra.update({f"data.fingerprint.{role}.{k}": val for k, val in fp.items()})
        extra.update(manifest.run_params(role, folder))  # a cache says what it was made from, and how
    return {**flatten(as_logged(v.loaded.resolved)), **flatten(extra)}


def split_inputs(fingerprints: dict[str, tuple[Path, dict]], *, evaluates: bool) -> list:
    """The splits the run reads as MLflow dataset inputs: "training", and "eval" when it `evaluates`."""
    inputs = []
    for role, (folder, fp) in fingerprints.items():
        if role == "eval" and not evaluates:
            continue
        folder = folder.resolve()
        inputs.append(data_input(name=f"{folder.parent.name}/{folder.name}", sha256=fp["sha256"], source=str(folder),
                                 context="training" if role == "train" else "eval",
                                 profile=dict(fp)))
    return inputs


def log_run_inputs(v, tracker, world: int, fingerprints: dict[str, tuple[Path, dict]]) -> None:
    """Tags, the data splits, the resolved YAML and the compiled pipelines: what a re-run on another machine
    needs."""
    cfg = v.config
    evaluates = bool(cfg.trainer.eval_every_n_epochs) and not (cfg.pipelines.eval is None and cfg.data.loader == "dali")
    tracker.set_tags(runinfo.run_tags(v.loaded, v.target.accelerator, world))
    for data in split_inputs(fingerprints, evaluates=evaluates):
        tracker.log_input(data)
    tracker.log_text(OmegaConf.to_yaml(as_logged(v.loaded.resolved)), "experiment.yaml")
    if v.labels is not None:
        tracker.log_text(v.labels.to_json(), LABEL_MAP_ARTIFACT)
    for role in v.graphs:
        tracker.log_text(compiled_source(v, role), f"pipelines/{role}_pipeline.py")
    for name, text in pipeline_files(v.loaded).items():  # the `use:` files, so a re-run needs no checkout
        tracker.log_text(text, name)


def log_model(uri: str, run_id: str, checkpoint: Path | None, *, name: str, resolved: dict[str, Any],
              labels: LabelMap | None) -> None:
    """The run's LoggedModel (MLflow's Models column) named `name`, pointing at its best (else last) checkpoint in
    the store, with the resolved experiment and the label map."""
    index_file = checkpoint.parent / INDEX if checkpoint else None
    if index_file is None or not index_file.is_file():
        return
    index = json.loads(index_file.read_text())
    files = {"experiment.yaml": OmegaConf.to_yaml(as_logged(resolved))}
    if labels is not None:
        files[LABEL_MAP_ARTIFACT] = labels.to_json()
    log_logged_model(uri, run_id, name, index, files)
