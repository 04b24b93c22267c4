"""Plain YAML data -> frozen dataclasses, checked field by field.

Errors name the full key path ("optimizer.lr"), the bad value, what is valid and the closest
key; `Locator` turns the key path into a file and line.
"""
from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping
from typing import Any, Literal, Union

from runner.errors import ConfigError, Locator, did_you_mean, list_names


def bounded(default: Any = dataclasses.MISSING, *, gt: float | None = None, ge: float | None = None,
            lt: float | None = None, le: float | None = None, **kwargs) -> Any:
    """A dataclass field whose numeric value must lie in a range."""
    meta = {k: v for k, v in dict(gt=gt, ge=ge, lt=lt, le=le).items() if v is not None}
    if isinstance(default, (list, dict)):
        return dataclasses.field(default_factory=lambda: type(default)(default), metadata=meta, **kwargs)
    return dataclasses.field(default=default, metadata=meta, **kwargs)


def describe(tp: Any) -> str:
    """A type as a user reads it: 'an integer', 'one of: fp32, bf16', ..."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is int:
        return "an integer"
    if tp is float:
        return "a number"
    if tp is bool:
        return "true or false"
    if tp is str:
        return "a string"
    if tp is Any:
        return "any value"
    if origin is Literal:
        return "one of: " + ", ".join(str(a) for a in args)
    if origin in (Union, types.UnionType):
        return " or ".join("null" if a is type(None) else describe(a) for a in args)
    if origin in (list, tuple):
        return f"a list of {describe(args[0]).removeprefix('an ').removeprefix('a ')}s" if args else "a list"
    if origin is dict:
        return "a mapping"
    if dataclasses.is_dataclass(tp):
        return "a mapping with keys " + list_names(f.name for f in dataclasses.fields(tp))
    return getattr(tp, "__name__", str(tp))


def _fail(key: str, message: str, locate: Locator) -> ConfigError:
    file, line = locate(key)
    return ConfigError(message, file=file, line=line, where=key)


def _show(value: Any) -> str:
    """A value as it would be written in YAML-ish form: null, 'text', [1, 2]."""
    if value is None:
        return "null"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_show(v) for v in value) + "]"
    return repr(value)


def convert(tp: Any, value: Any, key: str, locate: Locator) -> Any:
    """`value` checked against `tp` (and converted to dataclasses / tuples)."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if dataclasses.is_dataclass(tp):
        return build(tp, value, key, locate)
    if tp is Any:
        return value
    if origin in (Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        errors = []
        for option in args:
            if option is type(None):
                continue
            try:
                return convert(option, value, key, locate)
            except ConfigError as e:
                errors.append(e)
        if len(errors) == 1:
            raise errors[0]
        raise _fail(key, f"{_show(value)} is not valid; expected {describe(tp)}.", locate)
    if origin is Literal:
        if value in args and not isinstance(value, bool):
            return value
        hint = did_you_mean(str(value), [str(a) for a in args])
        raise _fail(key, f"{_show(value)} is not valid; expected {describe(tp)}.{hint}", locate)
    if origin in (list, tuple):
        if not isinstance(value, (list, tuple)):
            raise _fail(key, f"{_show(value)} is not valid; expected {describe(tp)}.", locate)
        if origin is tuple and args and args[-1] is not Ellipsis:
            if len(value) != len(args):
                raise _fail(key, f"{_show(value)} is not valid; expected a list of {len(args)} values.", locate)
            return tuple(convert(a, v, f"{key}[{i}]", locate) for i, (a, v) in enumerate(zip(args, value)))
        item = args[0] if args else Any
        items = [convert(item, v, f"{key}[{i}]", locate) for i, v in enumerate(value)]
        return tuple(items) if origin is tuple else items
    if origin is dict:
        if not isinstance(value, Mapping):
            raise _fail(key, f"{_show(value)} is not valid; expected a mapping.", locate)
        item = args[1] if len(args) == 2 else Any
        if item is not Any:
            for k, v in value.items():
                if isinstance(v, Mapping):  # `tags.a.b=x` on the command line nests; the key was meant whole
                    raise _fail(f"{key}.{k}", f"{_show(v)} is not valid; expected {describe(item)}. A key with dots "
                                              f"is written in brackets: {key}[{k}.{next(iter(v), 'x')}]=VALUE.", locate)
        return {k: convert(item, v, f"{key}.{k}", locate) for k, v in value.items()}
    return _scalar(tp, value, key, locate)


def _scalar(tp: Any, value: Any, key: str, locate: Locator) -> Any:
    ok = {
        bool: isinstance(value, bool),
        int: isinstance(value, int) and not isinstance(value, bool),
        float: isinstance(value, (int, float)) and not isinstance(value, bool),
        str: isinstance(value, str),
    }.get(tp)
    if ok is None:
        raise TypeError(f"typed.convert does not handle {tp!r} (at {key})")
    if not ok and tp is str and isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)  # YAML reads `rdzv_id: 12345` or `name: 2024` as a number; the user meant the text
    if not ok:
        raise _fail(key, f"{_show(value)} is not valid; expected {describe(tp)}.", locate)
    return float(value) if tp is float else value


def _check_bounds(field: dataclasses.Field, value: Any, key: str, locate: Locator) -> None:
    meta = field.metadata
    if meta and isinstance(value, tuple):  # a pair such as optimizer.betas: each item in the range
        for i, item in enumerate(value):
            _check_bounds(field, item, f"{key}[{i}]", locate)
        return
    if not meta or not isinstance(value, (int, float)) or isinstance(value, bool):
        return
    rules = {"gt": (lambda v, b: v > b, "greater than"), "ge": (lambda v, b: v >= b, "at least"),
             "lt": (lambda v, b: v < b, "less than"), "le": (lambda v, b: v <= b, "at most")}
    for name, bound in meta.items():
        test, words = rules[name]
        if not test(value, bound):
            limits = " and ".join(f"{rules[n][1]} {b}" for n, b in meta.items())
            raise _fail(key, f"{value} is out of range; it must be {limits}.", locate)


def build(cls: type, data: Any, key: str, locate: Locator) -> Any:
    """An instance of dataclass `cls` from a mapping; unknown and missing keys are errors."""
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise _fail(key or "(top level)", f"{_show(data)} is not valid; expected {describe(cls)}.", locate)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    hints = typing.get_type_hints(cls)
    for name in data:
        if name not in fields:
            path = f"{key}.{name}" if key else str(name)
            raise _fail(path, f"unknown key.{did_you_mean(str(name), fields)} "
                              f"Valid keys{' in ' + key if key else ''}: {list_names(fields, 40)}.", locate)
    values = {}
    for name, field in fields.items():
        path = f"{key}.{name}" if key else name
        if name not in data:
            if field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
                raise _fail(path, f"missing required key ({describe(hints[name])}).", locate)
            continue
        values[name] = convert(hints[name], data[name], path, locate)
        _check_bounds(field, values[name], path, locate)
    return cls(**values)
