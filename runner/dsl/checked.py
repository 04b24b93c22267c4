"""The checked graph: every name resolved, every operator placed on a device.

`dsl.compile` turns it into DALI calls and `dsl.emit` into Python source; both read only this.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from runner.dsl.catalog import OpInfo
from runner.dsl.graph import Graph, Step, Value


@dataclass(frozen=True)
class Stream:
    name: str
    gpu: bool = False              # written `name.gpu()` (and kept: the target has a GPU)


@dataclass(frozen=True)
class Enum:
    kind: str                      # DALIDataType | DALIImageType | DALIInterpType
    name: str


@dataclass(frozen=True)
class Lit:
    value: Any                     # plain Python value, parameters substituted, arithmetic folded
    source: Value | None = None    # as written, for emitted code (None: injected by the runner)
    symbol: str | None = None      # emitted as this identifier (a function parameter) instead


@dataclass(frozen=True)
class OpNode:
    op: OpInfo
    device: str
    inputs: tuple[Arg, ...]
    kwargs: tuple[tuple[str, Arg], ...]
    injected: tuple[str, ...] = ()  # kwargs the runner added


@dataclass(frozen=True)
class Typed:
    """`types.Constant(4).uint16()`: a number DALI's arithmetic treats as `dtype`."""
    value: Any
    dtype: str                     # DALIDataType name; "" for the Python type's own (int32, float32, bool)


@dataclass(frozen=True)
class ExprNode:
    """Arithmetic on streams, built by DALI from Python's operators and nvidia.dali.math."""
    op: str                        # "+", ">", "^", ... (two operands), "-", "~" (one), "math.clamp"
    operands: tuple[Arg, ...]    # streams, operator or arithmetic results, Lit constants
    device: str                    # gpu when any operand is on the GPU (DALI copies the others there), else cpu


Arg = Stream | Enum | Lit | OpNode | ExprNode


@dataclass(frozen=True)
class CheckedStep:
    step: Step
    node: OpNode | ExprNode


@dataclass(frozen=True)
class CheckedGraph:
    graph: Graph
    steps: tuple[CheckedStep, ...]
    outputs: tuple[Stream, ...]
    target: str                              # cpu | gpu
    conditionals: bool                       # auto_aug policies need DALI conditionals
    reader_name: str | None                  # the reader that defines an epoch
    moved_to_cpu: tuple[int, ...] = ()       # steps whose device the CPU target changed
    symbols: dict[str, Any] = field(default_factory=dict)  # emitted function parameters -> values
    renamed: tuple[tuple[str, str], ...] = ()  # (deprecated name as written, the operator it compiles to)
