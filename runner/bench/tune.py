"""`runner tune`: measure this machine's placement options for the train pipeline, keep the fastest.

A short coordinate search: starting from the experiment as written, each knob in turn is set to
each of its values with the others at their best so far, by end-to-end training throughput
(runner's own loop, warm-up excluded). A change must beat the best by more than `min_gain` to be
kept, so run-to-run noise does not pick settings. Knobs the pipeline does not have are skipped.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from runner.machine import cpu_cores

FUSED, SEPARATE = "imagenet_train_fused", "imagenet_train"
HYBRID_SHARE = "pipelines.train.hybrid.share"


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

    @property
    def images_per_s(self) -> float:
        return (self.result or {}).get("images_per_s", 0.0)


@dataclass
class TuneResult:
    baseline: Trial
    best: Trial
    trials: list[Trial] = field(default_factory=list)

    @property
    def gain(self) -> float:
        return self.best.images_per_s / self.baseline.images_per_s - 1 if self.baseline.images_per_s else 0.0


def knobs(v, processes: int = 1) -> list[Knob]:
    """The placement options this experiment's train pipeline exposes."""
    train = v.loaded.pipelines.get("train")
    params = train.params if train else {}
    cores = max(1, cpu_cores() // processes)
    gpu = v.target.accelerator == "gpu"  # without a GPU every step runs on the CPU: no placement to choose
    out = []
    if gpu and "decode_device" in params:
        out.append(Knob("pipelines.train.params.decode_device", ("mixed", "cpu"), "JPEG decode on"))
    if train and train.name in (FUSED, SEPARATE):
        out.append(Knob("pipelines.train.use", (FUSED, SEPARATE), "crop fused into decode"))
    if gpu and "hw_decoder_load" in params:
        out.append(Knob("pipelines.train.params.hw_decoder_load", (0.65, 0.99, 0.0), "hw_decoder_load"))
    if gpu and "decode_device" in params:  # CPU threads decode this share of each batch, the GPU the rest
        out.append(Knob(HYBRID_SHARE, (None, 0.5, 0.7, 0.85), "share decoded on CPU"))
    threads = sorted({max(1, int(cores * f)) for f in (0.5, 0.75, 1.0)})
    out.append(Knob("data.num_threads", tuple(threads), "DALI CPU threads"))
    out.append(Knob("data.prefetch", (2, 3, 4), "prefetch queue depth"))
    return out


def baseline_settings(v, ks: list[Knob], processes: int = 1) -> dict[str, Any]:
    from runner.plan import Target, dali_threads

    train = v.loaded.pipelines["train"]
    current = {"pipelines.train.use": train.name, "data.prefetch": v.config.data.prefetch,
               HYBRID_SHARE: train.hybrid.share if train.hybrid else None,
               "data.num_threads": dali_threads(v.config.data, Target(v.target.accelerator, local_world=processes))}
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
                return result
            candidate = {**result.best.settings, knob.key: value}
            if any(t.settings == candidate for t in result.trials):
                continue
            if not _applies(candidate):
                continue
            trial = evaluate(candidate)
            result.trials.append(trial)
            if trial.images_per_s > result.best.images_per_s * (1 + min_gain):
                result.best = trial
    return result


def _applies(settings: dict[str, Any]) -> bool:
    """hw_decoder_load and a CPU share only matter when the GPU decodes."""
    hw = "pipelines.train.params.hw_decoder_load"
    if settings.get("pipelines.train.params.decode_device", "mixed") != "cpu":
        return True
    return not ((hw in settings and settings[hw] != 0.65) or settings.get(HYBRID_SHARE) is not None)


def expanded(settings: dict[str, Any]) -> dict[str, Any]:
    """Settings as config keys: a CPU share is a hybrid copy of the pipeline decoding on the CPU, None none."""
    out = {k: v for k, v in settings.items() if k != HYBRID_SHARE}
    if HYBRID_SHARE in settings:
        share = settings[HYBRID_SHARE]
        if share is None:
            out["pipelines.train.hybrid"] = None
        else:
            out.update({HYBRID_SHARE: share, "pipelines.train.hybrid.params.decode_device": "cpu"})
    return out


def as_overrides(settings: dict[str, Any]) -> list[str]:
    return [f"{k}={'null' if v is None else v}" for k, v in expanded(settings).items()]


def tuned_yaml(result: TuneResult, header: str) -> str:
    """The best settings as a YAML file an experiment can `include:`."""
    import yaml

    nested: dict[str, Any] = {}
    for key, value in expanded(result.best.settings).items():
        node = nested
        *parents, leaf = key.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    lines = "".join(f"# {ln}\n" for ln in header.splitlines())
    return lines + yaml.safe_dump(nested, sort_keys=False)


def default_output(experiment: Path) -> Path:
    return experiment.with_name(f"{experiment.stem}.tuned.yaml")
