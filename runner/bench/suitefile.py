"""A bench suite file: named configurations (an experiment, overrides, loaders, modes) measured together.

    name: gpu                     # optional; the file's stem otherwise
    repeat: 3                     # rounds: each runs every measurement once
    warmup: 50
    steps: 200
    window: 25
    overrides: [tracking.enabled=false]     # for every entry
    vars: {cache_root: null}      # ${vars.cache_root} in overrides; null: given on the command line
    entries:
      - name: eager
        experiment: experiments/resnet50_dali.yaml
        overrides: []
        loaders: [dali, dali-cpu, cache]
        modes: [e2e]
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from runner.bench.variants import LOADERS, MODES
from runner.config.yamlfile import YamlFile
from runner.errors import ConfigError, did_you_mean

SUITE_KEYS = ("name", "repeat", "warmup", "steps", "window", "overrides", "vars", "entries")
ENTRY_KEYS = ("name", "experiment", "overrides", "loaders", "modes")
_VAR = re.compile(r"\$\{vars\.([A-Za-z_][A-Za-z0-9_]*)\}")


@dataclass(frozen=True)
class Entry:
    """One configuration: its loaders and modes measured each round."""
    name: str
    experiment: str
    overrides: tuple[str, ...]
    loaders: tuple[str, ...]
    modes: tuple[str, ...] = ("e2e",)
    line: int | None = None          # where the entry starts in its suite file


@dataclass(frozen=True)
class Suite:
    name: str
    entries: tuple[Entry, ...]
    repeat: int = 1
    warmup: int = 100
    steps: int = 300
    window: int = 25
    path: Path | None = None         # None: one experiment from the command line
    # True: each entry is divided by a ceiling of its own step settings, measured every round; False (one
    # experiment): by its synthetic row when that was chosen
    own_ceilings: bool = True
    overrides: tuple[str, ...] = field(default=())


def load_suite(path: Path, words: list[str]) -> Suite:
    """Read and check a suite file; `words` (command-line key=value) set vars.NAME or apply to every entry."""
    yf = YamlFile(path, "suite file")
    raw: dict[str, Any] = OmegaConf.to_container(yf.config)
    _check_keys(raw, SUITE_KEYS, "", yf)
    values = _vars(raw, words, yf)
    every = [w for w in words if not w.startswith("vars.")]
    if not isinstance(raw.get("entries"), list) or not raw["entries"]:
        raise ConfigError("a suite lists its configurations under 'entries', a list of mappings with name, "
                          "experiment, overrides, loaders and modes.", file=path, line=yf.line("entries"),
                          where="entries")
    common = _strings(raw, "overrides", "", yf)
    entries, seen = [], {}
    for i, item in enumerate(raw["entries"]):
        key = f"entries[{i}]"
        if not isinstance(item, dict):
            raise ConfigError("expected a mapping with name, experiment, overrides, loaders and modes.", file=path,
                              line=yf.line(key), where=key)
        _check_keys(item, ENTRY_KEYS, key, yf)
        for need in ("name", "experiment", "loaders"):
            if not item.get(need):
                raise ConfigError(f"'{need}' is missing.", file=path, line=yf.line(key), where=key)
        name = str(item["name"])
        if name in seen:
            raise ConfigError(f"entry name '{name}' is used twice (first on line {seen[name]}).", file=path,
                              line=yf.line(f"{key}.name"), where=f"{key}.name")
        seen[name] = yf.line(f"{key}.name")
        overrides = [_substitute(o, values, f"{key}.overrides", yf) for o in (*common, *_strings(item, "overrides",
                                                                                                  key, yf))]
        entries.append(Entry(name=name, experiment=str(item["experiment"]), line=yf.line(key),
                             overrides=(*overrides, *every),
                             loaders=_choice(item, "loaders", LOADERS, key, yf),
                             modes=_choice(item, "modes", MODES, key, yf) if "modes" in item else ("e2e",)))
    numbers = {k: _count(raw, k, yf) for k in ("repeat", "warmup", "steps", "window") if k in raw}
    return Suite(name=str(raw.get("name") or path.stem), entries=tuple(entries), path=path, own_ceilings=True,
                 overrides=tuple(every), **numbers)


def _check_keys(raw: dict, allowed: tuple[str, ...], prefix: str, yf: YamlFile) -> None:
    for k in raw:
        if k not in allowed:
            key = f"{prefix}.{k}" if prefix else str(k)
            raise ConfigError(f"unknown key.{did_you_mean(str(k), allowed)} "
                              f"{'An entry' if prefix else 'A suite'} takes: {', '.join(allowed)}.",
                              file=yf.path, line=yf.line(key), where=key)


def _strings(raw: dict, key: str, prefix: str, yf: YamlFile) -> list[str]:
    value = raw.get(key) or []
    where = f"{prefix}.{key}" if prefix else key
    if not isinstance(value, list) or not all(isinstance(x, str) for x in value):
        raise ConfigError("expected a list of key.path=value strings.", file=yf.path, line=yf.line(where), where=where)
    return value


def _choice(raw: dict, key: str, valid: tuple[str, ...], prefix: str, yf: YamlFile) -> tuple[str, ...]:
    value = raw[key]
    where = f"{prefix}.{key}"
    names = value if isinstance(value, list) else [value]
    for n in names:
        if n not in valid:
            raise ConfigError(f"unknown {key[:-1]} '{n}'.{did_you_mean(str(n), valid)} {key.capitalize()}: "
                              f"{', '.join(valid)}.", file=yf.path, line=yf.line(where), where=where)
    return tuple(names)


def _count(raw: dict, key: str, yf: YamlFile) -> int:
    value = raw[key]
    if not isinstance(value, int) or isinstance(value, bool) or value < (1 if key != "warmup" else 0):
        raise ConfigError(f"expected a whole number of at least {1 if key != 'warmup' else 0}, got {value!r}.",
                          file=yf.path, line=yf.line(key), where=key)
    return value


def _vars(raw: dict, words: list[str], yf: YamlFile) -> dict[str, Any]:
    values = dict(raw.get("vars") or {})
    for w in words:
        if w.startswith("vars."):
            name, _, value = w[len("vars."):].partition("=")
            if name not in values:
                raise ConfigError(f"the suite has no variable '{name}'.{did_you_mean(name, values)} Its variables: "
                                  f"{', '.join(values) or 'none'}.", file="command line", where=w.split("=")[0])
            values[name] = value
    return values


def _substitute(text: str, values: dict[str, Any], where: str, yf: YamlFile) -> str:
    def one(m: re.Match) -> str:
        name = m[1]
        if name not in values:
            raise ConfigError(f"'{m[0]}' names no variable of this suite.{did_you_mean(name, values)} Its variables: "
                              f"{', '.join(values) or 'none'}.", file=yf.path, line=yf.line(where), where=where)
        if values[name] is None:
            raise ConfigError(f"'{m[0]}' is not set: give it on the command line, e.g. `runner bench --suite "
                              f"{yf.path} vars.{name}=DIR`.", file=yf.path, line=yf.line(f"vars.{name}"),
                              where=f"vars.{name}")
        return str(values[name])
    return _VAR.sub(one, text)
