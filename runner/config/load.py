"""Load an experiment: YAML + includes + `key.path=value` overrides -> typed `Experiment`.

Precedence, lowest first: the schema's defaults, the experiment's `include:` files in the order
written, the experiment file itself, command-line overrides. So a file includes a base and then
says what it changes (as Hydra's `_self_` last, or kustomize). An included file may include
others: each file's own includes come before it, and every include path is relative to the file
that names it. A file reached twice (two files include one base) is merged once, at its first
position; a file that includes itself, directly or through others, is an error. Mappings merge
key by key; a list replaces the list below it whole (OmegaConf's merge). `${...}` interpolation
(and `${oc.env:VAR}`) is resolved after all of them are merged.
"""
from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from runner.config.recipes import check_recipes
from runner.config.sections import Experiment, HybridConfig, PipelineConfig
from runner.config.typed import build
from runner.config.yamlfile import YamlFile
from runner.errors import ConfigError, Locator, did_you_mean, display_path, error_at, first_line, list_names

PIPELINE_ROLES = ("train", "eval")
PACKAGE_ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class PipelineSource:
    """One pipeline graph as written: where its steps are, and its parameter values."""
    role: str                          # train | eval
    name: str                          # file stem in pipelines/, or "inline"
    file: Path                         # the file holding the steps
    steps_key: str                     # key path of the steps list in that file
    steps: tuple[str, ...]
    step_lines: tuple[int | None, ...]
    outputs: tuple[str, ...]
    outputs_line: int | None
    params: dict[str, Any]             # declared params, experiment overrides applied
    explicit_params: frozenset[str]    # the ones the experiment (or command line) set
    description: str = ""
    hybrid: HybridConfig | None = None  # the train pipeline's copy (pipelines.train.hybrid), checked


@dataclass(frozen=True)
class LoadedExperiment:
    config: Experiment
    path: Path
    resolved: dict[str, Any]           # the merged, resolved YAML: what a re-run needs
    overrides: tuple[str, ...] = ()
    pipelines: dict[str, PipelineSource] = field(default_factory=dict)
    locate: Locator = lambda key: (None, None)
    files: tuple[Path, ...] = ()       # the files merged, lowest precedence first: includes, then `path`

    def at(self, key: str) -> dict[str, Any]:
        """file/line/where keyword arguments for an error about `key`."""
        return error_at(key, self.locate)


@dataclass(frozen=True, kw_only=True)
class _PipelineFile:
    description: str = ""
    params: dict[str, Any] = field(default_factory=dict)
    steps: list[str] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)


class _Sources:
    """Which file (or override) set each key, for error messages: the one whose value won.

    `files` are in merge order, lowest first; the experiment file is the last.
    """

    def __init__(self, files: list[YamlFile], overrides: list[tuple[str, str]]):
        self.files, self.overrides = files, overrides

    def __call__(self, key: str) -> tuple[Any, int | None]:
        for ov_key, text in reversed(self.overrides):
            if key == ov_key or key.startswith(ov_key + ".") or key.startswith(ov_key + "["):
                return f"command line '{text}'", None
        for f in reversed(self.files):
            line, exact = f.find(key)
            if exact:
                return f.path, line
        for ov_key, text in reversed(self.overrides):  # `foo.bar=1` created the unknown key `foo`
            if ov_key.startswith(key + ".") or ov_key.startswith(key + "["):
                return f"command line '{text}'", None
        # not written anywhere (a default): the file that wrote most of its path, the experiment on a tie
        best, depth = self.files[-1], 0
        for f in reversed(self.files):
            if f.depth(key) > depth:
                best, depth = f, f.depth(key)
        return best.path, best.line(key)


DELETE = object()  # `~key.path`: remove the key (Hydra's syntax), e.g. params a swapped-in pipeline lacks


def is_override(word: str) -> bool:
    return "=" in word or word.startswith("~")


def _parse_override(text: str) -> tuple[str, Any]:
    if text.startswith("~"):
        key = text[1:].partition("=")[0].strip()
        if not key or any(not part for part in key.split(".")):
            raise ConfigError(f"'{text}' is not a removal; write ~key.path, for example ~pipelines.train.params.",
                              file="command line")
        return key, DELETE
    key, sep, value = text.partition("=")
    key = key.strip()
    if not sep or not key or any(not part for part in key.split(".")):
        raise ConfigError(f"'{text}' is not an override; write key.path=value, for example "
                          "optimizer.lr=0.05 or trainer.max_steps=100.", file="command line")
    try:
        # not resolved here: `${...}` in a value is resolved with the rest of the config
        parsed = OmegaConf.to_container(OmegaConf.from_dotlist([f"x={value}"]), resolve=False)["x"]
    except (OmegaConfBaseException, yaml.YAMLError) as e:
        problem = getattr(e, "problem", None) or first_line(e)
        raise ConfigError(f"cannot parse the value as YAML: {problem}. Write a YAML value such as 0.05, true, "
                          "[0.9, 0.99] or {dropout: 0.2}, and quote the whole argument in the shell.",
                          file=f"command line '{text}'", where=key) from None
    return key, parsed


