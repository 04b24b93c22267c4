"""Starting a sweep (validate every child, open the parent run, freeze the children, run them) and resuming one
(run again the children that did not finish)."""
from __future__ import annotations

import dataclasses
import os
import socket
from dataclasses import dataclass, field
from pathlib import Path

from runner import console
from runner.config.frozen import config_digest
from runner.config.load import load_experiment
from runner.config.sections import LauncherConfig, SlurmConfig
from runner.errors import ConfigError, RunnerError, error_at
from runner.repro.report import show
from runner.run.data import ensure_data
from runner.sweep.drive import Runs, announce, follow_slurm, launcher_slots, run_local
from runner.sweep.grid import NOTHING_TO_SWEEP, Axis, Child, check_grid, run_name, short_keys_unique
from runner.sweep.landing import DIR_TAG, GROUP_BY_TAG, INVALID_TAG, land_quietly, read_landed
from runner.sweep.plan import ChildPlan, Resources, SweepPlan, freeze_child, load_plan, sweep_folder
from runner.sweep.slurm import cancel_command, check_sbatch, check_slurm_config, child_resources, submit
from runner.sweep.slurm import live as slurm_live
from runner.sweep.status import FAILED, INVALID, NOT_STARTED, STOPPED, ChildStatus, counts_line, sweep_status
from runner.sweep.table import SweepView
from runner.tracking.parent import create_sweep_run, set_run_tags
from runner.tracking.store import get_run, store_uri
from runner.tracking.uri import logged_to

SEED_KEYS = ("seed",)
BASE_SECTIONS = ("launcher.", "launcher=", "trainer.", "trainer=")


@dataclass
class CheckedSweep:
    experiment: str
    axes: list[Axis]
    plain: list[str]
    children: list[Child]
    checked: dict[int, object]                       # child index -> Validated
    errors: dict[int, RunnerError] = field(default_factory=dict)
    launcher: LauncherConfig = field(default_factory=LauncherConfig)
    locate: object = None

    @property
    def first(self):
        return next(iter(self.checked.values()))


def check_children(experiment: str, plain: list[str], axes: list[Axis], children: list[Child]) -> CheckedSweep:
    """Every child validated for the machine it will run on: this one, or (SLURM) a node with the GPUs it asks for."""
    # the launcher and trainer sections, the same for every child; the rest is each child's to check
    base = load_experiment(experiment, [o for o in plain if o.lstrip("~+").startswith(BASE_SECTIONS)])
    launcher = base.config.launcher
    if not axes and launcher.name == "local":
        raise ConfigError(NOTHING_TO_SWEEP, file="command line")
    if launcher.name == "slurm":
        check_slurm_config(launcher.slurm, base.at)
    if base.config.trainer.nnodes > 1 and launcher.name == "local":
        raise RunnerError(f"trainer.nnodes is {base.config.trainer.nnodes}: a child on several machines needs "
                          "--launcher slurm (or torchrun's rendezvous by hand: runner launch on each node).",
                          **base.at("trainer.nnodes"))
    target = _target(launcher, base.config.trainer)
    results = check_grid(experiment, _for_validation(plain, base, launcher), axes, children, **target)
    sweep = CheckedSweep(experiment=experiment, axes=axes, plain=plain, children=children, checked={},
                         launcher=launcher, locate=base.at)
    for child, result in zip(children, results):
        if isinstance(result, RunnerError):
            sweep.errors[child.index] = result
        else:
            sweep.checked[child.index] = result
    return sweep


def _target(launcher: LauncherConfig, trainer) -> dict:
    """validate()'s accelerator and processes per node for the machine a child runs on (None: this one, as is)."""
    if launcher.name == "slurm":
        gpus = child_resources(launcher, trainer).gpus
        devices = trainer.devices if isinstance(trainer.devices, int) else None
        return {"accelerator": "gpu" if gpus else "cpu", "processes": devices or gpus or 1}
    if launcher.gpus_per_run is not None:
        k = launcher.gpus_per_run
        devices = trainer.devices if isinstance(trainer.devices, int) else None
        if k and devices and devices > k:
            raise RunnerError(f"trainer.devices is {devices} but each child gets {k} GPU(s) (launcher.gpus_per_run); "
                              f"give each child {devices} GPUs, or set trainer.devices=auto.",
                              where="launcher.gpus_per_run")
        return {"accelerator": "gpu" if k else "cpu", "processes": devices or k or 1}
    return {}


