"""model.init: the weights a model starts from (fine-tuning), resolved, checked and loaded.

A source is a file (a runner checkpoint, a torchvision/timm state dict as .pt/.pth, or .safetensors), a run id
whose logged checkpoint is fetched from the store (the local checkpoint folder when the store lacks it), the
newest finished run of an experiment (latest:NAME), or torchvision's weights file from torch.hub's cache.
Nothing is downloaded from the internet. plan_init reads the file and matches its keys against the model
(built on the meta device) before any work starts, so a mismatch under strict is an error with exit code 2;
apply_init loads the planned tensors into each rank's model before DDP wraps it.
"""
from __future__ import annotations

import dataclasses
import hashlib
import logging
import pickle
import re
from dataclasses import dataclass
from fnmatch import fnmatch
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from runner.config.sections import ModelConfig, ModelInitConfig
from runner.errors import ConfigError, DataError, RunnerError, display_path, list_names
from runner.models.zoo import classifier_keys as classifier_modules
from runner.models.zoo import create_model
from runner.tracking import resolve_tracking_uri
from runner.tracking.store import store_uri
from runner.weights import checkpoint
from runner.weights.kept import BEST
from runner.weights.store import fetch_run_weights, latest_finished_run

# torch, torchvision and safetensors are imported where weights are read, for start-up: `runner validate`
# plans model.init without them.

log = logging.getLogger("runner.weights.init")

RUN_ID = re.compile(r"[0-9a-f]{32}")
PREFIXES = ("module.", "_orig_mod.")  # saved from inside DDP or torch.compile
FORMS = ("a checkpoint or weights file (.pt, .pth, .safetensors), a run id (or run:ID), latest:EXPERIMENT, "
         "or torchvision[:WEIGHTS]")


@dataclass(frozen=True)
class InitPlan:
    """What model.init loads: the file, its digest, and which keys load, and which stay fresh (and why)."""
    source: str                                   # as written
    file: Path
    sha256: str
    run_id: str | None = None                     # the run whose checkpoint it is, for a run source
    loaded: tuple[str, ...] = ()
    skipped: tuple[str, ...] = ()                 # by model.init.skip or new_head
    missing: tuple[str, ...] = ()                 # in the model, not in the file
    unexpected: tuple[str, ...] = ()              # in the file, not in the model
    mismatched: tuple[tuple[str, tuple, tuple], ...] = ()  # (key, shape in the file, shape in the model)
    label_map: dict[str, int] | None = None       # a runner checkpoint's
    total: int = 0                                # tensors in the model's state dict
    head_loaded: bool = False                     # the classifier's weights come from the file

    @property
    def params(self) -> dict[str, str]:
        """Logged with the run's params."""
        out = {"model.init.file": str(self.file), "model.init.sha256": self.sha256,
               "model.init.loaded": f"{len(self.loaded)} of {self.total} tensors"}
        if self.run_id:
            out["model.init.run_id"] = self.run_id
        return out


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def classifier_keys(model) -> list[str]:
    """State-dict keys of the model's classifier (runner.models.zoo.classifier_keys names its modules)."""
    modules = dict(model.named_modules())
    return [f"{n}.{p}" for n in classifier_modules(model) for p, _ in modules[n].named_parameters(recurse=False)]


@dataclass(frozen=True)
class WeightsPlace:
    """Where model.init's run ids are looked up: the run's store (tracking.uri unless model.init.uri names another),
    this machine's trainer.checkpoint_dir, and where model.init.source is written (`at`, for errors)."""
    tracking_uri: str | None
    checkpoint_dir: str
    at: dict[str, Any]


# ---- where the weights are --------------------------------------------------------------------------------

def resolve_source(model: ModelConfig, place: WeightsPlace) -> tuple[Path, str | None]:
    """model.init.source -> (a local file, the run id when it is a run's checkpoint)."""
    init, at = model.init, place.at
    source = init.source.strip()
    path = Path(source).expanduser()
    if path.is_file():
        return path, None
    kind, _, rest = source.partition(":")
    if kind == "torchvision":
        return torchvision_file(model.name, rest or "DEFAULT", at), None
    if kind in ("run", "latest") and rest:
        return run_file(init, place, rest if kind == "run" else None, experiment=rest if kind == "latest" else None)
    if RUN_ID.fullmatch(source):
        return run_file(init, place, source)
    if path.is_dir():
        raise ConfigError(f"{source} is a folder; name the weights file in it (e.g. {source}/last.pt).", **at)
    raise ConfigError(f"no file {display_path(path)}: model.init.source is {FORMS}. runner downloads nothing at run "
                      "time: put the file there, e.g. torchvision's weights, which torch.hub keeps in "
                      f"{hub_checkpoints()}/ (torchvision names the file for model.name).", **at)