def load_experiment(path: str | Path, overrides: list[str] | tuple[str, ...] = ()) -> LoadedExperiment:
    """Read, merge, override, resolve and type-check an experiment file and its pipelines."""
    path = Path(path)
    files = merge_order(YamlFile(path, "experiment file"))
    parsed = [_parse_override(o) for o in overrides]
    locate = _Sources(files, [(k, text) for (k, _), text in zip(parsed, overrides)])

    # schema defaults first, so that ${model.name} resolves when the file does not set it
    merged = merge_sources(OmegaConf.create(_defaults()), [_without_include(f.config) for f in files])
    for (key, value), text in zip(parsed, overrides):
        _apply_override(merged, key, value, text)
    try:
        resolved = OmegaConf.to_container(merged, resolve=True)
    except OmegaConfBaseException as e:
        key = getattr(e, "full_key", None) or "?"
        file, line = locate(key)
        raise ConfigError(f"cannot resolve interpolation: {first_line(e)}.",
                          file=file, line=line, where=key) from None
    config = build(Experiment, resolved, "", locate)
    check_consistency(config, locate)
    pipelines = {role: _pipeline(role, getattr(config.pipelines, role), path, locate)
                 for role in PIPELINE_ROLES
                 if getattr(config.pipelines, role) is not None and config.data.loader == "dali"}
    return LoadedExperiment(config=config, path=path, resolved=resolved,
                            overrides=tuple(overrides), pipelines=pipelines, locate=locate,
                            files=tuple(f.path for f in files))


def _apply_override(merged: Any, key: str, value: Any, text: str) -> None:
    if value is DELETE:
        parent, _, last = key.rpartition(".")
        node = OmegaConf.select(merged, parent) if parent else merged
        if not OmegaConf.is_dict(node) or last not in node:
            raise ConfigError("nothing to remove: the key is not set.", file=f"command line '{text}'", where=key)
        del node[last]
        return
    try:
        OmegaConf.update(merged, key, value, merge=True, force_add=True)
        return
    except OmegaConfBaseException:
        pass  # e.g. a list for a mapping: replace it, and let the typed check say what is expected
    parent, _, last = key.rpartition(".")
    node = OmegaConf.select(merged, parent) if parent else merged
    try:
        if OmegaConf.is_dict(node) and last in node:
            del node[last]  # a list or mapping node refuses a value of another kind; replace it
        OmegaConf.update(merged, key, value, merge=False, force_add=True)
    except OmegaConfBaseException as e:
        raise ConfigError(f"cannot apply this override: {first_line(e)}.", file=f"command line '{text}'",
                          where=key) from None


def check_consistency(cfg: Experiment, locate: Callable[[str], tuple[Any, int | None]]) -> None:
    """Rules between keys, which the per-field types and ranges cannot say."""
    s = cfg.data.synth
    if s.min_side > s.max_side:
        raise _error(locate, "data.synth.min_side", f"{s.min_side} is larger than data.synth.max_side ({s.max_side}); "
                                                    "generated images have sides between the two, so min_side must "
                                                    "be at most max_side.")
    t = cfg.trainer
    if t.nnodes > 1 and not t.rdzv_endpoint:
        raise _error(locate, "trainer.nnodes", f"{t.nnodes} nodes need trainer.rdzv_endpoint=HOST:PORT, the address of "
                                               "node 0 (the same on every node).")
    if t.node_rank >= t.nnodes:
        raise _error(locate, "trainer.node_rank", f"{t.node_rank} is out of range for trainer.nnodes={t.nnodes}: "
                                                  f"node ranks run from 0 to {t.nnodes - 1}.")
    _check_training_partners(cfg, locate)
    check_recipes(cfg, locate)
    _check_weights(cfg, locate)


