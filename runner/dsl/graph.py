"""The pipeline graph as parsed from the DSL, before it is checked against DALI's schemas.

A step is `targets = op(inputs..., key=value...)`; values are the small closed set below, so
no user text is ever evaluated.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Union


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
    items: tuple["Value", ...]
    tuple_: bool = False


@dataclass(frozen=True)
class Arith:
    """`a * b` and friends on numbers and parameters, folded once parameters are known."""
    op: str
    left: "Value"
    right: "Value"


@dataclass(frozen=True)
class Call:
    """An operator call, by its `fn` name: `random.coin_flip(probability=0.5)`."""
    op: str
    inputs: tuple["Value", ...]
    kwargs: tuple[tuple[str, "Value"], ...]

    def kwarg(self, name: str) -> "Value | None":
        return next((v for k, v in self.kwargs if k == name), None)


Value = Union[Name, Gpu, Param, Const, Seq, Arith, Call]

# `labels = labels.gpu()`: a step that only copies a stream to the GPU (no DSL name can start with a dot)
GPU_COPY = ".gpu"


@dataclass(frozen=True)
class Step:
    index: int                        # 1-based, as users count
    text: str                         # the step as written
    line: int | None                  # line in `Graph.file`
    targets: tuple[str, ...]
    call: Call

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
