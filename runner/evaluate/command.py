"""`runner evaluate`: a trained model's weights scored on any split, through any loader or eval pipeline, on
this machine's processes (DDP through torchrun, as launch), logged as a new MLflow run in the experiment of
the run that trained them, tagged with its id (runner.evaluates) and linked from its description.

The weights come from a checkpoint file (its "model", and its "ema" when it has one), or from a tracked run
(run_checkpoint). The experiment is the one the run logged, or the one the checkpoint holds, unless the
command names another; overrides change the loader, the pipeline or the split.
"""
from __future__ import annotations

import os
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import yaml
from torch import nn

from runner import console, dist
from runner.config.frozen import IDENTITY_TAGS
from runner.config.sections import DataConfig
from runner.data.labels import LabelMap
from runner.data.paths import split_dir
from runner.dist import Dist, under_torchrun
from runner.errors import ConfigError, DataError, display_path
from runner.evaluate.report import finish_evaluation
from runner.evaluate.score import create_eval_loaders, evaluate, evaluate_nets
from runner.loaders.loader import create_loader
from runner.models.device import autocast_args, build_model
from runner.run.data import checked_with_data, ensure_data
from runner.run.notes import label_notes, run_notes
from runner.run.processes import WORKER_ENV, configure_torch, run_torchrun, torch_threads, torchrun_args
from runner.run.snapshot import write_snapshot
from runner.run.validate import validate
from runner.tracking import resolve_tracking_uri
from runner.tracking.store import get_run, store_uri
from runner.weights import checkpoint
from runner.weights.store import run_checkpoint

WEIGHTS = ("model", "ema")  # the checkpoint keys holding weights: the trained ones, the averaged ones


@dataclass(frozen=True)
class Source:
    """What is evaluated: the weights file, the run that trained them and the experiment to evaluate with."""
    weights: Path
    run_id: str | None
    experiment: Path                       # the experiment file (written under --out unless given)
    tracking_experiment: str | None = None  # the MLflow experiment of the run (None: the experiment file's)
    uri: str | None = None                 # the store holding the run


def looks_like_file(source: str) -> bool:
    return "/" in source or source.endswith((".pt", ".pth", ".ckpt")) or Path(source).exists()


def load_weights_file(path: Path) -> dict[str, Any]:
    """A checkpoint runner launch wrote: its model weights and the resolved experiment it trained."""
    if path.is_dir():
        path = path / checkpoint.LAST
    if not path.is_file():
        raise DataError(f"{display_path(path)}: no such checkpoint file.", where="CHECKPOINT")
    try:
        state = checkpoint.load(path)
    except DataError as e:
        raise DataError(f"{e.message} runner evaluate takes a checkpoint that runner launch wrote (a last.pt under "
                        "trainer.checkpoint_dir), or a run id.", where="CHECKPOINT") from None
    if not isinstance(state, dict) or not {"model", "config"} <= set(state):
        raise DataError(f"{display_path(path)} is not a checkpoint of runner launch: it holds no 'model' weights and "
                        "'config' (the resolved experiment) beside them, as the last.pt files under "
                        "trainer.checkpoint_dir do.", where="CHECKPOINT")
    return state


def resolve_source(source: str, experiment: str | None, uri: str | None, out: Path) -> Source:
    """A checkpoint file (or run folder) or a run id -> the weights and the experiment to evaluate them with (the
    one given, or the one the run logged or the checkpoint holds, written to OUT/<run id>/experiments/)."""
    if looks_like_file(source):
        path = Path(source)
        path = path / checkpoint.LAST if path.is_dir() else path
        state = load_weights_file(path)
        folder = out / str(state.get("run_id") or path.stem) / "experiments"
        exp = Path(experiment) if experiment else write_experiment(state["config"], folder, path.stem)
        return Source(weights=path, run_id=state.get("run_id"), experiment=exp)

    store = store_uri(uri)
    record = get_run(store, source)
    weights = run_checkpoint(record, store)
    exp = Path(experiment) if experiment else write_snapshot(record, out / record.run_id).experiment
    return Source(weights=weights, run_id=record.run_id, experiment=exp, tracking_experiment=record.experiment,
                  uri=store)


def write_experiment(config: dict[str, Any], folder: Path, stem: str) -> Path:
    """A checkpoint's resolved experiment as a file, without the tags that name the run's place."""
    tags = (config.get("tracking") or {}).get("tags") or {}
    for key in IDENTITY_TAGS:
        tags.pop(key, None)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{config.get('name') or stem}.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False, allow_unicode=True))
    return path


def source_overrides(src: Source, user: list[str]) -> list[str]:
    """Log the evaluation beside the run it evaluates: same store and experiment, named after it."""
    logged = (yaml.safe_load(src.experiment.read_text()) or {}).get("tracking") or {}
    out = [f"tracking.run_name='eval-{(src.run_id or src.weights.stem)[:8]}'"]
    if src.tracking_experiment and logged.get("experiment") != src.tracking_experiment:
        out.append(f"tracking.experiment='{src.tracking_experiment}'")
    if src.uri and resolve_tracking_uri(logged.get("uri")) != src.uri:
        out.append(f"tracking.uri='{src.uri}'")
    return out + user  # the user's own settings come last and win