def _check_training_partners(cfg: Experiment, locate: Callable[[str], tuple[Any, int | None]]) -> None:
    """Settings that would silently do nothing, or fail only once training starts, next to the key they depend on."""
    t, o = cfg.trainer, cfg.optimizer
    if t.compile_mode != "default" and not t.compile:
        raise _error(locate, "trainer.compile_mode", f"'{t.compile_mode}' is set but trainer.compile is false, so the "
                                                     "model would run without torch.compile; set trainer.compile=true, "
                                                     "or remove trainer.compile_mode.")
    if o.nesterov and o.momentum == 0:
        raise _error(locate, "optimizer.nesterov", "true needs momentum, but optimizer.momentum is 0 (torch's SGD "
                                                   "refuses Nesterov momentum without it); set optimizer.momentum "
                                                   "above 0, e.g. 0.9, or nesterov=false.")
    if cfg.tracking.enabled and not cfg.tracking.experiment.strip():
        raise _error(locate, "tracking.experiment", "an empty name; MLflow files every run under a named experiment, "
                                                    "e.g. tracking.experiment=resnet50 (the default: runner).")


EPOCH_METRIC = re.compile(r"eval(_\w+)?/(top1|top5|loss)")


def _check_weights(cfg: Experiment, locate: Callable[[str], tuple[Any, int | None]]) -> None:
    """model.init names weights; trainer.checkpoint_best names a metric the run logs at the end of an epoch."""
    init, t = cfg.model.init, cfg.trainer
    if init is not None and not init.source.strip():
        file, line = locate("model.init")  # where model.init was written: source is what it lacks
        raise ConfigError("missing: name the weights to start from, a checkpoint or weights "
                                                  "file (.pt, .pth, .safetensors), a run id, latest:EXPERIMENT or "
                                                  "torchvision; or remove model.init for a fresh random init.",
                          file=file, line=line, where="model.init.source")
    for key, budget in (("trainer.stop_at", t.stop_at), ("trainer.time_to", t.time_to)):
        if budget is not None:
            _check_budget(budget, key, t, locate)
    best = t.checkpoint_best
    if best is None:
        return
    if not EPOCH_METRIC.fullmatch(best.metric):
        raise _error(locate, "trainer.checkpoint_best.metric",
                     f"'{best.metric}' is not an evaluation metric.{did_you_mean(best.metric, BEST_METRICS)} The best "
                     "checkpoint is chosen by one the run logs after each evaluation: eval/top1, eval/top5, eval/loss, "
                     "or the same of another eval split or the EMA model (eval_NAME/top1, ...).")
    if t.eval_every_n_epochs == 0:
        raise _error(locate, "trainer.checkpoint_best", "needs an evaluation, but trainer.eval_every_n_epochs is 0, so "
                                                        f"{best.metric} is never measured; set eval_every_n_epochs to "
                                                        "1 or more, or remove trainer.checkpoint_best.")


BEST_METRICS = ("eval/top1", "eval/top5", "eval/loss")


def _check_budget(budget, key: str, t, locate: Callable[[str], tuple[Any, int | None]]) -> None:
    """trainer.stop_at and trainer.time_to watch an evaluation metric, which must be measured."""
    if not EPOCH_METRIC.fullmatch(budget.metric):
        raise _error(locate, f"{key}.metric", f"'{budget.metric}' is not an evaluation metric."
                                              f"{did_you_mean(budget.metric, BEST_METRICS)} It is read after each "
                                              "evaluation: eval/top1, eval/top5, eval/loss, or the same of another "
                                              "eval split or the EMA model (eval_NAME/top1, eval_ema/top1, ...).")
    values = [budget.value] if key.endswith("stop_at") else budget.values
    if not values or values[0] is None:
        what = "value: the metric's value to stop at, e.g. value: 0.75 for 75% top-1" if key.endswith("stop_at") \
            else "values: the metric's values to time, e.g. values: [0.5, 0.7, 0.75]"
        raise _error(locate, key, f"needs {what}.")
    if t.eval_every_n_epochs == 0:
        raise _error(locate, key, f"needs an evaluation, but trainer.eval_every_n_epochs is 0, so {budget.metric} is "
                                  f"never measured; set eval_every_n_epochs to 1 or more, or remove {key}.")


def schedule_notes(cfg: Experiment) -> list[str]:
    """Schedules that run as written but not as a full recipe would: said, not refused, since a short trial
    (trainer.epochs=1) of a longer recipe is what a user often means."""
    t, s, notes = cfg.trainer, cfg.scheduler, []
    if s.warmup_epochs and s.warmup_epochs >= t.epochs:
        notes.append(f"scheduler.warmup_epochs={s.warmup_epochs:g} is not shorter than trainer.epochs={t.epochs}: "
                     "the lr stays in its warm-up and never reaches optimizer.lr.")
    if s.name == "step" and s.step_epochs >= t.epochs:
        notes.append(f"the step schedule decays the lr every scheduler.step_epochs={s.step_epochs} epochs and "
                     f"trainer.epochs is {t.epochs}: it never decays.")
    return notes


