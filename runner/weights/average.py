"""`runner average`: the mean of a run's kept checkpoints, as timm's avg_checkpoints.py makes it, written as a
runner checkpoint, evaluated by `runner evaluate`'s machinery and logged as a new MLflow run linked to the source.

The checkpoints are the ones the run kept (checkpoint_log.CheckpointLog): the latest trainer.checkpoint_keep and the
best in its artifact store (checkpoints/index.json), else, for a run that logged none there, last.pt and best.pt in
its folder here. `--last K` takes the K latest of them, `--best K` the K best by an epoch metric each recorded.
Each floating tensor is averaged in float64 and cast back to its dtype; integer tensors (BatchNorm's
num_batches_tracked) are the newest checkpoint's. The EMA weights (trainer.ema) are averaged when the checkpoints
hold them, as timm does unless --no-use-ema; --no-ema takes the trained ones.
"""
from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import torch

from runner import console
from runner.errors import DataError, RunnerError, counted, did_you_mean, display_path, list_names
from runner.weights import checkpoint
from runner.weights.kept import BEST, INDEX, step_name
from runner.weights.store import cache_dir, download, read_index, run_checkpoint

AVERAGES_TAG = "runner.averages"   # the id of the run whose checkpoints were averaged
DEFAULT_METRIC = "eval/top1"
# where the averaged run is logged: beside the source, so these stay the source's
FIXED_TRACKING = ("tracking.uri", "tracking.experiment", "tracking.enabled")


@dataclass(frozen=True)
class Rule:
    """Which kept checkpoints are averaged: the `count` latest, or the `count` best by `metric` (max or min)."""
    kind: Literal["last", "best"]
    count: int
    metric: str | None = None
    mode: Literal["max", "min"] | None = None

    @property
    def option(self) -> str:
        return f"--{self.kind} {self.count}"

    def __str__(self) -> str:
        what = f"the {self.kind} {self.count} kept checkpoint{'s' if self.count > 1 else ''}"
        return what + (f" by {self.metric} ({self.mode})" if self.kind == "best" else "")


@dataclass(frozen=True)
class Kept:
    """One checkpoint the run kept: its name (in the store, or its file here), the file, and what it recorded."""
    name: str
    path: Path
    step: int
    epoch: int
    metrics: dict[str, float]
    has_ema: bool
    config: dict[str, Any] = field(repr=False)


# ---- which checkpoints ------------------------------------------------------------------------------------

def kept_checkpoints(record, store: str) -> tuple[list[Kept], Path | None]:
    """The checkpoints the run kept, oldest first: from its artifact store (fetched into the cache), else from its
    folder here (returned as the second value, None for the store)."""
    index = read_index(store, record.run_id)
    if index is not None:
        names = index["recent"] + ([index["best"]] if index.get("best") not in (None, *index["recent"]) else [])
        files = {name: fetch_kept(store, record.run_id, index, name) for name in names}
        folder = None
    else:
        files, folder = local_files(record, store)
    kept = [read_kept(name, path, record.run_id) for name, path in files.items()]
    return sorted({k.step: k for k in kept}.values(), key=lambda k: k.step), folder


def fetch_kept(store: str, run_id: str, index: dict[str, Any], name: str) -> Path:
    """One stored checkpoint as a file in runner's cache (downloaded once, as fetch_run_weights does)."""
    target = cache_dir() / run_id / Path(name).name
    if target.is_file() and target.stat().st_size == index.get("sizes", {}).get(name, -1):
        return target
    return download(store, run_id, name, target)


def local_files(record, store: str) -> tuple[dict[str, Path], Path]:
    """last.pt and best.pt of a run that logged no checkpoint to its store, in its folder here."""
    last = run_checkpoint(record, store)  # raises, naming where it looked, when there is none
    index_file = last.parent / INDEX
    index = json.loads(index_file.read_text()) if index_file.is_file() else {}
    files = [last] + ([last.parent / BEST] if index.get("best") not in (None, index.get("last")) else [])
    return {display_path(f): f for f in files if f.is_file()}, last.parent


