"""How this machine differs from the one a run was logged on: versions, GPU, code, layout, data.

Read from the run's tags (runinfo.run_tags) and params (the data fingerprint, launch.run_params),
and measured here the same way, so that the two sides are comparable by construction.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from runner.config.sections import DataConfig
from runner.data.labels import LabelMap, parse_label_map
from runner.data.manifest import run_params
from runner.data.paths import split_dir
from runner.data.scan import fingerprint
from runner.dist import Dist
from runner.errors import DataError
from runner.loaders.dali_plan import reader_suffixes
from runner.machine import cpu_cores, gpu_info
from runner.run import runinfo
from runner.run.record import LABEL_MAP_ARTIFACT
from runner.tracking.store import RunRecord, read_artifact

VERSION_LABELS = {"version.torch_cuda": "CUDA (torch build)", "version.dali": "DALI", "version.cudnn": "cuDNN",
                  "runner.python": "python"}
GPU_LABELS = {"gpu.model": "GPU model", "gpu.count": "GPU count", "gpu.driver": "GPU driver"}
NONE = "-"


@dataclass(frozen=True)
class Difference:
    what: str
    run: str
    here: str
    kind: str  # versions | gpu | code | layout | data | cache | labels


def differences(run: RunRecord, v) -> list[Difference]:
    """Everything that differs between the run and the validated experiment `v` on this machine: versions, GPU,
    code and process layout, the data, the caches and the label map."""
    data = v.config.data
    return (machine_differences(run, v.target, v.processes) + data_differences(run, data, v.graphs)
            + cache_differences(run, data) + label_differences(run, v.labels))


def machine_differences(run: RunRecord, target: Dist, processes: int) -> list[Difference]:
    """Versions, GPU, code and process layout (`target`, `processes` per node) that differ between the run and this
    machine."""
    here = {("runner.python" if k == "python" else k): val for k, val in runinfo.versions().items()}
    out = _compare(run.tags, here, sorted({k for k in (*run.tags, *here) if k.startswith("version.")}
                                          | {"runner.python"}), VERSION_LABELS, "versions")
    out += _compare(run.tags, gpu_info(), list(GPU_LABELS), GPU_LABELS, "gpu")
    code_run, code_here = _code(run.tags), _code(runinfo.git_state())
    if code_run != code_here:
        out.append(Difference("code (git)", code_run, code_here, "code"))
    layout = {"runner.accelerator": target.accelerator, "runner.world_size": str(target.world)}
    if "runner.torch_threads" in run.tags and target.accelerator == "cpu":
        layout["runner.torch_threads"] = str(cpu_threads(processes))  # CPU results depend on it (docs/reproducibility.md)
    out += _compare(run.tags, layout, list(layout), {"runner.accelerator": "accelerator",
                                                     "runner.world_size": "processes",
                                                     "runner.torch_threads": "torch CPU threads"}, "layout")
    return out


def cpu_threads(processes: int) -> int:
    """The intra-op thread count run.processes.torch_threads gives each of `processes` CPU processes here."""
    return max(1, cpu_cores() // max(1, processes))


def _compare(run: dict, here: dict, keys: list[str], labels: dict[str, str], kind: str) -> list[Difference]:
    out = []
    for key in keys:
        a, b = run.get(key), here.get(key)
        if (a is None and b is None) or a == b:
            continue
        out.append(Difference(labels.get(key, key.removeprefix("version.")), a or NONE, b or NONE, kind))
    return out


def _code(git: dict[str, str]) -> str:
    commit = git.get("git.commit")
    if not commit:
        return "not a git checkout"
    return commit[:12] + (" + uncommitted changes" if git.get("git.dirty") == "true" else "")


def params_under(params: dict[str, str], prefix: str) -> dict[str, str]:
    """The params whose keys start with `prefix`, without it."""
    return {k[len(prefix):]: v for k, v in params.items() if k.startswith(prefix)}


def logged_fingerprint(run: RunRecord, role: str) -> dict[str, str] | None:
    return params_under(run.params, f"data.fingerprint.{role}.") or None


def current_fingerprint(data: DataConfig, graphs: Mapping[str, Any], role: str) -> dict[str, str] | str | None:
    """This machine's fingerprint of what `role` would read, a reason it has none, or None (no files read)."""
    if data.loader == "synthetic" or (role == "eval" and "eval" not in graphs and data.loader == "dali"):
        return None
    folder = split_dir(data, role)
    if not folder.is_dir():
        return f"not found: {folder}"
    try:
        return {k: str(val) for k, val in fingerprint(folder, reader_suffixes(graphs.get(role))).items()}
    except DataError as e:
        return f"unreadable: {e.message}"