def merge_sources(base: Any, configs: list[Any]) -> Any:
    """`configs` merged over `base` in order, where a mapping may replace a list and a list a mapping (OmegaConf
    refuses to merge the two; the typed check then says which one the key takes)."""
    for config in configs:
        _drop_other_kinds(base, config)
        base = OmegaConf.merge(base, config)
    return base


def _drop_other_kinds(base: Any, config: Any) -> None:
    for key in config:
        if key not in base:
            continue
        old, new = base._get_node(key), config._get_node(key)
        if OmegaConf.is_dict(old) and OmegaConf.is_dict(new):
            _drop_other_kinds(old, new)
        elif (OmegaConf.is_dict(old) and OmegaConf.is_list(new)) or (OmegaConf.is_list(old) and OmegaConf.is_dict(new)):
            del base[key]


def _defaults() -> dict[str, Any]:
    # tuples as lists: OmegaConf makes tuples read-only, and `optimizer.betas[0]=0.95` must apply
    return dataclasses.asdict(Experiment(), dict_factory=lambda items: {k: _listed(v) for k, v in items})


def _listed(value: Any) -> Any:
    return [_listed(v) for v in value] if isinstance(value, (list, tuple)) else value


def merge_order(main: YamlFile) -> list[YamlFile]:
    """`main` and every file it includes, lowest precedence first: each file after its own includes."""
    order: list[YamlFile] = []
    seen: set[Path] = set()

    def visit(file: YamlFile, chain: list[YamlFile]) -> None:
        """`chain`: the files that led here, `file` the last."""
        seen.add(file.path.resolve())
        for key, name in _include_names(file):
            target = file.path.parent / name
            chain_files = [f.path.resolve() for f in chain]
            if target.resolve() in chain_files:
                loop = [f.path for f in chain[chain_files.index(target.resolve()):]]
                raise ConfigError(f"includes {name}, which leads back to this file: "
                                  f"{' -> '.join(display_path(p) for p in [*loop, target])}. A file cannot include "
                                  "itself, directly or through the files it includes; remove one of these includes.",
                                  file=file.path, line=file.line(key), where=key)
            if target.resolve() in seen:
                continue  # already merged, at its first position
            if not target.exists():
                raise ConfigError(f"included file {display_path(target)} not found (an include path is relative to "
                                  "the file that names it).", file=file.path, line=file.line(key), where=key)
            included = YamlFile(target, f"included file (from {file.path.name})")
            visit(included, [*chain, included])
        order.append(file)

    visit(main, [main])
    return order


def _include_names(file: YamlFile) -> list[tuple[str, str]]:
    """(key path, file name) of each include in `file`."""
    names = file.config.get("include")
    if names is None:
        return []
    if isinstance(names, str):
        return [("include", names)]
    if OmegaConf.is_list(names) and all(isinstance(n, str) for n in names):
        return [(f"include[{i}]", n) for i, n in enumerate(names)]
    raise ConfigError("include must be a file path or a list of file paths.",
                      file=file.path, line=file.line("include"), where="include")


def _without_include(config: DictConfig) -> DictConfig:
    copy = config.copy()
    copy.pop("include", None)
    return copy


def pipeline_search_path(experiment: Path) -> list[Path]:
    """Where `use: NAME` looks for pipelines/NAME.yaml, first match wins."""
    dirs = [experiment.resolve().parent.parent / "pipelines", Path.cwd() / "pipelines",
            PACKAGE_ROOT / "pipelines"]
    unique: list[Path] = []
    for d in dirs:
        if d.resolve() not in unique:
            unique.append(d.resolve())
    return unique


def is_pipeline_path(use: str) -> bool:
    return use.endswith((".yaml", ".yml")) or "/" in use


def pipeline_bases(use: str, experiment: Path) -> list[Path]:
    """Where `use:` is looked for: a path from the experiment's folder, then the working directory; a name in
    pipeline_search_path's folders."""
    if is_pipeline_path(use):
        return list(dict.fromkeys(p.resolve() for p in (experiment.parent, Path.cwd())))
    return pipeline_search_path(experiment)


def find_pipeline(use: str, experiment: Path) -> Path | None:
    name = use if is_pipeline_path(use) else f"{use}.yaml"
    for base in pipeline_bases(use, experiment):
        if (base / name).is_file():
            return base / name
    return None