def read_kept(name: str, path: Path, run_id: str) -> Kept:
    state = checkpoint.load(path)
    if state.get("run_id") != run_id:
        raise DataError(f"{name} ({display_path(path)}) is a checkpoint of run {state.get('run_id')}, not of run "
                        f"{run_id}: checkpoints of different runs are never averaged.", where="RUN_ID")
    return Kept(name=name, path=path, step=int(state.get("step", 0)), epoch=int(state.get("epoch", 0)),
                metrics=dict(state.get("metrics") or {}), has_ema=state.get("ema") is not None,
                config=state.get("config") or {})


def with_defaults(rule: Rule, config: dict[str, Any]) -> Rule:
    """--best's metric: the run's trainer.checkpoint_best metric, else eval/top1; its mode: the run's for that
    metric, else min for a loss and max for the rest."""
    if rule.kind != "best":
        return rule
    best = (config.get("trainer") or {}).get("checkpoint_best") or {}
    metric = rule.metric or best.get("metric") or DEFAULT_METRIC
    mode = rule.mode or (best.get("mode", "max") if metric == best.get("metric") else
                         "min" if metric.endswith("loss") else "max")
    return replace(rule, metric=metric, mode=mode)


def choose(kept: list[Kept], rule: Rule, run_id: str, folder: Path | None) -> list[Kept]:
    """The checkpoints `rule` picks, oldest first; RunnerError when the run kept too few."""
    if len(kept) < rule.count:
        raise RunnerError(too_few(kept, rule, run_id, folder), where=f"--{rule.kind}")
    if rule.kind == "last":
        return kept[-rule.count:]
    scored = [k for k in kept if isinstance(k.metrics.get(rule.metric), float | int)
              and not math.isnan(k.metrics[rule.metric])]
    if len(scored) < rule.count:
        recorded = sorted({m for k in kept for m in k.metrics})
        few = f"only {len(scored)}" if scored else "none"
        short = f", fewer than the {rule.count} that {rule.option} averages" if scored else ""
        raise RunnerError(f"{few} of the {len(kept)} checkpoints run {run_id} kept ({epochs(kept)}) recorded "
                          f"{rule.metric}{short}; they recorded: {list_names(recorded) or 'no metric'}."
                          f"{did_you_mean(rule.metric, recorded)}", where="--metric")
    sign = -1 if rule.mode == "max" else 1
    best = sorted(scored, key=lambda k: (sign * k.metrics[rule.metric], -k.step))[:rule.count]  # ties: the newer
    return sorted(best, key=lambda k: k.step)


def too_few(kept: list[Kept], rule: Rule, run_id: str, folder: Path | None) -> str:
    text = (f"run {run_id} kept {counted(len(kept), 'checkpoint', 'checkpoints')} ({epochs(kept)}), fewer than the "
            f"{rule.count} that {rule.option} averages. ")
    if folder is None:
        return text + (f"A run keeps its latest trainer.checkpoint_keep checkpoints (1 unless set), and its best by "
                       f"trainer.checkpoint_best, in its artifact store: set trainer.checkpoint_keep: {rule.count} in "
                       "the experiment and train it again.")
    return text + (f"It logged no checkpoint to its artifact store (trainer.checkpoint_log: false), so only its "
                   f"last.pt and best.pt in {display_path(folder)}/ are left: set trainer.checkpoint_log: true and "
                   f"trainer.checkpoint_keep: {rule.count} in the experiment and train it again.")


def epochs(kept: list[Kept]) -> str:
    """'epoch 3' or 'epochs 1, 2, 3'."""
    return ("epoch " if len(kept) == 1 else "epochs ") + ", ".join(str(k.epoch) for k in kept)


def weights_key(chosen: list[Kept], ema: bool) -> str:
    """"ema" when asked and every chosen checkpoint holds EMA weights, "model" when none does (or --no-ema)."""
    with_ema = [k for k in chosen if k.has_ema]
    if not ema or not with_ema:
        if ema:
            console.note("the checkpoints hold no EMA weights (trainer.ema was off): averaging the trained ones.")
        return "model"
    if len(with_ema) < len(chosen):
        without = [k.name for k in chosen if not k.has_ema]
        raise DataError(f"{', '.join(without)} {'holds' if len(without) == 1 else 'hold'} no EMA weights, the other "
                        "checkpoints do: pass --no-ema to average the trained weights of all of them.", where="--no-ema")
    return "ema"


# ---- the average ------------------------------------------------------------------------------------------

