"""The pipeline graph as parsed from the DSL, before it is checked against DALI's schemas.

A step is `targets = op(inputs..., key=value...)`; values are the small closed set below, so
no user text is ever evaluated.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Name:
    """A bare name: a stream defined by an earlier step, or a DALI enum constant (RGB, FLOAT)."""
    id: str


@dataclass(frozen=True)
class Gpu:
    """`stream.gpu()`: the stream copied to the GPU."""
    stream: Name


@dataclass(frozen=True)
class Param:
    """`$name`: a pipeline parameter."""
    name: str


@dataclass(frozen=True)
class Const:
    """A literal: number, string, bool or None."""
    value: Any


@dataclass(frozen=True)
class Seq:
    """A list or tuple literal: `[0.485 * 255, ...]`, `(224, 224)`."""
    items: tuple[Value, ...]
    tuple_: bool = False


@dataclass(frozen=True)
class Arith:
    """`a * b`, `a > b`, `a ^ b` as Python writes them: folded when both sides are constants, else DALI's
    arithmetic on streams (`images / 255`, `0.4 * cats + 0.6 * dogs`, `mask = images > 128`)."""
    op: str
    left: Value
    right: Value


@dataclass(frozen=True)
class Unary:
    """`-x`, `+x`, `~x`."""
    op: str
    operand: Value


@dataclass(frozen=True)
class MathCall:
    """A function of `nvidia.dali.math` on streams: `math.clamp(images, 0, 255)`, `dali.math.sqrt(x)`."""
    func: str                                  # the function's name in nvidia.dali.math: "clamp"
    args: tuple[Value, ...]
    kwargs: tuple[tuple[str, Value], ...] = ()


@dataclass(frozen=True)
class TypedConst:
    """`types.Constant(4).uint16()`, `Constant(15, dtype=types.FLOAT)`: a number of a chosen DALI type."""
    value: Value
    dtype: str                                 # DALIDataType name: UINT16
    method: str | None = None                  # written as `.uint16()` (else as dtype=)


@dataclass(frozen=True)
class Call:
    """An operator call, by its `fn` name: `random.coin_flip(probability=0.5)`."""
    op: str
    inputs: tuple[Value, ...]
    kwargs: tuple[tuple[str, Value], ...]

    def kwarg(self, name: str) -> Value | None:
        return next((v for k, v in self.kwargs if k == name), None)


Value = Name | Gpu | Param | Const | Seq | Arith | Unary | MathCall | TypedConst | Call
EXPRESSIONS = (Arith, Unary, MathCall)  # what may compute a stream besides an operator call

# Python's operator precedence, for printing expressions with the parentheses they need
PRECEDENCE = {"<": 1, "<=": 1, ">": 1, ">=": 1, "==": 1, "!=": 1, "|": 2, "^": 3, "&": 4, "<<": 5, ">>": 5,
              "+": 6, "-": 6, "*": 7, "/": 7, "//": 7, "%": 7, "unary": 8, "**": 9}
ATOM = 10

# `labels = labels.gpu()`: a step that only copies a stream to the GPU (no DSL name can start with a dot)
GPU_COPY = ".gpu"


@dataclass(frozen=True)
class Step:
    index: int                        # 1-based, as users count
    text: str                         # the step as written
    line: int | None                  # line in `Graph.file`
    targets: tuple[str, ...]
    call: Call | Arith | Unary | MathCall    # an operator call, or arithmetic on streams

    def label(self) -> str:
        text = " ".join(self.text.split())
        return f"step {self.index} ({text if len(text) <= 70 else text[:67] + '...'})"


@dataclass(frozen=True)
class Graph:
    name: str
    role: str
    file: Path | str
    steps: tuple[Step, ...]
    outputs: tuple[Name | Gpu, ...]
    outputs_line: int | None
    params: dict[str, Any]


def needs_parens(child: int, parent: str, right: bool) -> bool:
    """Whether an operand of precedence `child` needs parentheses as the left or right operand of `parent`."""
    if parent == "unary":
        return child < PRECEDENCE["unary"]
    p = PRECEDENCE[parent]
    if parent == "**":  # right-associative, and binds tighter than a unary minus on its left
        return child < PRECEDENCE["unary"] if right else child <= p
    return child < p or (right and child == p) or (p == 1 and child == 1)