def check_label_map(state: dict[str, Any], data: DataConfig, labels: LabelMap | None, weights: Path,
                    at: dict[str, Any]) -> None:
    """Refuse data whose class folders number the classes otherwise (`labels`, the train split's map) than the run
    that trained the weights: its outputs would be scored against other classes' labels. `at`: data.root's place."""
    saved = (state.get("fixed_settings") or {}).get("data.label_map")
    if saved is None or data.loader == "synthetic":
        return
    train = split_dir(data, "train")
    if labels is None:
        raise DataError(f"the weights in {display_path(weights)} were trained on a label map of {saved}, which "
                        f"runner rebuilds from the train split's class folders; {display_path(train)} is not here. "
                        "Point data.root (or data.train_split) at a folder holding the run's class folders.", **at)
    if labels.digest != saved:
        raise DataError(f"the class folders of {display_path(train)} map class names to labels as {labels.digest}, "
                        f"but the weights in {display_path(weights)} were trained on "
                        f"{saved}: their outputs would be scored against other classes' labels. Point data.root "
                        "(or data.train_split) at the class folders the run trained on.", **at)


def evaluate_command(source: str, experiment: str | None, overrides: list[str], uri: str | None,
                     out: Path = Path("evaluated")) -> int:
    """`runner evaluate`: resolve what is evaluated, check the data, run the evaluation here or under torchrun."""
    if under_torchrun():
        if WORKER_ENV not in os.environ or experiment is None:
            raise ConfigError("runner evaluate starts its own processes: run it without torchrun, with "
                              "trainer.devices=N for N processes.", where="torchrun")
        return run_eval_worker(validate(experiment, overrides), Path(source))  # the parent resolved everything
    src = resolve_source(source, experiment, uri, out)
    overrides = source_overrides(src, overrides)
    state = load_weights_file(src.weights)
    v = prepared(validate(src.experiment, overrides), state, src.weights)
    console.note(f"evaluating {display_path(src.weights)}" + (f" of run {src.run_id}" if src.run_id else "")
                 + f" with {shlex.join([display_path(src.experiment), *overrides])}")
    if v.target.world == 1:
        return run_eval_worker(v, src.weights, state)

    return run_torchrun(torchrun_args(v.config.trainer, v.processes, str(src.experiment), overrides, [],
                                      command=("evaluate", str(src.weights.resolve()))), v.processes)


def prepared(v, state: dict[str, Any], weights: Path):
    """The experiment with its data made and checked (the eval splits alone), and refused for a label map other
    than the weights' or no eval pipeline."""
    if v.config.data.loader == "dali" and v.config.pipelines.eval is None:
        raise ConfigError("the experiment has no eval pipeline (pipelines.eval is not set): set one, e.g. "
                          "pipelines.eval.use=imagenet_eval, or data.loader=torchvision.", **v.loaded.at("pipelines"))
    run_notes(v.notes, v.graphs)
    label_notes(v.label_notes)
    ensure_data(v, train=False)
    v = checked_with_data(v)
    check_label_map(state, v.config.data, v.labels, weights, v.loaded.at("data.root"))
    return v


def run_eval_worker(v, weights: Path, state: dict[str, Any] | None = None) -> int:
    """One evaluating process: join the group, score each set of weights (the checkpoint `weights`, or its `state`
    already loaded) on each split, record on rank 0."""
    d = dist.setup(v.target.accelerator)
    torch_threads(d)
    try:
        v = checked_with_data(v, quiet=True)
        state = state or load_weights_file(weights)
        cfg, tc = v.config, v.config.trainer
        configure_torch(cfg, d)
        loaders = create_eval_loaders(v.loaders, d)
        criterion = torch.nn.CrossEntropyLoss(label_smoothing=tc.label_smoothing)  # the loss launch reports
        nets = {key: load_model(build_model(cfg, d), state[key], key, weights) for key in WEIGHTS
                if state.get(key) is not None}
        results = evaluate_nets(nets, loaders, criterion, d, autocast_args(tc.precision, d.device),
                                tc.channels_last, cfg.model.num_classes, tta=tc.eval_tta)
        for loader in loaders.values():
            loader.close()
        if d.main:
            finish_evaluation(v, d, state, weights, results)
        return 0
    finally:
        dist.teardown()


def load_model(model, weights: dict[str, Any], key: str, path: Path):
    """`model` with the checkpoint's `key` weights (an EMA may keep them under "state_dict" or "module")."""
    if key != "model" and isinstance(weights, dict):
        for inner in ("state_dict", "module"):
            if isinstance(weights.get(inner), dict):
                weights = weights[inner]
    try:
        model.load_state_dict(weights)
    except RuntimeError as e:
        first = str(e).strip().splitlines()
        raise ConfigError(f"the '{key}' weights in {display_path(path)} do not fit the experiment's model "
                          f"({first[1].strip() if len(first) > 1 else first[0]}); evaluate with the model.name and "
                          "model.num_classes the run trained.", where="model") from None
    return model


def evaluate_main_split(v, state: dict[str, Any], path: Path) -> dict[str, float]:
    """eval/top1, eval/top5, eval/loss and eval/samples of the checkpoint's model on `v`'s eval split, in this one
    process, logging nothing (runner reproduce --weights)."""

    d = Dist(accelerator=v.target.accelerator)
    loader = create_loader(v.loaders, "eval", d)
    if loader is None:
        raise ConfigError("the experiment has no eval pipeline to evaluate the checkpoint with; set pipelines.eval.",
                          **v.loaded.at("pipelines.eval"))
    model = load_model(build_model(v.config, d), state["model"], "model", path)
    tc = v.config.trainer
    try:
        return evaluate(model, loader, nn.CrossEntropyLoss(label_smoothing=tc.label_smoothing), d,
                        autocast_args(tc.precision, d.device), tc.channels_last)
    finally:
        loader.close()

