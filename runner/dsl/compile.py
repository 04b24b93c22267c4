"""A checked graph -> a real DALI pipeline: the same `fn.*` calls, in the same order, so the same
seed gives the same random draws as the hand-written pipeline."""
from __future__ import annotations

import operator
import warnings
from dataclasses import dataclass
from typing import Any

from runner.dsl import argtypes
from runner.dsl.catalog import GPU_COPY_OP, load_catalog
from runner.dsl.checked import Arg, CheckedGraph, Enum, ExprNode, Lit, OpNode, Stream, Typed
from runner.errors import ConfigError

# DALI is imported where a pipeline is built: `runner validate` and `runner compile` read this module without
# it (start-up).

# Python's operators on DALI DataNodes build DALI's arithmetic, exactly as in a hand-written pipeline
BINARY = {"+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv, "//": operator.floordiv,
          "%": operator.mod, "**": operator.pow, "&": operator.and_, "|": operator.or_, "^": operator.xor,
          "<<": operator.lshift, ">>": operator.rshift, "==": operator.eq, "!=": operator.ne, "<": operator.lt,
          "<=": operator.le, ">": operator.gt, ">=": operator.ge}
UNARY = {"-": operator.neg, "+": operator.pos, "~": operator.invert}


@dataclass(frozen=True, kw_only=True)
class PipelineArgs:
    """What `pipeline_def` needs besides the graph; all of it comes from the experiment."""
    batch_size: int
    num_threads: int
    device_id: int | None          # None: CPU-only pipeline
    seed: int
    prefetch_queue_depth: int = 2
    enable_checkpointing: bool = False
    checkpoint: str | None = None  # a saved pipeline state to resume from (readers and RNGs)
    set_affinity: bool = False     # pin DALI's CPU threads to $DALI_AFFINITY_MASK (see runner.loaders.affinity)

    def as_dict(self) -> dict[str, Any]:
        out = dict(batch_size=self.batch_size, num_threads=self.num_threads, device_id=self.device_id,
                   seed=self.seed, prefetch_queue_depth=self.prefetch_queue_depth,
                   enable_checkpointing=self.enable_checkpointing)
        if self.checkpoint is not None:
            out["checkpoint"] = self.checkpoint
        if self.set_affinity:
            out["set_affinity"] = True
        return out


def python_value(value: Any) -> Any:
    """Lit values with Enum placeholders -> what DALI's Python API takes."""
    if isinstance(value, Enum):
        return argtypes.enum_value(value.kind, value.name)
    if isinstance(value, Typed):
        from nvidia.dali import types
        return types.Constant(value.value, dtype=argtypes.enum_value("DALIDataType", value.dtype) if value.dtype
                              else None)
    if isinstance(value, (list, tuple)):
        return [python_value(v) for v in value]
    return value


class _Builder:
    def __init__(self, graph: CheckedGraph):
        self.graph = graph
        self.catalog = load_catalog()
        self.env: dict[str, Any] = {}

    def value(self, arg: Arg) -> Any:
        if isinstance(arg, Stream):
            node = self.env[arg.name]
            return node.gpu() if arg.gpu else node
        if isinstance(arg, Enum):
            return argtypes.enum_value(arg.kind, arg.name)
        if isinstance(arg, Lit):
            return python_value(arg.value)
        return self.call(arg)

    def expression(self, node: ExprNode) -> Any:
        operands = [self.value(a) for a in node.operands]
        if node.op.startswith("math."):
            from nvidia.dali import math
            return getattr(math, node.op.removeprefix("math."))(*operands)
        if len(operands) == 1:
            return UNARY[node.op](operands[0])
        return BINARY[node.op](*operands)

    def call(self, node: OpNode | ExprNode) -> Any:
        if isinstance(node, ExprNode):
            return self.expression(node)
        if node.op is GPU_COPY_OP:
            source = self.value(node.inputs[0])
            return source.gpu() if node.device == "gpu" else source
        func = self.catalog.fn(node.op)
        kwargs = {k: self.value(v) for k, v in node.kwargs}
        if not node.op.python:  # auto_aug policies follow their input's device
            kwargs["device"] = node.device
        return func(*(self.value(a) for a in node.inputs), **kwargs)

    def __call__(self) -> tuple[Any, ...]:
        for checked in self.graph.steps:
            step = checked.step
            try:
                result = self.call(checked.node)
            except Exception as e:  # DALI's own argument checks, with its message
                raise ConfigError(f"DALI rejected this step: {dali_reason(e)}", file=self.graph.graph.file,
                                  line=step.line, where=step.label()) from None
            outs = list(result) if isinstance(result, (list, tuple)) else [result]
            if len(outs) != len(step.targets):
                what = checked.node.op.name if isinstance(checked.node, OpNode) else "arithmetic"
                raise ConfigError(f"{what} returns {len(outs)} stream(s), but {len(step.targets)} "
                                  f"name(s) are assigned; write {len(outs)} names on the left.",
                                  file=self.graph.graph.file, line=step.line, where=step.label())
            self.env.update(zip(step.targets, outs))
        return tuple(self.value(out) for out in self.graph.outputs)


def dali_reason(e: Exception, limit: int = 3) -> str:
    """DALI's own words, without the Python traceback it wraps them in."""
    text = str(e)
    if "encountered:" in text:  # "Error in CPU operator ... traceback ... encountered: <reason> C++ context: ..."
        origin = text.split("\n", 2)[1].strip() if text.count("\n") > 1 else ""
        text = (origin + " " if origin.startswith("Error in") else "") + text.split("encountered:", 1)[1]
        text = text.split("C++ context:", 1)[0]
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and "no longer valid" not in ln]
    return " ".join(lines[:limit]) or type(e).__name__


def build_pipeline(graph: CheckedGraph, args: PipelineArgs):
    """The DALI Pipeline for `graph` (built: DALI's own checks have run)."""
    from nvidia.dali import pipeline_def

    def define():
        return _Builder(graph)()

    define.__name__ = f"{graph.graph.role}_pipeline"
    # DALI's own auto_aug policies still call deprecated aliases (fn.experimental.equalize)
    warnings.filterwarnings("ignore", message=r".*fn\.experimental\.\w+` is now deprecated", category=DeprecationWarning)
    kwargs = args.as_dict()
    if graph.conditionals:
        kwargs["enable_conditionals"] = True
    pipe = pipeline_def(define, **{k: v for k, v in kwargs.items() if k == "enable_conditionals"})(
        **{k: v for k, v in kwargs.items() if k != "enable_conditionals"})
    try:
        pipe.build()
    except ConfigError:
        raise
    except Exception as e:
        raise ConfigError(f"DALI could not build the {graph.graph.role} pipeline: {dali_reason(e, 6)}",
                          file=graph.graph.file) from None
    return pipe