def _for_validation(plain: list[str], base, launcher: LauncherConfig) -> list[str]:
    """A child of several nodes meets the others at an address its job sets; validation needs one to check it."""
    t = base.config.trainer
    if launcher.name == "slurm" and t.nnodes > 1 and not t.rdzv_endpoint:
        return [*plain, "trainer.rdzv_endpoint=node0:29500"]
    return plain


def start_sweep(sweep: CheckedSweep, *, detach: bool = False) -> int:
    first = sweep.first
    ensure_data(first)  # the generated data set, made once, before children start reading it
    cfg = first.config
    uri = logged_to(first.config.tracking, first.loaded.at("tracking.uri"))
    axes = " ".join(a.item.partition("=")[0] + "=" + ",".join(a.values) for a in sweep.axes)
    parent_id = None
    group_by = [a.key for a in sweep.axes if a.key not in SEED_KEYS]
    if uri is not None:
        parent_id = create_sweep_run(
            uri, cfg.tracking.experiment, run_name=f"sweep {Path(sweep.experiment).stem}",
            tags={"runner.sweep": "parent", "runner.experiment_file": sweep.experiment,
                  "runner.overrides": " ".join([axes, *sweep.plain]), GROUP_BY_TAG: ",".join(group_by),
                  INVALID_TAG: ",".join(map(str, sweep.errors))},
            params={"sweep.experiment": sweep.experiment, "sweep.axes": axes, "sweep.overrides": " ".join(sweep.plain),
                    "sweep.runs": len(sweep.children), "sweep.launcher": sweep.launcher.name})
    folder = sweep_folder(sweep.launcher.dir, sweep.experiment, parent_id)
    plan = SweepPlan(folder=folder, experiment=sweep.experiment, axes=axes, plain=sweep.plain,
                     workdir=str(Path.cwd().resolve()), parent_run_id=parent_id, uri=uri,
                     tracking_experiment=cfg.tracking.experiment, launcher=dataclasses.asdict(sweep.launcher),
                     children=_child_plans(sweep))
    folder.mkdir(parents=True)
    _freeze(plan, sweep)
    plan.save()
    if parent_id is not None:
        set_run_tags(uri, parent_id, {DIR_TAG: str(folder)})
        console.note(f"parent run {parent_id} in experiment '{cfg.tracking.experiment}' at {uri}")
    else:
        console.note("tracking is off (tracking.enabled: false): the runs are not grouped under a parent run.")
    todo = [c for c in plan.children if c.error is None]
    return run_children(plan, sweep.launcher, todo, detach=detach)


def _child_plans(sweep: CheckedSweep) -> list[ChildPlan]:
    short = short_keys_unique(sweep.axes)
    out = []
    for child in sweep.children:
        v = sweep.checked.get(child.index)
        error = sweep.errors.get(child.index)
        out.append(ChildPlan(index=child.index, label=child.label(short), values=[val for _, val in child.values],
                             overrides=[*sweep.plain, *child.overrides],
                             digest=config_digest(v.loaded.resolved) if v is not None else "",
                             error=str(error) if error is not None else None,
                             resources=child_resources(sweep.launcher, v.config.trainer) if v is not None
                             else Resources()))
    return out


def _freeze(plan: SweepPlan, sweep: CheckedSweep) -> None:
    short = short_keys_unique(sweep.axes)
    named = any(o.split("=", 1)[0].strip() == "tracking.run_name" for o in plan.plain) or any(
        a.key == "tracking.run_name" for a in sweep.axes)
    for child, grid_child in zip(plan.children, sweep.children):
        folder = plan.child_dir(child)
        folder.mkdir(parents=True, exist_ok=True)
        if child.error is not None:  # never started: its log says why, as its job would have
            plan.log(child).write_text(f"error: {child.error}\n")
            continue
        name = None if named else run_name(grid_child, short) or None
        freeze_child(plan, child, sweep.checked[child.index].loaded, run_name=name)