def available_pipelines(experiment: Path) -> list[str]:
    return sorted({p.stem for d in pipeline_search_path(experiment) if d.is_dir() for p in d.glob("*.yaml")
                   if p.is_file()})


def _pipeline(role: str, spec: PipelineConfig, experiment: Path, locate: _Sources) -> PipelineSource:
    source = _graph_source(role, spec, experiment, locate)
    if spec.hybrid is None:
        return source
    key = f"pipelines.{role}.hybrid"
    if role != "train":
        raise _error(locate, key, "only the train pipeline can be split between two copies; remove "
                                  f"'{key}' (evaluation is not what keeps the GPU waiting).")
    if not spec.hybrid.params:
        raise _error(locate, key, "sets no params, so the copy would be the same pipeline twice; set the "
                                  f"parameters the copy changes in '{key}.params', e.g. {{decode_device: cpu}}.")
    _check_param_names(locate, f"{key}.params", spec.hybrid.params, source.name, source.params)
    return dataclasses.replace(source, hybrid=spec.hybrid)


def _graph_source(role: str, spec: PipelineConfig, experiment: Path, locate: _Sources) -> PipelineSource:
    key = f"pipelines.{role}"
    if spec.use and spec.steps is not None:
        raise _error(locate, f"{key}.steps", f"set either '{key}.use' (a pipeline file) or '{key}.steps' "
                                              "(an inline graph), not both.")
    if spec.use:
        return _pipeline_from_file(role, spec, experiment, locate)
    if spec.steps is None:
        raise _error(locate, key, f"no pipeline: set '{key}.use' to one of "
                                  f"{list_names(available_pipelines(experiment), 30)}, or write '{key}.steps'.")
    file = locate(f"{key}.steps")[0]
    line_of = lambda k: locate(k)[1]  # noqa: E731
    return PipelineSource(
        role=role, name="inline", file=file, steps_key=f"{key}.steps", steps=tuple(spec.steps),
        step_lines=tuple(line_of(f"{key}.steps[{i}]") for i in range(len(spec.steps))),
        outputs=tuple(spec.outputs or ()), outputs_line=line_of(f"{key}.outputs"),
        params=dict(spec.params), explicit_params=frozenset(spec.params), description=spec.description)


def _pipeline_from_file(role: str, spec: PipelineConfig, experiment: Path, locate: _Sources) -> PipelineSource:
    key = f"pipelines.{role}"
    written_in = locate(f"{key}.use")[0]  # `use:` is looked up from the file that wrote it, as includes are
    experiment = written_in if isinstance(written_in, Path) else experiment
    path = find_pipeline(spec.use, experiment)
    if path is None:
        searched = ", ".join(str(d) for d in pipeline_bases(spec.use, experiment))
        names = available_pipelines(experiment)
        raise _error(locate, f"{key}.use", f"pipeline '{spec.use}' not found (looked in {searched}).{did_you_mean(spec.use, names)} "
                                           f"Available pipelines: {list_names(names, 30) or 'none'}.")
    if spec.outputs is not None:
        raise _error(locate, f"{key}.outputs", f"outputs belong to the pipeline file {path.name}; "
                                               f"with '{key}.use' set only params can be overridden.")
    src = YamlFile(path, "pipeline file")
    try:
        data = OmegaConf.to_container(src.config, resolve=True)
    except OmegaConfBaseException as e:
        raise ConfigError(f"cannot resolve interpolation: {first_line(e)}.", file=path) from None
    body = build(_PipelineFile, data, "", lambda k: (path, src.line(k)))
    _check_param_names(locate, f"{key}.params", spec.params, spec.use, body.params)
    return PipelineSource(
        role=role, name=path.stem, file=path, steps_key="steps", steps=tuple(body.steps),
        step_lines=tuple(src.line(f"steps[{i}]") for i in range(len(body.steps))),
        outputs=tuple(body.outputs), outputs_line=src.line("outputs"),
        params={**body.params, **spec.params}, explicit_params=frozenset(spec.params),
        description=body.description)


def _check_param_names(locate: _Sources, key: str, names, pipeline: str, declared: dict[str, Any]) -> None:
    """Every name set under `key` is a parameter the pipeline declares."""
    for name in names:
        if name not in declared:
            raise _error(locate, f"{key}.{name}",
                         f"pipeline '{pipeline}' has no parameter '{name}'.{did_you_mean(name, declared)} "
                         f"Its parameters: {list_names(declared, 40) or 'none'}.")


def _error(locate: _Sources, key: str, message: str) -> ConfigError:
    file, line = locate(key)
    return ConfigError(message, file=file, line=line, where=key)