def hub_checkpoints() -> str:
    import torch

    return str(Path(torch.hub.get_dir()) / "checkpoints")


def torchvision_file(model_name: str, weights: str, at: dict[str, Any]) -> Path:
    """torchvision's weights file for a model in torch.hub's cache (where torchvision's own download puts it)."""
    import torchvision

    try:
        enum = torchvision.models.get_model_weights(model_name)
    except (ValueError, KeyError):
        raise ConfigError(f"torchvision has no weights for '{model_name}' (model.name); name a weights file "
                          "instead.", **at) from None
    names = [w.name for w in enum]
    if weights != "DEFAULT" and weights not in names:
        raise ConfigError(f"torchvision's {model_name} has no weights '{weights}'; it has: {', '.join(names)} "
                          "(or DEFAULT).", **at)
    chosen = enum.DEFAULT if weights == "DEFAULT" else enum[weights]
    file = Path(hub_checkpoints()) / Path(urlparse(chosen.url).path).name
    if not file.is_file():
        raise DataError(f"torchvision's {chosen.name} weights of {model_name} are not here, and runner downloads "
                        f"nothing at run time: put {file.name} (from {chosen.url}) in {file.parent}/, torch.hub's "
                        f"cache, or name the file's path in model.init.source.", **at)
    return file


def run_file(init: ModelInitConfig, place: WeightsPlace, run_id: str | None,
             experiment: str | None = None) -> tuple[Path, str]:
    """A run's logged checkpoint (fetched into the cache), else the one in this machine's checkpoint folder."""
    at = place.at
    uri = store_uri(init.uri) if init.uri else resolve_tracking_uri(place.tracking_uri)
    try:
        if experiment is not None:
            run_id = latest_finished_run(uri, experiment)
        return fetch_run_weights(run_id, uri, which=init.checkpoint), run_id
    except RunnerError as e:
        local = local_checkpoint(place.checkpoint_dir, run_id, init.checkpoint) if run_id else None
        if local is not None:
            log.info("run %s: %s; using %s", run_id, e.message, local)
            return local, run_id
        raise type(e)(f"{e.message} Nor does {place.checkpoint_dir}/ hold a checkpoint of "
                      f"run {run_id or experiment}.", **at) from None


def local_checkpoint(checkpoint_dir: str, run_id: str, which: str) -> Path | None:
    names = [BEST, checkpoint.LAST] if which == "best" else [checkpoint.LAST]
    for name in names:
        found = sorted(Path(checkpoint_dir).glob(f"*/{run_id}*/{name}"))
        if len(found) == 1:
            return found[0]
    return None


# ---- what they hold ---------------------------------------------------------------------------------------