def average_state_dicts(named: Iterable[tuple[str, Mapping[str, Any]]]) -> dict[str, Any]:
    """The mean of state dicts (each named, for errors), oldest first, as timm's avg_checkpoints.py computes it:
    each floating tensor summed in float64, divided by their number and cast back to its own dtype; integer and
    bool tensors (BatchNorm's num_batches_tracked) and non-tensors are the last (newest) state's. DataError when a
    state's keys, shapes or dtypes differ from the first's."""
    sums: dict[str, torch.Tensor] = {}
    first: tuple[str, Mapping[str, Any]] | None = None
    newest: Mapping[str, Any] = {}
    n = 0
    for name, state in named:
        if first is None:
            first = (name, state)
            sums = {k: t.to(torch.float64, copy=True) for k, t in state.items()
                    if isinstance(t, torch.Tensor) and t.is_floating_point()}
        else:
            check_fits(name, state, *first)
            for k, total in sums.items():
                total += state[k].to(torch.float64)
        newest, n = state, n + 1
    if first is None:
        raise ValueError("no state dict to average")
    return {k: (sums[k] / n).to(t.dtype) if k in sums else t.clone() if isinstance(t, torch.Tensor) else t
            for k, t in newest.items()}


def check_fits(name: str, state: Mapping[str, Any], first_name: str, first: Mapping[str, Any]) -> None:
    """Refuse to average weights of another model (or class count) into the first checkpoint's."""
    only_here, only_there = [k for k in state if k not in first], [k for k in first if k not in state]
    if only_here or only_there:
        parts = ([f"{len(only_here)} not in {first_name} ({list_names(only_here, 4)})"] if only_here else []) + \
                ([f"{len(only_there)} missing ({list_names(only_there, 4)})"] if only_there else [])
        raise DataError(f"{name} holds other weights than {first_name}: {', '.join(parts)}. Checkpoints of "
                        "different models are never averaged.")
    for k, t in state.items():
        f = first[k]
        tensors = isinstance(t, torch.Tensor), isinstance(f, torch.Tensor)
        if any(tensors) and not (all(tensors) and t.shape == f.shape and t.dtype == f.dtype):
            raise DataError(f"{name} does not fit {first_name}: {k} is {described(t)} there, {described(f)} in "
                            f"{first_name}. Checkpoints of different models are never averaged.")


def described(t) -> str:
    """'[3, 512] float32' (a tensor's shape and dtype), or the type of what is not a tensor."""
    if not isinstance(t, torch.Tensor):
        return f"a {type(t).__name__}"
    return f"{list(t.shape)} {str(t.dtype).removeprefix('torch.')}"


def write_average(run_id: str, chosen: list[Kept], rule: Rule, key: str, out: Path) -> tuple[Path, dict[str, Any]]:
    """OUT/<run id>/<kind>-<K>-<weights>/step-N.pt: a runner checkpoint of the averaged weights (as "model", no
    optimizer or reader state: it evaluates and initialises, it does not resume), with the newest checkpoint's
    step, epoch, experiment and label map, and which run's checkpoints it averages under "averaged". Its run_id
    is the source's until link_run names the run that holds it."""
    newest: dict[str, Any] = {}

    def states():
        nonlocal newest
        for k in chosen:  # one at a time: the sum is the only copy of the weights kept
            newest = checkpoint.load(k.path)
            yield k.name, newest[key]

    weights = average_state_dicts(states())
    newest_kept = chosen[-1]
    state = {"model": weights, "ema": None, "step": newest_kept.step, "epoch": newest_kept.epoch, "batch": 0,
             "run_id": run_id, "world": newest.get("world"), "config": newest["config"],
             "fixed_settings": {**(newest.get("fixed_settings") or {}), "trainer.ema": "off"},
             "label_map": newest.get("label_map"), "metrics": {},
             "averaged": {"run_id": run_id, "rule": rule.kind, "count": rule.count, "metric": rule.metric, "mode": rule.mode,
                          "weights": key, "checkpoints": [{"name": k.name, "step": k.step, "epoch": k.epoch,
                                                           "metrics": k.metrics} for k in chosen]}}
    folder = out / run_id / f"{rule.kind}-{rule.count}-{key}"
    return checkpoint.save(state, folder, Path(step_name(newest_kept.step)).name), state


# ---- the run ----------------------------------------------------------------------------------------------