def describe_fingerprint(fp: dict[str, str] | str | None) -> str:
    if fp is None:
        return NONE
    if isinstance(fp, str):
        return fp
    size = int(fp.get("bytes", 0))
    return (f"{fp.get('files')} files, {_size(size)}, {fp.get('classes')} classes, "
            f"sha256 {str(fp.get('sha256', ''))[:12]}")


def _size(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if n < 1000 or unit == "TB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1000
    return str(n)


def data_differences(run: RunRecord, data: DataConfig, graphs: Mapping[str, Any]) -> list[Difference]:
    """The data each split would read here (`graphs`: the checked pipelines) against the fingerprint the run logged
    (names and sizes)."""
    out = []
    for role in ("train", "eval"):
        before, now = logged_fingerprint(run, role), current_fingerprint(data, graphs, role)
        if before is None and now is None:
            continue
        if before is not None and isinstance(now, dict) and all(before.get(k) == now.get(k) for k in before):
            continue
        out.append(Difference(f"data ({role})", describe_fingerprint(before), describe_fingerprint(now), "data"))
    return out


# what makes two caches the same data: their settings, the encoder's versions and the source they were made from
CACHE_KEYS = ("format", "max_side", "quality", "filter", "subsampling", "small_jpegs", "pillow", "libjpeg",
              "source_fingerprint.sha256")


def logged_cache(params: dict[str, str], role: str) -> dict[str, str]:
    """The `data.cache.ROLE.*` params (runner.data.manifest.run_params) without their prefix; {} for no cache."""
    return params_under(params, f"data.cache.{role}.")


def describe_cache(cache: dict[str, str]) -> str:
    if not cache:
        return NONE
    if cache.get("format") == "jpeg":
        what = (f"JPEG cache, longer side <= {cache.get('max_side')} px, quality {cache.get('quality')} "
                f"(Pillow {cache.get('pillow')}, {cache.get('libjpeg')})")
    else:
        what = f"decoded cache (.npy), longer side <= {cache.get('max_side')} px"
    sha = cache.get("source_fingerprint.sha256")
    return what + (f", of a source of {cache.get('source_fingerprint.files')} files, sha256 {sha[:12]}" if sha else "")


def cache_differences(run: RunRecord, data: DataConfig) -> list[Difference]:
    """For each split that the run or this machine reads from a cache (`runner data cache`): its settings, encoder
    and source, when they differ. Two caches made alike from the same source hold the same images even where
    their folders differ (another path; another Pillow writes other bytes, which the data row shows)."""
    out = []
    for role in ("train", "eval"):
        before = logged_cache(run.params, role)
        now = {} if data.loader == "synthetic" else logged_cache(run_params(role, split_dir(data, role)), role)
        if (before or now) and any(before.get(k) != now.get(k) for k in CACHE_KEYS):
            out.append(Difference(f"cache ({role})", describe_cache(before), describe_cache(now), "cache"))
    return out


def label_differences(run: RunRecord, labels: LabelMap | None) -> list[Difference]:
    """The train split's class names -> labels here (`labels`) against the run's `label_map.json`: one row for the
    classes missing here, one for those only here, one for those numbered differently."""
    text = read_artifact(run.uri, run.run_id, LABEL_MAP_ARTIFACT) if labels is not None else None
    if text is None:
        return []
    before, now = parse_label_map(text), labels.index
    missing = [name for name in before if name not in now]
    extra = [name for name in now if name not in before]
    moved = [name for name in before if name in now and before[name] != now[name]]
    out = []
    if missing:
        out.append(Difference(f"classes missing here ({len(missing)})", _labels(missing, before), NONE, "labels"))
    if extra:
        out.append(Difference(f"classes only here ({len(extra)})", NONE, _labels(extra, now), "labels"))
    if moved:
        out.append(Difference(f"classes renumbered ({len(moved)})", _labels(moved, before), _labels(moved, now),
                              "labels"))
    return out


def _labels(names: list[str], index: dict[str, int], limit: int = 5) -> str:
    shown = ", ".join(f"{name}={index[name]}" for name in names[:limit])
    return shown + (f", ... ({len(names)} in all)" if len(names) > limit else "")
