"""`runner tune`: measure this machine's placement options for the train pipeline, keep the fastest.

A short coordinate search: starting from the experiment as written, each knob in turn is set to
each of its values with the others at their best so far, by end-to-end training throughput
(runner's own loop, warm-up excluded). A change must beat the best by more than `min_gain` to be
kept. Knobs the pipeline does not have are skipped. Runs of the same settings differ by several
percent on a GPU machine (measured: up to 12% on the H200), so a winner is measured again, with the
experiment as written, and kept only if it still wins on the mean of both runs.

Where JPEGs are decoded is one knob, the share of each batch decoded by CPU threads: 0 is GPU decode,
1 CPU decode, and a share between is a hybrid pipeline (pipelines.train.hybrid) doing both, with the
CPU copy dealt the smallest files.
"""
from __future__ import annotations

import os
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from runner.bench.stats import part_waits
from runner.config.load import LoadedExperiment, load_experiment
from runner.dist import Dist
from runner.errors import RunnerError, display_path
from runner.files import write_text_atomic
from runner.loaders.dali_plan import dali_threads
from runner.machine import cpu_cores

FUSED, SEPARATE = "imagenet_train_fused", "imagenet_train"
CPU_SHARE = "cpu_decode_share"  # not a config key: expanded() turns it into decode_device and hybrid settings
DECODE_DEVICE, HYBRID = "pipelines.train.params.decode_device", "pipelines.train.hybrid"


@dataclass(frozen=True)
class Knob:
    key: str                      # the override key
    values: tuple[Any, ...]
    label: str


@dataclass
class Trial:
    settings: dict[str, Any]
    result: dict[str, Any] | None = None
    error: str | None = None
    repeats: list[Trial] = field(default_factory=list)  # the same settings measured again
    repeat: bool = False                                   # this trial is such a measurement

    @property
    def images_per_s(self) -> float:
        """The mean over this trial and its repeats."""
        runs = [(t.result or {}).get("images_per_s", 0.0) for t in (self, *self.repeats)]
        return sum(runs) / len(runs)


@dataclass
class TuneResult:
    baseline: Trial
    best: Trial
    trials: list[Trial] = field(default_factory=list)

    @property
    def gain(self) -> float:
        return self.best.images_per_s / self.baseline.images_per_s - 1 if self.baseline.images_per_s else 0.0


