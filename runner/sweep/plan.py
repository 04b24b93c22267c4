"""A sweep's folder: each child frozen as the resolved experiment it trains, where its job writes its log, exit code and
checkpoints, and sweep.json, the plan `runner sweep --resume` reads back.

    sweeps/<experiment>-<parent run id>/
      sweep.json                    the plan: experiment, axes, launcher, parent run, children
      pipelines/NAME.yaml           the pipelines the children `use:`, pinned (found before the checkout's)
      job.sh                        the SLURM job script (slurm launcher)
      001/experiment.yaml           child 1 as it trains: the resolved experiment after its overrides
      001/log.txt                   everything the child printed, every attempt appended
      001/exit.json                 how its last attempt ended (written when it ends)
      001/checkpoints/              its checkpoints: a restarted child resumes from them
"""
from __future__ import annotations

import copy
import json
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from runner.config.frozen import as_logged, config_digest
from runner.config.load import LoadedExperiment, is_pipeline_path, load_experiment
from runner.errors import RunnerError

PLAN_FILE = "sweep.json"
EXIT_FILE = "exit.json"
FORMAT = 1


@dataclass(frozen=True)
class Resources:
    """What one child asks of the machine: nodes, GPUs per node, CPU cores per node (None: the launcher's default)."""
    nodes: int = 1
    gpus: int | None = None
    cpus: int | None = None


@dataclass(frozen=True)
class ChildPlan:
    index: int                      # 1-based, as in the grid
    label: str                      # its swept values: "seed=1 use=imagenet_train"
    values: list[str]               # the same, one per axis
    overrides: list[str]            # what it was validated with, after the experiment file
    digest: str = ""                # config_sha256 of the setting it trains ("" when it does not validate)
    error: str | None = None        # why it does not validate: it is never started
    resources: Resources = field(default_factory=Resources)

    @property
    def name(self) -> str:
        return f"{self.index:03d}"

    @property
    def shown(self) -> str:
        """' (seed=1 lr=0.1)' after the child's number; nothing for a sweep of one."""
        return f" ({self.label})" if self.label else ""


@dataclass(frozen=True)
class SweepPlan:
    folder: Path
    experiment: str                 # the experiment file as given
    axes: str                       # "seed=0,1 pipelines.train.use=a,b"
    plain: list[str]                # overrides every child shares
    workdir: str                    # where children run: the folder the sweep was started in
    parent_run_id: str | None
    uri: str | None                 # the tracking store every child logs to (None: tracking off)
    tracking_experiment: str
    launcher: dict[str, Any]        # the launcher section as resolved
    children: list[ChildPlan]
    submissions: list[dict[str, Any]] = field(default_factory=list)  # SLURM jobs: {"job": id, "children": [...]}
    driver: dict[str, Any] = field(default_factory=dict)  # the process that runs the children here: host, pid

    def child(self, index: int) -> ChildPlan:
        return self.children[index - 1]

    def child_dir(self, child: ChildPlan) -> Path:
        return self.folder / child.name

    def child_experiment(self, child: ChildPlan) -> Path:
        return self.child_dir(child) / "experiment.yaml"

    def log(self, child: ChildPlan) -> Path:
        return self.child_dir(child) / "log.txt"

    def exit_record(self, child: ChildPlan) -> dict[str, Any] | None:
        """How the child's last attempt ended, as its job or process wrote it; None while none has ended."""
        try:
            return json.loads((self.child_dir(child) / EXIT_FILE).read_text())
        except (OSError, ValueError):
            return None

    def save(self) -> None:
        data = asdict(self)
        data["folder"] = str(self.folder)
        write_json(self.folder / PLAN_FILE, {"format": FORMAT, **data})


def write_json(path: Path, data: dict[str, Any]) -> None:
    """Atomically: a reader never sees half a file."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=1, default=str) + "\n")
    os.replace(tmp, path)


def write_exit(folder: Path, code: int, **extra: Any) -> None:
    write_json(folder / EXIT_FILE, {"exit_code": code, "ended": time.strftime("%Y-%m-%dT%H:%M:%S%z"), **extra})


def load_plan(folder: Path) -> SweepPlan:
    try:
        data = json.loads((folder / PLAN_FILE).read_text())
    except (OSError, ValueError) as e:
        raise RunnerError(f"{folder / PLAN_FILE}: not a sweep plan runner can read ({e}); the sweep's folder holds "
                          "the children runner sweep froze.", where="--resume") from None
    data.pop("format", None)
    children = [ChildPlan(**{**c, "resources": Resources(**c["resources"])}) for c in data.pop("children")]
    return SweepPlan(**{**data, "folder": Path(data["folder"]), "children": children})


def sweep_folder(root: str, experiment: str, parent_run_id: str | None) -> Path:
    """sweeps/<experiment stem>-<parent run id, or the time>: a new folder for each sweep."""
    stem = Path(experiment).stem
    tail = parent_run_id[:12] if parent_run_id else time.strftime("%Y%m%d-%H%M%S")
    folder = Path(root).expanduser().resolve() / f"{stem}-{tail}"
    n = 1
    while folder.exists():
        n += 1
        folder = folder.with_name(f"{stem}-{tail}-{n}")
    return folder


def freeze_child(plan: SweepPlan, child: ChildPlan, loaded: LoadedExperiment, *, run_name: str | None) -> None:
    """child's experiment.yaml: the resolved experiment it was validated as, placed in the sweep (its parent run,
    store, run name and checkpoint folder), with the pipelines it `use:`s pinned beside it."""
    config = copy.deepcopy(as_logged(loaded.resolved))
    folder = plan.child_dir(child)
    tracking = config.setdefault("tracking", {})
    if plan.uri is not None:
        tracking["uri"] = plan.uri
    if run_name is not None:
        tracking["run_name"] = run_name
    tags = tracking.get("tags") or {}
    if plan.parent_run_id is not None:
        tags["mlflow.parentRunId"] = plan.parent_run_id
    tags["runner.sweep.child"] = str(child.index)
    tracking["tags"] = tags
    config.setdefault("trainer", {})["checkpoint_dir"] = str(folder / "checkpoints")
    folder.mkdir(parents=True, exist_ok=True)
    for role, source in loaded.pipelines.items():
        use = (config.get("pipelines", {}).get(role) or {}).get("use")
        if not use or source.name == "inline":
            continue
        if is_pipeline_path(use):
            if Path(use).is_absolute():
                continue  # read from there: pinning it would change `use`
            target = folder / use
        else:
            target = plan.folder / "pipelines" / f"{use}.yaml"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(source.file.read_text())
    header = (f"# Child {child.index} of {len(plan.children)} of runner sweep {plan.experiment} {plan.axes}"
              f"{' ' + ' '.join(plan.plain) if plan.plain else ''}: {child.label}.\n"
              "# The resolved experiment it trains, frozen when the sweep started; its pipelines are pinned in "
              "../pipelines/.\n")
    path = plan.child_experiment(child)
    path.write_text(header + yaml.safe_dump(config, sort_keys=False, default_flow_style=False, width=120,
                                            allow_unicode=True))
    check_frozen(path, child)


def check_frozen(path: Path, child: ChildPlan) -> None:
    """The frozen file loads back as the setting that was validated (the same config digest)."""
    loaded = load_experiment(path)
    if config_digest(loaded.resolved) != child.digest:
        raise RunnerError(f"{path}: the frozen child {child.index} does not load back as the experiment it was "
                          "validated as (its config digest differs); this is a runner bug, please report it.")
