"""A checked graph -> a standalone Python module of `fn.*` calls (what `runner compile` prints).

The module runs on its own (`python file.py` builds it and prints one batch's shapes) and builds
the very pipeline `dsl.compile` builds: same calls, same order, same arguments.
"""
from __future__ import annotations

import json
import keyword
from typing import Any

from runner.dsl.catalog import GPU_COPY_OP
from runner.dsl.checked import Arg, CheckedGraph, Enum, ExprNode, Lit, OpNode, Stream, Typed
from runner.dsl.compile import PipelineArgs
from runner.dsl.graph import (
    ATOM,
    PRECEDENCE,
    Arith,
    Call,
    Const,
    Gpu,
    Name,
    Param,
    Seq,
    TypedConst,
    Unary,
    Value,
    needs_parens,
)
from runner.errors import display_path

RESERVED = {"fn", "math", "types", "pipeline_def", "PIPELINE_ARGS", "auto_augment", "rand_augment", "trivial_augment",
            "augment"}
_MAX_LINE = 100


def _literal(value: Any) -> str:
    if isinstance(value, Enum):
        return f"types.{value.name}"
    if isinstance(value, Typed):
        return f"types.Constant({value.value!r}{f', dtype=types.{value.dtype}' if value.dtype else ''})"
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, (list, tuple)):
        inner = ", ".join(_literal(v) for v in value)
        return f"({inner}{',' if len(value) == 1 else ''})" if isinstance(value, tuple) else f"[{inner}]"
    return repr(value)


class _Emitter:
    def __init__(self, graph: CheckedGraph):
        self.graph = graph
        streams = {t for s in graph.graph.steps for t in s.targets}
        taken = streams | RESERVED
        self.params = {name: (name if name not in taken and not keyword.iskeyword(name) else f"param_{name}")
                       for name in graph.graph.params}
        self.used_params: set[str] = set()
        self.uses_math = False

    def source(self, value: Value) -> str:
        if isinstance(value, Const):
            return _literal(value.value)
        if isinstance(value, Param):
            self.used_params.add(value.name)
            return self.params[value.name]
        if isinstance(value, Name):  # a literal context: the checker resolved it to an enum
            return f"types.{value.id}"
        if isinstance(value, Seq):
            inner = ", ".join(self.source(v) for v in value.items)
            return f"({inner}{',' if len(value.items) == 1 else ''})" if value.tuple_ else f"[{inner}]"
        if isinstance(value, Arith):
            return f"{self._operand(value.left)} {value.op} {self._operand(value.right)}"
        if isinstance(value, Unary):
            return f"{value.op}{self._operand(value.operand)}"
        if isinstance(value, TypedConst):
            number = self.source(value.value)
            if value.method:
                return f"types.Constant({number}).{value.method}()"
            return f"types.Constant({number}{f', dtype=types.{value.dtype}' if value.dtype else ''})"
        raise TypeError(value)

    def _operand(self, value: Value) -> str:
        text = self.source(value)
        return f"({text})" if isinstance(value, Arith) else text

    def arg(self, arg: Arg) -> str:
        if isinstance(arg, Stream):
            return f"{arg.name}.gpu()" if arg.gpu else arg.name
        if isinstance(arg, Enum):
            return f"types.{arg.name}"
        if isinstance(arg, Lit):
            if arg.symbol:
                return arg.symbol
            if arg.source is not None and not isinstance(arg.source, (Call, Gpu)):
                return self.source(arg.source)
            return _literal(arg.value)
        return self.call(arg)

    def expression(self, node: ExprNode) -> str:
        """Arithmetic as Python writes it, with the parentheses its precedence needs."""
        if node.op.startswith("math."):
            self.uses_math = True
            return f"{node.op}({', '.join(self.arg(a) for a in node.operands)})"
        if len(node.operands) == 1:
            return f"{node.op}{self._wrapped(node.operands[0], 'unary', False)}"
        left, right = node.operands
        return f"{self._wrapped(left, node.op, False)} {node.op} {self._wrapped(right, node.op, True)}"

    def _wrapped(self, arg: Arg, parent: str, right: bool) -> str:
        text = self.arg(arg)
        return f"({text})" if needs_parens(self._precedence(arg, text), parent, right) else text

    @staticmethod
    def _precedence(arg: Arg, text: str) -> int:
        if isinstance(arg, ExprNode) and not arg.op.startswith("math."):
            return PRECEDENCE["unary"] if len(arg.operands) == 1 else PRECEDENCE[arg.op]
        if isinstance(arg, Lit) and isinstance(arg.source, Arith):
            return PRECEDENCE[arg.source.op]
        return PRECEDENCE["unary"] if text.startswith(("-", "+", "~")) else ATOM

    def call(self, node: OpNode | ExprNode, written_device: bool = False, indent: int = 4) -> str:
        if isinstance(node, ExprNode):
            return self.expression(node)
        if node.op is GPU_COPY_OP:
            source = self.arg(node.inputs[0])
            return f"{source}.gpu()" if node.device == "gpu" else source
        if node.op.python:
            func = ".".join(node.op.schema.split(".")[-2:])  # rand_augment.rand_augment, augment.random_erasing
        else:
            func = f"fn.{node.op.name}"
        parts = [self.arg(a) for a in node.inputs]
        inferred = "gpu" if any(self._gpu(a) for a in node.inputs) and "gpu" in node.op.backends else "cpu"
        if not node.op.python and (written_device or node.device != inferred):
            parts.append(f'device="{node.device}"')
        parts += [f"{k}={self.arg(v)}" for k, v in node.kwargs]
        one_line = f"{func}({', '.join(parts)})"
        if len(one_line) + indent <= _MAX_LINE:
            return one_line
        pad = " " * (indent + 4)
        return f"{func}(\n" + "".join(f"{pad}{p},\n" for p in parts) + " " * indent + ")"

    def _gpu(self, arg: Arg) -> bool:
        if isinstance(arg, Stream):
            if arg.gpu:
                return True
            node = next(s.node for s in reversed(self.graph.steps) if arg.name in s.step.targets)
            return node.device in ("gpu", "mixed")
        return isinstance(arg, (OpNode, ExprNode)) and arg.device in ("gpu", "mixed")

    def body(self) -> list[str]:
        lines = []
        for checked in self.graph.steps:
            step, node = checked.step, checked.node
            written = isinstance(step.call, Call) and step.call.kwarg("device") is not None
            lhs = ", ".join(step.targets)
            injected = getattr(node, "injected", ())
            comment = f"  # runner: {', '.join(injected)}" if injected else ""
            if step.index in self.graph.moved_to_cpu:
                comment += ("  # " if not comment else "; ") + "moved to the CPU (no GPU)"
            lines.append(f"    {lhs} = {self.call(node, written)}{comment}")
        outs = ", ".join(self.arg(o) for o in self.graph.outputs)
        lines.append(f"    return {outs}")
        return lines


