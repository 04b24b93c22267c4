"""A logged run as an experiment again.

A run logs `experiment.yaml`: the resolved experiment after its overrides, which still names its
pipelines by `use: NAME`. Resolved on another checkout, NAME would find that checkout's
pipelines/NAME.yaml, which may have changed since. So the pipelines are pinned:

- `runner reproduce` writes a small project, reproduced/<run id>/{experiments,pipelines}/, with the
  logged YAML unchanged and the pipeline files beside it, where `use:` finds them first. The
  reproduction's params are then the original's, key for key, and `runner compare` shows only what
  really differs.
- `runner export` writes one file with the pipeline steps inlined (`use: null`, `steps`, `outputs`
  and every parameter), for sharing. Launched, its params name the pipeline keys inline.

The pipeline text comes from the run's `pipelines/<role>.yaml` artifact when it logged one, else
from this checkout (and the caller is told so).
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from runner.config.frozen import as_logged
from runner.config.load import LoadedExperiment, find_pipeline, is_pipeline_path, load_experiment, pipeline_search_path
from runner.errors import ConfigError, RunnerError
from runner.loaders.dali_plan import BOUND_PARAMS
from runner.tracking.store import RunRecord, logged_config, read_artifact


@dataclass(frozen=True)
class Snapshot:
    experiment: Path                                        # .../experiments/<name>.yaml
    sources: dict[str, str] = field(default_factory=dict)   # role -> where its pipeline text came from
    from_checkout: dict[str, Path] = field(default_factory=dict)  # role -> this checkout's file, pinned instead


def pipeline_files(loaded: LoadedExperiment) -> dict[str, str]:
    """artifact name -> text of each pipeline file the experiment `use:`s, as it is now: what a run should
    log (as pipelines/<role>.yaml) so that reproduce and export pin the very steps it ran."""
    return {f"pipelines/{role}.yaml": source.file.read_text()
            for role, source in loaded.pipelines.items() if source.name != "inline"}


def experiment_stem(run: RunRecord, config: dict[str, Any]) -> str:
    stem = Path(run.tags.get("runner.experiment_file", "")).stem or str(config.get("name") or "")
    return stem or "experiment"


def write_snapshot(run: RunRecord, dest: Path) -> Snapshot:
    """dest/experiments/<name>.yaml (the logged YAML) and dest/pipelines/*.yaml (what its `use:` names)."""
    config = logged_config(run)
    exp_dir = dest / "experiments"
    path = exp_dir / f"{experiment_stem(run, config)}.yaml"
    sources: dict[str, str] = {}
    from_checkout: dict[str, Path] = {}
    uses_pipelines = (config.get("data") or {}).get("loader", "dali") == "dali"
    for role, spec in (config.get("pipelines") or {}).items():
        use = (spec or {}).get("use") if uses_pipelines else None
        if not use:
            continue  # inline steps (already in the YAML) or no pipeline
        text = read_artifact(run.uri, run.run_id, f"pipelines/{role}.yaml")
        if text is not None:
            sources[role] = f"the run's logged pipelines/{role}.yaml"
        else:
            local = _local_pipeline(run, use, role)
            text = local.read_text()
            sources[role] = f"this checkout's {local} (the run did not log its pipeline files)"
            from_checkout[role] = local
        target = _pinned_path(use, dest, exp_dir)
        if target is None:
            sources[role] = f"{use}, an absolute path: not pinned, read from there"
            from_checkout.pop(role, None)
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    exp_dir.mkdir(parents=True, exist_ok=True)
    path.write_text(_header(run, "runner reproduce", pinned=bool(sources)) + _dump(config))
    return Snapshot(experiment=path, sources=sources, from_checkout=from_checkout)


def _pinned_path(use: str, dest: Path, exp_dir: Path) -> Path | None:
    """Where `use:` finds the pinned copy first; None for an absolute path (pinning it would change `use`)."""
    if is_pipeline_path(use):
        return None if Path(use).is_absolute() else exp_dir / use  # find_pipeline looks beside the experiment first
    return dest / "pipelines" / f"{use}.yaml"


def _local_pipeline(run: RunRecord, use: str, role: str) -> Path:
    """The pipeline file `use` names, as this checkout resolves it (beside the run's experiment file first)."""
    original = Path(run.tags.get("runner.experiment_file", ""))
    candidates = [original] if original.name and original.parent.is_dir() else []
    candidates.append(Path.cwd() / "experiments" / "x.yaml")
    for experiment in candidates:
        found = find_pipeline(use, experiment)
        if found is not None:
            return found
    searched = ", ".join(str(d) for d in pipeline_search_path(candidates[-1]))
    raise RunnerError(f"run {run.run_id} names the {role} pipeline '{use}' and did not log it; this checkout does not "
                      f"have it either (looked in {searched}). Put {use}.yaml into ./pipelines/.", where="RUN_ID")


def inline_pipelines(loaded: LoadedExperiment) -> dict[str, Any]:
    """The resolved experiment with each `use:` pipeline replaced by its steps, outputs and parameters."""
    out = copy.deepcopy(as_logged(loaded.resolved))
    for role, source in loaded.pipelines.items():
        if source.name == "inline":
            continue
        # data_root & co. stay unset unless the experiment set them: the runner binds them to data.root
        params = {k: (None if k in BOUND_PARAMS and k not in source.explicit_params else v)
                  for k, v in source.params.items()}
        out["pipelines"][role] = {"use": None, "description": source.description, "params": params,
                                  "steps": list(source.steps), "outputs": list(source.outputs)}
    return out


def export_yaml(run: RunRecord, scratch: Path) -> tuple[str, Snapshot]:
    """The run's experiment as one self-contained YAML text (pipelines inlined); `scratch` is an empty folder."""
    snap = write_snapshot(run, scratch)
    try:
        loaded = load_experiment(snap.experiment)
    except ConfigError as e:
        commit = run.tags.get("git.commit")
        at = f" (git checkout {commit[:12]}, the run's commit)" if commit else ""
        raise ConfigError(f"the run's experiment.yaml does not load with this version of runner: "
                          f"{e.where + ': ' if e.where else ''}{e.message} Export it with the runner it ran "
                          f"with{at}.", where="RUN_ID") from None
    return _header(run, "runner export", pinned=False) + _dump(inline_pipelines(loaded)), snap


def _header(run: RunRecord, by: str, *, pinned: bool) -> str:
    commit = run.tags.get("git.commit", "unknown")
    dirty = " with uncommitted changes" if run.tags.get("git.dirty") == "true" else ""
    lines = [f"Written by {by} from run {run.run_id} ({run.name}) of experiment '{run.experiment}' at {run.uri}.",
             f"The resolved experiment after its overrides; runner at commit {commit}{dirty}."]
    if pinned:
        lines.append("Its pipelines are pinned in ../pipelines/, where `use:` finds them first.")
    else:
        lines.append("Pipelines are inlined (steps, outputs, every parameter): the file stands alone.")
    return "".join(f"# {line}\n" for line in lines)


def _dump(config: dict[str, Any]) -> str:
    return yaml.safe_dump(config, sort_keys=False, default_flow_style=False, width=120, allow_unicode=True)