def run_children(plan: SweepPlan, launcher: LauncherConfig, todo: list[ChildPlan], *, detach: bool) -> int:
    """Run (or submit and follow) `todo`; land the result on the parent run; print the table, each failure and the
    grouped comparison. Returns the sweep's exit code."""
    runs = Runs(plan.uri, plan.parent_run_id)
    keys = [a.partition("=")[0] for a in plan.axes.split(" ")] if plan.axes else []
    short = [k.rsplit(".", 1)[-1] for k in keys]
    view = SweepView(f"sweep {Path(plan.experiment).name}: {plan.folder}",
                     short if len(set(short)) == len(short) else keys)
    on_end = (lambda: land_quietly(plan.uri, plan.parent_run_id)) if plan.parent_run_id else (lambda: None)
    stopped, detached = None, False
    with view:
        if launcher.name == "local":
            slots = launcher_slots(launcher, lambda key: error_at(key, file=plan.experiment))
            announce(plan, launcher, slots)
            _record_driver(plan)
            statuses, stopped = run_local(plan, slots, todo, view, runs, on_end)
        else:
            check_sbatch()
            if todo:
                plan.submissions.extend(submit(plan, launcher, todo))
                plan.save()
                for s in plan.submissions[-len({c.resources for c in todo}):]:
                    console.note(f"submitted children {', '.join(map(str, s['children']))} as SLURM job {s['job']}: "
                                 f"{s['command']}")
            announce(plan, launcher, None)
            if detach:
                console.out.print(_detached(plan, cancel_command(plan)))
                return 0
            statuses, detached = follow_slurm(plan, view, runs, on_end)
        view.close(statuses)
    if detached:
        console.out.print(_detached(plan, cancel_command(plan)))
        return 0
    if plan.parent_run_id:
        land_quietly(plan.uri, plan.parent_run_id, status="KILLED" if stopped else None)
    _report_failures(plan, statuses)
    _summary(plan)
    return _exit_code(statuses, stopped, plan)


def _record_driver(plan: SweepPlan) -> None:
    plan.driver.clear()
    plan.driver.update({"host": socket.gethostname(), "pid": os.getpid()})
    plan.save()


def _detached(plan: SweepPlan, cancel: str) -> str:
    follow = f"runner sweep --resume {plan.parent_run_id}" if plan.parent_run_id else "squeue"
    results = f"; results as they land: runner compare {plan.parent_run_id} --uri {plan.uri}" \
        if plan.parent_run_id else ""
    return (f"the children run in SLURM without this command: follow them with {follow}{results}; stop them with "
            f"{cancel}")


def _report_failures(plan: SweepPlan, statuses: list[ChildStatus]) -> None:
    for s in statuses:
        if s.state in (FAILED, INVALID):
            what = "does not validate" if s.state == INVALID else "failed"
            reason = (_last_error(plan, s.child) or s.reason).rstrip(".")
            console.error(f"sweep child {s.child.index}{s.child.shown} {what}: {reason}. Its log: {plan.log(s.child)}")


def _last_error(plan: SweepPlan, child: ChildPlan) -> str | None:
    """The child's one-paragraph error, the last its log holds."""
    try:
        lines = plan.log(child).read_text(errors="replace").splitlines()
    except OSError:
        return None
    found = [line for line in lines if line.startswith("error: ")]
    return found[-1].removeprefix("error: ") if found else None


def _summary(plan: SweepPlan) -> None:
    """compare's grouped table of the children, grouped by the swept keys other than the seed."""
    if not plan.parent_run_id:
        return
    try:
        landed = read_landed(plan.uri, get_run(plan.uri, plan.parent_run_id))
    except RunnerError:
        return
    if any(r.status == "FINISHED" for r in landed.runs.values()):
        show(list(landed.runs.values()), None, group_by=landed.group_by, notes=[landed.counts])
        console.out.print(f"chart and table: runner compare {plan.parent_run_id} --uri {plan.uri}")