def emit_source(graph: CheckedGraph, args: PipelineArgs, *, origin: str) -> str:
    """The pipeline as a Python module; `origin` says where it came from (experiment and overrides)."""
    e = _Emitter(graph)
    body = e.body()
    role = graph.graph.role
    func = f"{role}_pipeline"
    signature = [f"{e.params[p]}={_literal(graph.graph.params[p])}" for p in graph.graph.params
                 if p in e.used_params]
    ops = [n for s in graph.steps for n in [s.node, *_nested(s.node)] if isinstance(n, OpNode)]
    if any(isinstance(v, Lit) and v.symbol for s in graph.steps if isinstance(s.node, OpNode) for _, v in s.node.kwargs):
        signature += ["shard_id=0", "num_shards=1"]
    imports = [f"from nvidia.dali import fn, {'math, ' if e.uses_math else ''}pipeline_def, types"]
    imports += _python_imports([n.op for n in ops if n.op.python])
    decorator = "@pipeline_def(enable_conditionals=True)" if graph.conditionals else "@pipeline_def"
    placement = "GPU" if graph.target == "gpu" else "CPU only (no GPU: mixed/gpu steps moved to the CPU)"
    shard_call = f"shard_id={graph.symbols['shard_id']}, num_shards={graph.symbols['num_shards']}" \
        if "shard_id=0" in signature else ""
    run_args = ", ".join(f"{k}={v!r}" for k, v in args.as_dict().items())
    return "\n".join([
        f'"""The {role} pipeline of {origin}, compiled by runner.',
        "",
        f"Graph: {display_path(graph.graph.file)} ({graph.graph.name}). Placement: {placement}.",
        "Run it with `python THIS_FILE.py`: it builds the pipeline and prints one batch's shapes.",
        '"""',
        *imports,
        "",
        "",
        decorator,
        f"def {func}({', '.join(signature)}):",
        *body,
        "",
        "",
        f"PIPELINE_ARGS = dict({run_args})",
        "",
        "",
        'if __name__ == "__main__":',
        f"    pipe = {func}({shard_call + ', ' if shard_call else ''}**PIPELINE_ARGS)",
        "    pipe.build()",
        "    for i, out in enumerate(pipe.run()):",
        '        print(f"output {i}: {len(out)} samples, first shape {tuple(out[0].shape())}, {out.dtype}")',
        "",
    ])


def _python_imports(ops: list) -> list[str]:
    """`from nvidia.dali.auto_aug import rand_augment`, `from runner import augment`: the modules Python steps call."""
    modules: dict[str, set[str]] = {}
    for op in ops:
        package, module, _ = op.schema.rsplit(".", 2)
        modules.setdefault(package, set()).add(module)
    return [f"from {package} import {', '.join(sorted(names))}" for package, names in sorted(modules.items())]


def _nested(node: OpNode | ExprNode) -> list[OpNode | ExprNode]:
    out = []
    children = node.operands if isinstance(node, ExprNode) else [*node.inputs, *(v for _, v in node.kwargs)]
    for a in children:
        if isinstance(a, (OpNode, ExprNode)):
            out += [a, *_nested(a)]
    return out
