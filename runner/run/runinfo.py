"""What a run records about itself so that someone else can re-run it: versions, machine, code, data."""
from __future__ import annotations

import os
import platform
import shlex
import socket
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any

from runner.config.frozen import config_digest
from runner.config.load import LoadedExperiment
from runner.config.sections import DataConfig
from runner.data import manifest
from runner.data.paths import split_dir
from runner.loaders.dali_plan import dali_seed
from runner.machine import cpu_cores, gpu_info

# torch is imported in the functions that read its versions, for start-up: commands that run nothing read
# this module.

PACKAGE_ROOT = Path(__file__).resolve().parent.parent
CODE_PATTERNS = ("*.py", "*.yaml", "*.yml")  # untracked files that change what a run does


def git_state(path: Path = PACKAGE_ROOT) -> dict[str, str]:
    """Commit and dirty flag of the checkout holding `path` (empty outside git).

    Dirty means the code differs from the commit: a tracked file changed, or an untracked Python or YAML
    file (a module the run imports, an experiment or pipeline it reads). Other untracked files are not
    code, among them what a starting run writes beside it: the sqlite journal of a ./mlflow.db store
    exists while the store is written, and git lists it as untracked."""
    def git(*args: str) -> list[str]:
        out = subprocess.run(["git", "-C", str(path), *args], capture_output=True, text=True,
                             timeout=10, check=True).stdout
        return [p for p in out.split("\0") if p]
    try:
        commit = git("rev-parse", "HEAD")[0].strip()
        changed = _changed_paths(git("status", "--porcelain", "-z", "--untracked-files=no"))
        changed += git("ls-files", "-z", "--others", "--exclude-standard", "--", *CODE_PATTERNS)
    except (OSError, subprocess.SubprocessError, IndexError):
        return {}
    state = {"git.commit": commit, "git.dirty": str(bool(changed)).lower()}
    if changed:
        state["git.dirty_files"] = ", ".join(changed[:10]) + (f" (+{len(changed) - 10} more)" if len(changed) > 10 else "")
    return state


def _changed_paths(entries: list[str]) -> list[str]:
    """Paths of `git status --porcelain -z` entries ("XY path"; a rename or copy's old path follows as an entry
    of its own)."""
    paths, entries = [], iter(entries)
    for entry in entries:
        paths.append(entry[3:])
        if entry[0] in "RC":
            next(entries, None)
    return paths


def versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for dist in ("torch", "torchvision", "mlflow", "runner", "numpy", "pillow", "omegaconf",
                 "nvidia-nvimgcodec-cu13", "nvidia-nvimgcodec-cu12"):
        try:
            out[f"version.{dist}"] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            pass
    for dist in ("nvidia-dali-cuda130", "nvidia-dali-cuda120"):
        try:
            out["version.dali"] = f"{metadata.version(dist)} ({dist})"
        except metadata.PackageNotFoundError:
            continue
    import torch  # start-up: this module is read by commands that run nothing

    out["version.torch_cuda"] = str(torch.version.cuda)
    if torch.cuda.is_available():
        out["version.cudnn"] = str(torch.backends.cudnn.version())
        out["version.nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
    return out


def run_tags(loaded: LoadedExperiment, accelerator: str, world: int) -> dict[str, str]:
    """Tags logged with every run of `loaded` on `world` processes: code, versions, machine, GPUs, layout, and the
    digest of the setting it trains (config_sha256: the same for runs of one setting wherever they are kept;
    runner.config.frozen)."""
    import torch  # start-up: this module is read by commands that run nothing

    data = loaded.config.data
    tags = {"host": socket.gethostname(), "platform": platform.platform(), "accelerator": accelerator,
            "world_size": str(world), "loader": data.loader, "experiment_file": str(loaded.path),
            "overrides": shlex.join(loaded.overrides), "config_sha256": config_digest(loaded.resolved)}
    tags["torch_threads"] = str(torch.get_num_threads())  # CPU results depend on it (docs/reproducibility.md)
    tags["cpu_cores"] = str(cpu_cores())
    tags.update({f"env.{k}": os.environ[k] for k in ("CUBLAS_WORKSPACE_CONFIG", "NCCL_ALGO", "NCCL_PROTO",
                                                     "OMP_NUM_THREADS") if k in os.environ})
    tags.update(git_state())
    tags.update(versions())
    tags.update(gpu_info())
    tags.update(_cache_tags(data))
    return {f"runner.{k}" if not k.startswith(("git.", "gpu.", "version.", "env.")) else k: val
            for k, val in tags.items()}


def _cache_tags(data: DataConfig) -> dict[str, str]:
    """`data.ROLE_cache`: what `runner data cache` made of the data a role reads, when it reads a cache."""
    if data.loader == "synthetic":
        return {}
    return manifest.run_tags({role: split_dir(data, role) for role in ("train", "eval")})


def seeds(cfg, world: int) -> dict[str, Any]:
    """Every seed a run uses (see loaders.dali_plan.pipeline_args and dsl.check for where they go)."""
    return {"seed.torch": cfg.seed, "seed.reader_shuffle": cfg.seed,
            "seed.dali_train": [dali_seed(cfg.seed, r, "train") for r in range(world)],
            "seed.dali_eval": [dali_seed(cfg.seed, r, "eval") for r in range(world)]}