def knobs(loaded: LoadedExperiment, accelerator: str, processes: int = 1) -> list[Knob]:
    """The placement options this experiment's train pipeline exposes on `accelerator`."""
    train = loaded.pipelines.get("train")
    params = train.params if train else {}
    cores = max(1, cpu_cores() // processes)
    gpu = accelerator == "gpu"  # without a GPU every step runs on the CPU: no placement to choose
    out = []
    if gpu and train is not None:  # first: the best share depends on whether DALI's GPU work yields to the model's
        out.append(Knob("trainer.stream_priority", ("default", "high"), "training stream priority"))
    custom_hybrid = train is not None and train.hybrid is not None and train.hybrid.params != {"decode_device": "cpu"}
    if gpu and "decode_device" in params and not custom_hybrid:
        out.append(Knob(CPU_SHARE, (0.0, 1.0, 0.6, 0.7, 0.8), "share decoded on CPU"))
    if train and train.name in (FUSED, SEPARATE):
        out.append(Knob("pipelines.train.use", (FUSED, SEPARATE), "crop fused into decode"))
    if gpu and "hw_decoder_load" in params:
        out.append(Knob("pipelines.train.params.hw_decoder_load", (0.65, 0.99, 0.0), "hw_decoder_load"))
    threads = sorted({max(1, int(cores * f)) for f in (0.5, 0.75, 1.0)})
    out.append(Knob("data.num_threads", tuple(threads), "DALI CPU threads"))
    out.append(Knob("data.prefetch", (2, 3, 4), "prefetch queue depth"))
    return out


def baseline_settings(loaded: LoadedExperiment, accelerator: str, ks: list[Knob], processes: int = 1) -> dict[str, Any]:
    """The knobs' values as the experiment sets them."""
    train, cfg = loaded.pipelines["train"], loaded.config
    current = {"pipelines.train.use": train.name, "data.prefetch": cfg.data.prefetch,
               "trainer.stream_priority": cfg.trainer.stream_priority,
               CPU_SHARE: cpu_share(train),
               "data.num_threads": dali_threads(cfg.data, Dist(accelerator, local_world=processes))}
    for k in ks:
        if k.key.startswith("pipelines.train.params."):
            current[k.key] = train.params[k.key.rsplit(".", 1)[1]]
    return {k.key: current[k.key] for k in ks}


def search(ks: list[Knob], start: dict[str, Any], evaluate: Callable[[dict[str, Any]], Trial], *,
           max_trials: int, min_gain: float = 0.01) -> TuneResult:
    baseline = evaluate(dict(start))
    result = TuneResult(baseline=baseline, best=baseline, trials=[baseline])
    for knob in ks:
        for value in knob.values:
            if len(result.trials) >= max_trials:
                return confirm(result, evaluate, min_gain)
            candidate = {**result.best.settings, knob.key: value}
            if any(t.settings == candidate for t in result.trials):
                continue
            if not _applies(candidate):
                continue
            trial = evaluate(candidate)
            result.trials.append(trial)
            if trial.images_per_s > result.best.images_per_s * (1 + min_gain):
                result.best = trial
    return confirm(result, evaluate, min_gain)


def confirm(result: TuneResult, evaluate: Callable[[dict[str, Any]], Trial], min_gain: float) -> TuneResult:
    """Measure the winner and the baseline once more; keep the winner only if it wins on the means."""
    if result.best is result.baseline:
        return result
    for trial in (result.best, result.baseline):
        again = evaluate(dict(trial.settings))
        again.repeat = True
        trial.repeats.append(again)
        result.trials.append(again)
    if result.best.images_per_s <= result.baseline.images_per_s * (1 + min_gain):
        result.best = result.baseline
    return result


def cpu_share(train) -> float:
    """The experiment's share of each batch decoded on the CPU, as written."""
    if train.params.get("decode_device") == "cpu":
        return 1.0
    if train.hybrid is not None and train.hybrid.params.get("decode_device") == "cpu":
        return train.hybrid.share
    return 0.0


def _applies(settings: dict[str, Any]) -> bool:
    """hw_decoder_load only matters when the GPU decodes some images."""
    hw = "pipelines.train.params.hw_decoder_load"
    return not (settings.get(CPU_SHARE) == 1.0 and hw in settings and settings[hw] != 0.65)


def expanded(settings: dict[str, Any]) -> dict[str, Any]:
    """Settings as config keys: a CPU share of 0 is GPU decode, 1 CPU decode, between a hybrid pipeline."""
    out = {k: v for k, v in settings.items() if k != CPU_SHARE}
    if CPU_SHARE in settings:
        share = settings[CPU_SHARE]
        out[DECODE_DEVICE] = "cpu" if share == 1.0 else "mixed"
        if 0.0 < share < 1.0:
            # the CPU threads get the smallest files, the cheapest to decode (measured on the H200, docs/benchmarks.md)
            out.update({f"{HYBRID}.share": share, f"{HYBRID}.params.decode_device": "cpu", f"{HYBRID}.deal": "smallest"})
        else:
            out[HYBRID] = None
    return out


def as_overrides(settings: dict[str, Any]) -> list[str]:
    return [f"{k}={'null' if v is None else v}" for k, v in expanded(settings).items()]


def tuned_yaml(result: TuneResult, header: str, include: str) -> str:
    """An experiment file that includes the tuned one (`include`, a path relative to it) and sets the best settings.

    The including file wins over its includes, so `runner launch` on it runs the tuned setting.
    """
    nested: dict[str, Any] = {}
    for key, value in expanded(result.best.settings).items():
        node = nested
        *parents, leaf = key.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    lines = "".join(f"# {ln}\n" for ln in header.splitlines())
    return lines + yaml.safe_dump({"include": [include], **nested}, sort_keys=False)


TUNED_MARK = "# runner tune "  # the first line of every file tune writes


def default_output(experiment: Path) -> Path:
    return experiment.with_name(f"{experiment.stem}.tuned.yaml")


def written_by_tune(path: Path) -> bool:
    try:
        with path.open() as f:
            return f.readline().startswith(TUNED_MARK)
    except (OSError, UnicodeDecodeError):
        return False


# ---- is decode the limit? ------------------------------------------------------------------------

# A batch that is late by more than this share of the step time is a data limit (the reasoning, with the runs
# it rests on, is in docs/benchmarks.md, "The compact JPEG cache"): GPU-bound runs wait 0-4%, CPU-decode-bound
# ones 10-30%.
DATA_WAIT_LIMIT = 0.05
GPU_BUSY = 95.0        # % GPU util at which the GPU is the limit, however long the training thread waits
THREAD_IDLE = 80.0     # % busy below which the training thread is idle, not launching the step
JPEG_CACHE_COMMAND = "runner data cache {src} {dst} --format jpeg --max-side 320 --quality 90"
JPEG_CACHE_EFFECT = ("a 320 px, quality 90 cache took 0.25x the disk of the benchmark set and fed the compiled "
                     "ResNet-50 at 99.2% of its ceiling on an H200 with DALI CPU decode alone, where decoding the "
                     "full-size JPEGs on CPU threads gave 74-86% (docs/benchmarks.md)")


def decode_limit(best: Trial, data_root: Path, cache: dict | None = None,
                 longer_side: int | None = None) -> str | None:
    """Why the best setting still waits for data, and the compact JPEG cache as the cure; None when it does not.

    Waiting: the host's data wait, or the training stream's (on a GPU: late GPU work in the pipeline stalls the
    stream, not the host), above DATA_WAIT_LIMIT while the GPU is below GPU_BUSY, or a GPU below GPU_BUSY while the
    training thread is idle (below THREAD_IDLE: neither launching work nor fed). `cache`: the manifest
    of the folder read (runner.data.manifest), if it is one `runner data cache` made; `longer_side`: the images'
    median longer side, when known (a cache at 320 px does not shrink images already smaller).
    """
    r = best.result or {}
    wait, gpu, busy = r.get("data_wait_share"), r.get("gpu_util_pct"), r.get("train_thread_busy_pct")
    stream = r.get("stream_wait_share")
    if wait is None:
        return None
    gpu_short = gpu is not None and gpu < GPU_BUSY
    waits = max(wait, stream or 0.0) > DATA_WAIT_LIMIT and (gpu is None or gpu_short)
    idle = gpu_short and busy is not None and busy < THREAD_IDLE
    if not (waits or idle):
        return None
    parts = ", ".join(f"{name} {100 * x:.1f}%" for name, x in part_waits(r).items())
    seen = [f"data wait {100 * wait:.1f}% of the step time" + (f" ({parts})" if parts else "")]
    if stream is not None:
        seen.append(f"the training stream's {100 * stream:.1f}%")
    if gpu is not None:
        seen.append(f"GPU busy {gpu:.0f}%")
    if r.get("cpu_busy_pct") is not None:
        seen.append(f"host CPUs busy {r['cpu_busy_pct']:.0f}%")
    if busy is not None:
        seen.append(f"training thread busy {busy:.0f}%")
    head = (f"the best setting still waits for data ({', '.join(seen)}): the input pipeline is the limit, not the "
            "model.")
    settings = (cache or {}).get("settings", {})
    if settings.get("format") == "jpeg":
        smaller, source = max(16, int(settings["max_side"] * 0.8)), cache.get("source", "SRC")
        return (f"{head} It already reads a compact JPEG cache (longer side {settings['max_side']} px, quality "
                f"{settings['quality']}); a smaller one decodes faster: `runner data cache {source} DST --format jpeg "
                f"--max-side {smaller} --quality {settings['quality']}`, then data.root=DST.")
    if settings:
        return (f"{head} It reads the decoded cache (.npy): reading its files is the limit; a compact JPEG cache "
                f"reads about 5x fewer bytes: `{JPEG_CACHE_COMMAND.format(src=cache.get('source', 'SRC'), dst='DST')}`"
                ", then data.root=DST.")
    if longer_side is not None and longer_side <= 320:
        return (f"{head} The images are small already (median longer side {longer_side} px): a compact JPEG cache "
                "would not shrink them. Give decoding more cores (data.num_threads), or decode on the GPU "
                "(pipelines.train.params.decode_device=mixed).")
    command = JPEG_CACHE_COMMAND.format(src=data_root, dst=f"{data_root}-jpeg320")
    return (f"{head} Store smaller JPEGs once: `{command}`, then train with data.root={data_root}-jpeg320; "
            f"{JPEG_CACHE_EFFECT}.")


def check_output(output: Path, loaded) -> bool:
    """Refuse, before any trial, a file tune must not write; True when it replaces an earlier tune's file."""
    merged = [f.resolve() for f in loaded.files]
    if output.resolve() in merged:
        how = "is the experiment" if output.resolve() == merged[-1] else "is included by the experiment"
        raise RunnerError(f"{display_path(output)} {how}; the tuned file includes the experiment, so it must be "
                          "another file: name one with -o/--output (or remove that include).",
                          file="command line", where="--output")
    if output.exists() and not written_by_tune(output):
        raise RunnerError(f"{display_path(output)} exists and was not written by runner tune, so it is not replaced; "
                          "name another file with -o/--output, or move that one away.",
                          file="command line", where="--output")
    return output.exists()


def write_tuned(output: Path, experiment: Path, overrides: list[str], result: TuneResult, measured: str) -> str:
    """Write the tuned experiment file; return the command that runs the tuned setting.

    The command repeats the tune's own overrides, except those a tuned key replaces: in the trials the
    tuned keys were applied after them.
    """
    tuned_keys = list(expanded(result.best.settings))
    kept = [o for o in overrides if not any(_overlaps(_override_key(o), k) for k in tuned_keys)]
    command = shlex.join(["runner", "launch", display_path(output), *kept])
    include = os.path.relpath(os.path.abspath(experiment), os.path.abspath(output.parent))
    header = "\n".join([shlex.join(["runner", "tune", display_path(experiment), *overrides]), measured,
                        f"Run it: {command}",
                        f"It includes {include} and sets only the tuned keys, which win over that file's."])
    write_text_atomic(output, tuned_yaml(result, header, include))
    # the file must run what was measured: the experiment with the tune's overrides, then the tuned keys
    written = load_experiment(output, kept).resolved
    measured_config = load_experiment(experiment, [*overrides, *as_overrides(result.best.settings)]).resolved
    if written != measured_config:
        differ = sorted(k for k in {*written, *measured_config} if written.get(k) != measured_config.get(k))
        raise RunnerError(f"the written file does not resolve to the measured setting (sections {', '.join(differ)} "
                          f"differ); run the experiment with these overrides instead: "
                          f"{shlex.join([*overrides, *as_overrides(result.best.settings)])}.", file=output)
    return command


def _override_key(text: str) -> str:
    return text.lstrip("~").partition("=")[0].strip()


def _overlaps(a: str, b: str) -> bool:
    return a == b or a.startswith(b + ".") or b.startswith(a + ".")