def read_state_dict(path: Path, at: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """The tensors of a weights file, and the runner checkpoint around them (None for a plain state dict)."""
    import torch

    try:
        if path.suffix == ".safetensors":
            from safetensors.torch import load_file

            obj = load_file(str(path))
        else:
            obj = _torch_load(path)
    except Exception as e:  # a damaged or foreign file
        raise DataError(f"{display_path(path)} cannot be read as weights ({type(e).__name__}: "
                        f"{str(e).strip().splitlines()[0][:200] if str(e).strip() else ''}).", **at) from None
    meta = obj if isinstance(obj, dict) and isinstance(obj.get("model"), dict) and "fixed_settings" in obj else None
    state = meta["model"] if meta else obj.get("state_dict", obj) if isinstance(obj, dict) else obj
    if not isinstance(state, dict) or not state or not all(isinstance(t, torch.Tensor) for t in state.values()):
        raise DataError(f"{display_path(path)} holds no state dict (a mapping of parameter names to tensors); "
                        "save one with torch.save(model.state_dict(), FILE).", **at)
    for prefix in PREFIXES:
        if all(k.startswith(prefix) for k in state):
            state = {k[len(prefix):]: t for k, t in state.items()}
    return state, meta


def _torch_load(path: Path) -> Any:
    """torch.load, memory-mapped where the file's format allows (a 100 MB file is read once, not copied)."""
    import torch

    for weights_only in (True, False):  # tensors only, unless a runner checkpoint's RNG and reader states need more
        for mmap in (True, False):  # files of torch's legacy format cannot be mapped
            try:
                return torch.load(path, map_location="cpu", weights_only=weights_only, mmap=mmap)
            except pickle.UnpicklingError:
                if not weights_only:
                    raise
                break
            except RuntimeError as e:
                if not (mmap and "mmap" in str(e)):
                    raise
    raise AssertionError("unreachable")


def plan_init(cfg: ModelConfig, place: WeightsPlace) -> InitPlan:
    """Resolve model.init, read the file and match it against the model; ConfigError under strict when any key
    does not load. Runs before any work starts."""
    import torch  # start-up: this module is imported to check an experiment, which needs no torch

    init, at = cfg.init, place.at
    file, run_id = resolve_source(cfg, place)
    state, meta = read_state_dict(file, at)
    with torch.device("meta"):
        model = create_model(cfg)
    target = model.state_dict()
    head = set(classifier_keys(model)) if init.new_head else set()
    skip = lambda k: k in head or any(fnmatch(k, p) for p in init.skip)  # noqa: E731
    skipped = tuple(k for k in target if skip(k))
    mismatched = tuple((k, tuple(t.shape), tuple(target[k].shape)) for k, t in state.items()
                       if k in target and not skip(k) and t.shape != target[k].shape)
    plan = InitPlan(source=init.source, file=file, sha256=sha256_file(file), run_id=run_id,
                    loaded=tuple(k for k, t in state.items() if k in target and not skip(k)
                                 and t.shape == target[k].shape),
                    skipped=skipped, missing=tuple(k for k in target if k not in state and not skip(k)),
                    unexpected=tuple(k for k in state if k not in target and not skip(k)), mismatched=mismatched,
                    label_map=meta.get("label_map") if meta else None, total=len(target))
    plan = dataclasses.replace(plan, head_loaded=bool(set(classifier_keys(model)) & set(plan.loaded)))
    if not plan.loaded:  # not a partial fit: weights of another architecture
        raise ConfigError(f"no tensor of {display_path(file)} fits {cfg.name}: {differences(plan)}. Are "
                          "they weights of another model? model.name must be the architecture they were saved from.",
                          **at)
    if init.strict and (plan.missing or plan.unexpected or plan.mismatched):
        raise ConfigError(f"{display_path(file)} does not fit {cfg.name} with "
                          f"{cfg.num_classes} classes: {differences(plan)}. Under model.init.strict: true "
                          "every key must load; set model.init.new_head=true for a fresh classifier "
                          f"({', '.join(classifier_keys(model))}), leave keys fresh with model.init.skip patterns, or "
                          "set model.init.strict=false to load what fits.", **at)
    return plan


def differences(plan: InitPlan) -> str:
    """'2 keys differ in shape (fc.weight: [10, 512] in the file, [5, 512] in the model; ...), 0 missing, ...'"""
    shapes = "; ".join(f"{k}: {list(a)} in the file, {list(b)} in the model" for k, a, b in plan.mismatched[:6])
    more = f"; ... ({len(plan.mismatched)} in all)" if len(plan.mismatched) > 6 else ""
    parts = [f"{len(plan.mismatched)} differ in shape" + (f" ({shapes}{more})" if shapes else ""),
             f"{len(plan.missing)} missing from the file" + (f" ({list_names(plan.missing, 6)})" if plan.missing else ""),
             f"{len(plan.unexpected)} not in the model"
             + (f" ({list_names(plan.unexpected, 6)})" if plan.unexpected else "")]
    return ", ".join(parts)


def init_note(plan: InitPlan, model_name: str) -> str:
    """What was loaded, said once (with what was not, under strict: false)."""
    text = f"model.init: {model_name} starts from {display_path(plan.file)}"
    if plan.run_id:
        text += f" (run {plan.run_id})"
    text += f": {len(plan.loaded)} of {plan.total} tensors loaded"
    if plan.skipped:
        text += f", {len(plan.skipped)} left fresh by skip/new_head ({list_names(plan.skipped, 6)})"
    if plan.missing or plan.unexpected or plan.mismatched:
        text += f"; not loaded (model.init.strict: false): {differences(plan)}"
    return text + "."


def label_note(plan: InitPlan, labels) -> str | None:
    """A runner checkpoint's classifier that is loaded while the train split maps its classes otherwise."""
    if plan.label_map is None or labels is None or plan.label_map == labels.index or not plan.head_loaded:
        return None
    return ("model.init: the checkpoint's label_map differs from this train split's class folders, and its "
            "classifier is loaded: its outputs meant other classes. Set model.init.new_head=true to start the "
            "classifier fresh.")


def apply_init(model, plan: InitPlan) -> None:
    """Copy the planned tensors into `model` (any device, any dtype the model has)."""
    state, _ = read_state_dict(plan.file, {})
    model.load_state_dict({k: state[k] for k in plan.loaded}, strict=False)