def _exit_code(statuses: list[ChildStatus], stopped: int | None, plan: SweepPlan) -> int:
    if stopped is not None:
        console.error(f"sweep stopped ({counts_line(s.state for s in statuses)}); the stopped children saved a "
                      f"checkpoint: runner sweep --resume {plan.parent_run_id or plan.folder}")
        return 128 + stopped
    failed = [s for s in statuses if s.state in (FAILED, INVALID, STOPPED, NOT_STARTED)]
    if not failed:
        return 0
    return 2 if all(s.config_failure for s in failed) else 1


# ---- resume ---------------------------------------------------------------------------------------------------------

def resume_sweep(parent: str, *, uri: str | None, flags: list[str], retry_failed: bool, detach: bool) -> int:
    store = store_uri(uri)
    record = get_run(store, parent)
    folder = record.tags.get(DIR_TAG)
    if record.tags.get("runner.sweep") != "parent" or not folder:
        raise RunnerError(f"run {record.run_id} is not the parent run of a runner sweep (it has no {DIR_TAG} tag).",
                          where="--resume")
    plan = load_plan(Path(folder))
    launcher = _launcher(plan, flags)
    _check_not_running(plan, launcher)
    runs = read_landed(store, record).runs
    live = {}
    if launcher.name == "slurm" and plan.submissions:
        check_sbatch()
        live = slurm_live(plan)

    statuses = sweep_status(plan, live, runs)
    todo = [s.child for s in statuses if _again(s, retry_failed)]
    for s in statuses:
        if s.state in (FAILED, INVALID) and s.config_failure and not retry_failed:
            console.note(f"child {s.child.index}{s.child.shown} stays failed ({s.reason}); --retry-failed runs "
                         "it again.")
    _note_edited(plan, todo)
    console.note(f"resuming sweep {record.run_id}: {counts_line(s.state for s in statuses)}; running again: "
                 f"{', '.join(str(c.index) for c in todo) or 'none'}")
    set_run_tags(store, record.run_id, {}, status="RUNNING")
    return run_children(plan, launcher, todo, detach=detach)


def _again(s: ChildStatus, retry_failed: bool) -> bool:
    if s.state in (NOT_STARTED, STOPPED):
        return True
    if s.state == FAILED:
        return retry_failed or not s.config_failure
    return False


def _launcher(plan: SweepPlan, flags: list[str]) -> LauncherConfig:
    data = dict(plan.launcher)
    launcher = LauncherConfig(**{**data, "slurm": SlurmConfig(**data["slurm"])})
    changes = {}
    for flag in flags:
        key, _, value = flag.partition("=")
        leaf = key.split(".")[-1]
        changes[leaf] = value if leaf == "name" else int(value)
    return dataclasses.replace(launcher, **changes)


def _check_not_running(plan: SweepPlan, launcher: LauncherConfig) -> None:
    """A local sweep whose process still runs here would start its children twice."""
    driver = plan.driver
    if launcher.name != "local" or driver.get("host") != socket.gethostname() or not driver.get("pid"):
        return
    try:
        cmdline = Path(f"/proc/{driver['pid']}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return
    if any(part.endswith(b"runner") or part == b"sweep" for part in cmdline) and driver["pid"] != os.getpid():
        raise RunnerError(f"the sweep is still running in process {driver['pid']} on this machine; stop it (Ctrl-C, "
                          f"or kill -TERM {driver['pid']}) before resuming it.", where="--resume")


def _note_edited(plan: SweepPlan, todo: list[ChildPlan]) -> None:
    for child in todo:
        try:
            digest = config_digest(load_experiment(plan.child_experiment(child)).resolved)
        except RunnerError as e:
            raise RunnerError(f"child {child.index}'s frozen experiment no longer loads: {e}",
                              where="--resume") from None
        if digest != child.digest:
            console.note(f"child {child.index}'s {plan.child_experiment(child)} was edited since the sweep froze it; "
                         "it runs as edited.")

