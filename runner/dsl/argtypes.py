"""Literal argument values against the DALI argument types named in the schemas; DALI's enums and layout names
as the catalog keeps them (DALI itself is imported only to build a pipeline's values: enum_value)."""
from __future__ import annotations

import functools
from typing import Any

from runner.dsl.catalog import load_catalog

# DALI is imported where an enum value is built: checks read its names from the kept catalog (start-up).

ENUM_OF_TYPE = {"DATA_TYPE": "DALIDataType", "_DATA_TYPE_VEC": "DALIDataType",
                "IMAGE_TYPE": "DALIImageType", "INTERP_TYPE": "DALIInterpType"}
ENUM_WORDS = {"DALIDataType": "a data type", "DALIImageType": "an image type",
              "DALIInterpType": "an interpolation type"}
_INTS = {"INT8", "INT16", "INT32", "INT64", "UINT8", "UINT16", "UINT32", "UINT64"}
_FLOATS = {"FLOAT", "FLOAT16", "FLOAT64"}


@functools.cache
def enum_members() -> dict[str, tuple[str, ...]]:
    """Enum kind -> member names, as DALI defines them (FLOAT, RGB, INTERP_LINEAR, ...)."""
    out = {kind: tuple(n for n in members if not n.startswith("_")) for kind, members in load_catalog().enums.items()}
    # data types that tensors hold, most used first; DALIDataType also names argument kinds
    numeric = ("FLOAT", "UINT8", "FLOAT16", "INT32", "INT64", "FLOAT64", "INT8", "INT16", "UINT16", "UINT32",
               "UINT64", "BOOL")
    out["DALIDataType"] = tuple(n for n in numeric if n in out["DALIDataType"])
    return out


def enum_default_name(dali_type: str, default: str | None) -> str | None:
    """DALI prints enum defaults as numbers ("1"); show the member name (INTERP_LINEAR)."""
    kind = ENUM_OF_TYPE.get(dali_type)
    if kind is None or default is None or not default.lstrip("-").isdigit():
        return default
    return _member_of(kind, int(default)) or default


def layout_constants() -> dict[str, str]:
    """The layout names DALI's types module defines (types.NCHW == "CHW", types.NHWC, ...)."""
    return load_catalog().layouts


def enum_of_number(kind: str, number: Any) -> str | None:
    """The member name of an enum written as its number (interp_type=1), as DALI converts it; None if none."""
    if isinstance(number, bool) or not isinstance(number, int):
        return None
    return _member_of(kind, number)


def _member_of(kind: str, number: int) -> str | None:
    """The first member of enum `kind` with value `number` (its canonical name, as DALI's enum gives it)."""
    return next((name for name, value in load_catalog().enums[kind].items() if value == number), None)


def enum_kind_of(name: str) -> str | None:
    """Which enum a bare constant name belongs to, if any (first match)."""
    for kind, names in enum_members().items():
        if name in names:
            return kind
    return None


def enum_value(kind: str, name: str) -> Any:
    from nvidia.dali import types

    return getattr(getattr(types, kind), name)


def describe_type(dali_type: str) -> str:
    """A DALI argument type in words, with examples of valid values."""
    vec = dali_type.startswith("_") and dali_type.endswith("_VEC")
    base = dali_type[1:-4] if vec else dali_type
    if base in ENUM_OF_TYPE or dali_type in ENUM_OF_TYPE:
        kind = ENUM_OF_TYPE.get(dali_type) or ENUM_OF_TYPE[base]
        members = enum_members()[kind]
        names = ", ".join(members[:8]) + (", ..." if len(members) > 8 else "")
        words = f"{ENUM_WORDS[kind]} ({names})"
    elif base == "BOOL":
        words = "True or False"
    elif base in _INTS:
        words = ("a non-negative " if base.startswith("U") else "an ") + "integer"
    elif base in _FLOATS:
        words = "a number"
    elif base in ("STRING", "TENSOR_LAYOUT"):
        words = "a string" + (' such as "CHW"' if base == "TENSOR_LAYOUT" else "")
    else:
        words = base.lower() or "a value"
    return f"{words} or a list of them" if vec else words


def literal_problem(value: Any, dali_type: str) -> str | None:
    """Why `value` does not fit `dali_type`, or None when it does. Enums are checked elsewhere."""
    if not dali_type or dali_type in ENUM_OF_TYPE:
        return None
    vec = dali_type.startswith("_") and dali_type.endswith("_VEC")
    base = dali_type[1:-4] if vec else dali_type
    values = value if vec and isinstance(value, (list, tuple)) else [value]
    if not vec and isinstance(value, (list, tuple)):
        return f"takes a single value ({describe_type(dali_type)}), not a list"
    for v in values:
        if base in _INTS and isinstance(v, float) and not v.is_integer():
            return f"takes {describe_type(dali_type)}; got {v!r}, which DALI would truncate to {int(v)}"
        if not _fits(v, base):
            return f"takes {describe_type(dali_type)}; got {v!r}"
    return None


def _fits(value: Any, base: str) -> bool:
    """What DALI's own conversion (bool(), int(), float() of the value) takes without changing what was meant:
    numbers for bools (mirror=1), bools and whole floats for integers, any number for floats."""
    number = isinstance(value, (int, float))
    if base == "BOOL":
        return number
    if base in _INTS:
        whole = isinstance(value, int) or (isinstance(value, float) and value.is_integer())
        return whole and (value >= 0 or not base.startswith("U"))
    if base in _FLOATS:
        return number
    if base in ("STRING", "TENSOR_LAYOUT"):
        return isinstance(value, str)
    if base == "PYTHON_OBJECT":
        return False
    return True
