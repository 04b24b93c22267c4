"""Check a parsed graph against DALI's schemas and resolve it for one target (cpu or gpu).

Errors are one paragraph: file, line, step (number and text), what is wrong, what is valid.
"""
from __future__ import annotations

import operator
from typing import Any

from runner.dsl import argtypes
from runner.dsl.catalog import (
    GPU_COPY_OP,
    RUNNER_OWNED,
    Catalog,
    OpInfo,
    describe_arg_names,
    load_catalog,
    math_functions,
)
from runner.dsl.checked import Arg, CheckedGraph, CheckedStep, Enum, ExprNode, Lit, OpNode, Stream, Typed
from runner.dsl.graph import (
    EXPRESSIONS,
    GPU_COPY,
    Arith,
    Call,
    Const,
    Gpu,
    Graph,
    MathCall,
    Name,
    Param,
    Seq,
    Step,
    TypedConst,
    Unary,
    Value,
)
from runner.errors import ConfigError, did_you_mean, list_names

DEVICES = ("cpu", "gpu", "mixed")
_FOLD = {"+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv,
         "//": operator.floordiv, "%": operator.mod, "**": operator.pow, "&": operator.and_, "|": operator.or_,
         "^": operator.xor, "<<": operator.lshift, ">>": operator.rshift, "==": operator.eq, "!=": operator.ne,
         "<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge}
_FOLD_UNARY = {"-": operator.neg, "+": operator.pos, "~": operator.invert}
OPERANDS = "streams, operator calls, numbers (True and False too), lists of numbers and types.Constant"


def _number(x: Any) -> bool:
    return isinstance(x, (bool, int, float))


# readers of `runner data shard`'s formats: (the argument naming the shards, the one naming their indexes)
SHARD_READERS = {"readers.webdataset": ("paths", "index_paths"), "readers.tfrecord": ("path", "index_path")}


class _Checker:
    def __init__(self, graph: Graph, catalog: Catalog, target: str, rank: int, world: int, seed: int,
                 file_list: str | None = None, own_order: bool = False,
                 shards: tuple[tuple[str, ...], tuple[str, ...]] | None = None):
        self.g, self.cat, self.target, self.file_list = graph, catalog, target, file_list
        self.own_order, self.shards = own_order, shards
        self.rank, self.world, self.seed = rank, world, seed
        self.live: dict[str, tuple[int, bool]] = {}  # name -> (defining step, on GPU)
        self.used: set[tuple[str, int]] = set()
        self.defs: list[tuple[str, int]] = []
        self.moved: list[int] = []
        self.readers: list[str] = []
        self.renamed: list[tuple[str, str]] = []  # DALI's deprecated names written, and what they stand for
        self.conditionals = False
        self.step: Step | None = None

    # -- errors -------------------------------------------------------------------------------
    def fail(self, message: str, step: Step | None = None) -> ConfigError:
        step = step or self.step
        if step is None:
            return ConfigError(message, file=self.g.file, line=self.g.outputs_line, where="outputs")
        return ConfigError(message, file=self.g.file, line=step.line, where=step.label())

    # -- graph --------------------------------------------------------------------------------
    def run(self) -> CheckedGraph:
        checked = []
        if not self.g.steps:
            raise ConfigError("the pipeline has no steps; the first step is a reader, for example "
                              "`jpegs, labels = readers.file(file_root=$data_root)`.", file=self.g.file,
                              where="steps" if self.g.name != "inline" else f"pipelines.{self.g.role}.steps")
        for step in self.g.steps:
            self.step = step
            self._distinct_targets(step)
            node = self._rhs(step)
            out_gpu = node.device in ("gpu", "mixed")
            for name in step.targets:
                self._assign(name, step, out_gpu)
            checked.append(CheckedStep(step, node))
        self.step = None
        outputs = self._outputs()
        self._unused()
        return CheckedGraph(graph=self.g, steps=tuple(checked), outputs=outputs, target=self.target,
                            conditionals=self.conditionals,
                            reader_name=self.readers[0] if self.readers else None,
                            moved_to_cpu=tuple(self.moved), renamed=tuple(dict.fromkeys(self.renamed)),
                            symbols={"shard_id": self.rank, "num_shards": self.world})

    def _distinct_targets(self, step: Step) -> None:
        """`a, a = readers.file(...)`: two outputs under one name, the first lost at once."""
        seen = set()
        for name in step.targets:
            if name in seen and name != "_":
                raise self.fail(f"'{name}' names two outputs of this step; give each output its own name, for example "
                                f"`jpegs, labels = readers.file(...)`, or write _ for an output to discard.")
            seen.add(name)

    def _assign(self, name: str, step: Step, gpu: bool) -> None:
        if name in self.live:
            prev = self.live[name][0]
            if (name, prev) not in self.used and not name.startswith("_"):
                raise self.fail(f"'{name}' is assigned again before its value from step {prev} was used; "
                                f"use it first, give one of them another name, or remove step {prev}.")
        self.live[name] = (step.index, gpu)
        self.defs.append((name, step.index))

    def _outputs(self) -> tuple[Stream, ...]:
        if not self.g.outputs:
            raise self.fail("the pipeline has no outputs; list the streams it returns, for example "
                            "`outputs: [images, labels]`.")
        outs = []
        for out in self.g.outputs:
            name = out.stream.id if isinstance(out, Gpu) else out.id
            if name not in self.live:
                raise self.fail(f"output '{name}' is not a stream of this pipeline.{did_you_mean(name, self.live)} "
                                f"Streams: {list_names(self.live) or 'none'}.")
            self.used.add((name, self.live[name][0]))
            outs.append(Stream(name, gpu=isinstance(out, Gpu) and self.target == "gpu"))
        return tuple(outs)

    def _unused(self) -> None:
        for name, index in self.defs:
            if (name, index) not in self.used and not name.startswith("_"):
                step = self.g.steps[index - 1]
                raise self.fail(f"stream '{name}' is never used; use it in a later step, list it in outputs, "
                                f"or name it _{name} to discard it.", step)

    def _rhs(self, step: Step) -> OpNode | ExprNode:
        if isinstance(step.call, Call):
            return self.op_call(step.call)
        if not self._has_stream(step.call):
            self.literal(step.call)  # an undefined stream or a bad constant says so first
            raise self.fail("the right-hand side is a constant; a step computes a stream: an operator call, or "
                            "arithmetic on a stream such as `images = images / 255`.")
        if len(step.targets) != 1:
            raise self.fail(f"arithmetic gives one stream, but {len(step.targets)} names are assigned; write one "
                            "name on the left.")
        return self.expression(step.call)

    # -- arithmetic on streams ----------------------------------------------------------------
    def _has_stream(self, value: Value) -> bool:
        """Whether `value` computes on a stream (DALI arithmetic) rather than folding to a constant."""
        if isinstance(value, (Call, Gpu, MathCall)):
            return True
        if isinstance(value, Name):
            return value.id in self.live
        if isinstance(value, Arith):
            return self._has_stream(value.left) or self._has_stream(value.right)
        if isinstance(value, Unary):
            return self._has_stream(value.operand)
        return False

    def expression(self, value: Arith | Unary | MathCall) -> ExprNode:
        if isinstance(value, MathCall):
            op, operands = f"math.{value.func}", self._math_operands(value)
        elif isinstance(value, Unary):
            op, operands = value.op, (value.operand,)
        else:
            op, operands = value.op, (value.left, value.right)
        args = tuple(self._operand(v, op) for v in operands)
        if not any(isinstance(a, (Stream, OpNode, ExprNode)) for a in args):
            raise self.fail(f"{op} needs a stream among its operands (the output of an operator); DALI's math "
                            "functions work on streams, not on numbers alone.")
        # DALI places arithmetic on the GPU when any operand is there, and copies the CPU operands over
        return ExprNode(op, args, "gpu" if any(self._on_gpu(a) for a in args) else "cpu")

    def _math_operands(self, value: MathCall) -> tuple[Value, ...]:
        functions = math_functions()
        params = functions.get(value.func)
        if params is None:
            hint = did_you_mean(f"math.{value.func}", [f"math.{f}" for f in functions])
            raise self.fail(f"unknown function 'math.{value.func}'.{hint} DALI's "
                            f"math functions: {', '.join(functions)}.")
        given = dict(zip(params, value.args))
        for key, v in value.kwargs:
            if key not in params or key in given:
                raise self.fail(f"math.{value.func} takes {', '.join(params)}; got {key}= "
                                f"{'twice' if key in given else 'as well'}.")
            given[key] = v
        if len(value.args) > len(params) or len(given) != len(params):
            raise self.fail(f"math.{value.func} takes {len(params)} operand(s) ({', '.join(params)}), got "
                            f"{len(value.args) + len(value.kwargs)}.")
        return tuple(given[p] for p in params)

    def _operand(self, value: Value, op: str) -> Arg:
        if isinstance(value, Call):
            return self.op_call(value)
        if isinstance(value, Gpu) or (isinstance(value, Name) and value.id in self.live):
            return self._stream(value)
        if isinstance(value, EXPRESSIONS) and self._has_stream(value):
            return self.expression(value)
        if isinstance(value, TypedConst):
            return Lit(self._typed(value), value)
        lit = self.literal(value)
        if not (_number(lit) or (isinstance(lit, (list, tuple)) and lit and all(_number(x) for x in lit))):
            shown = f"types.{lit.name}" if isinstance(lit, Enum) else repr(lit)
            raise self.fail(f"operand {shown} of '{op}' is not a number; arithmetic on streams takes {OPERANDS}.")
        return Lit(lit, value)

    def _typed(self, value: TypedConst) -> Typed:
        number = self.literal(value.value)
        if not _number(number):
            raise self.fail(f"types.Constant takes a number here; got {number!r} (a list operand is written as the "
                            "list itself, as in `images * [0.5, 1.0, 1.5]`).")
        dtypes = argtypes.enum_members()["DALIDataType"]
        if value.dtype and value.dtype not in dtypes:
            raise self.fail(f"'{value.dtype}' is not a data type DALI's arithmetic takes; one of: "
                            f"{', '.join(dtypes)}.{did_you_mean(value.dtype, dtypes)}")
        return Typed(number, value.dtype)

    # -- operators ----------------------------------------------------------------------------
    def op_call(self, call: Call) -> OpNode:
        if call.op == GPU_COPY:
            return self._gpu_copy(call)
        op = self.cat.get(call.op)
        if op is None:
            raise self.fail(self.cat.unknown_message(call.op))
        if self.cat.replacement(call.op) is not None:
            self.renamed.append((call.op, op.name))
        inputs = tuple(self._input(v, op) for v in call.inputs)
        if not op.min_inputs <= len(inputs) <= op.max_inputs:
            want = (f"{op.min_inputs}" if op.min_inputs == op.max_inputs
                    else f"{op.min_inputs} to {op.max_inputs}")
            raise self.fail(f"{op.name} takes {want} input stream(s), got {len(inputs)}.")
        device = self._device(call, op, inputs)
        kwargs, injected = self._kwargs(call, op)
        if op.check is not None:
            self._check_values(op, kwargs)
        if op.conditionals:
            self.conditionals = True
        return OpNode(op=op, device=device, inputs=inputs, kwargs=kwargs, injected=injected)

    def _check_values(self, op: OpInfo, kwargs: tuple[tuple[str, Arg], ...]) -> None:
        """An `augment.*` step's own check of its constant arguments (a policy string's grammar, a range)."""
        constants = {k: v.value for k, v in kwargs if isinstance(v, Lit)}
        try:
            op.check_values(constants)
        except ConfigError as e:
            raise self.fail(f"{e.where} of {op.name}: {e.message}") from None

    def _gpu_copy(self, call: Call) -> OpNode:
        """`labels = labels.gpu()`; without a GPU the copy is dropped, as `.gpu()` is everywhere else."""
        source = self._stream(call.inputs[0])
        device = "gpu" if self.target == "gpu" else "cpu"
        if device == "cpu":
            self.moved.append(self.step.index)
        return OpNode(op=GPU_COPY_OP, device=device, inputs=(source,), kwargs=())

    def _device(self, call: Call, op: OpInfo, inputs: tuple[Arg, ...]) -> str:
        written = call.kwarg("device")
        gpu_inputs = [a for a in inputs if self._on_gpu(a)]
        if written is not None:
            device = self.literal(written)
            if device not in DEVICES:
                raise self.fail(f"device must be one of cpu, gpu, mixed; got {device!r}.")
            if device not in op.backends:
                raise self.fail(f"{op.name} has no '{device}' implementation; it runs on: {', '.join(op.backends)}.")
        else:
            device = "gpu" if gpu_inputs and "gpu" in op.backends else ("cpu" if op.cpu else op.backends[0])
        if self.target == "cpu" and device != "cpu":
            if not op.cpu:
                raise self.fail(f"{op.name} has no CPU implementation, and this run has no GPU "
                                f"(it runs on: {', '.join(op.backends)}).")
            self.moved.append(self.step.index)
            return "cpu"
        if gpu_inputs and device == "cpu":
            src = self._describe(gpu_inputs[0])
            fix = ("set device=\"gpu\" on this step" if "gpu" in op.backends
                   else f"{op.name} runs only on the CPU, so move this step before the data goes to the GPU")
            raise self.fail(f"{src} is on the GPU but this step runs on the CPU, and DALI cannot copy data "
                            f"back to the CPU; {fix}.")
        if gpu_inputs and device == "mixed":
            raise self.fail(f"{op.name} with device=\"mixed\" takes CPU input, but {self._describe(gpu_inputs[0])} "
                            "is on the GPU.")
        return device

    def _on_gpu(self, arg: Arg) -> bool:
        if isinstance(arg, Stream):
            return arg.gpu or self.live[arg.name][1]
        return isinstance(arg, (OpNode, ExprNode)) and arg.device in ("gpu", "mixed")

    def _describe(self, arg: Arg) -> str:
        if isinstance(arg, Stream):
            if arg.gpu:
                return f"'{arg.name}.gpu()'"
            step = self.g.steps[self.live[arg.name][0] - 1]
            what = step.call.op if isinstance(step.call, Call) else "arithmetic"
            return f"stream '{arg.name}' (from step {step.index}, {what} on the GPU)"
        if isinstance(arg, ExprNode):
            return f"the result of '{arg.op}'"
        return f"the output of {arg.op.name}"

    def _kwargs(self, call: Call, op: OpInfo) -> tuple[tuple[tuple[str, Arg], ...], tuple[str, ...]]:
        out: list[tuple[str, Arg]] = []
        for key, value in call.kwargs:
            if key == "device":
                continue
            if key in RUNNER_OWNED and op.is_reader:
                raise self.fail(f"'{key}' is set by the runner from {RUNNER_OWNED[key]}; remove it from the "
                                "pipeline (sharding is injected into every reader).")
            if key == "name" and not op.python:
                name = self.literal(value)
                if not isinstance(name, str):
                    raise self.fail(f"name must be a string; got {name!r}.")
                out.append((key, Lit(name, value)))
                continue
            info = op.args.get(key)
            if info is None:
                raise self.fail(f"unknown argument '{key}'. {op.name} takes: {describe_arg_names(op)}."
                                f"{did_you_mean(key, op.args)}")
            out.append((key, self._arg(value, op, info)))
        given = {k for k, _ in call.kwargs}
        missing = [a for a, info in op.args.items() if info.required and a not in given]
        if missing:
            raise self.fail(f"{op.name} needs argument(s): {', '.join(missing)}.")
        injected = self._inject_reader_args(op, out) if op.is_reader else ()
        return tuple(out), injected

    def _inject_reader_args(self, op: OpInfo, out: list[tuple[str, Arg]]) -> tuple[str, ...]:
        given = dict(out)
        added = []
        if "name" not in given:
            out.append(("name", Lit("Reader" if not self.readers else f"Reader{len(self.readers) + 1}")))
            added.append("name")
        self.readers.append(dict(out)["name"].value)
        if "shard_id" in op.args:
            out += [("shard_id", Lit(self.rank, symbol="shard_id")),
                    ("num_shards", Lit(self.world, symbol="num_shards"))]
            added += ["shard_id", "num_shards"]
            if "pad_last_batch" not in given:
                out.append(("pad_last_batch", Lit(True)))
                added.append("pad_last_batch")
        if self.file_list and "file_list" in op.args and "file_root" in given \
                and not ({"files", "file_list"} & set(given)):
            out.append(("file_list", Lit(self.file_list)))  # the split without its skip-listed files
            added.append("file_list")
        if self.shards and op.name in SHARD_READERS:  # a folder of shards -> its files and their indexes
            files, indexes = SHARD_READERS[op.name]
            out[:] = [(k, v) for k, v in out if k not in (files, indexes)]
            out += [(files, Lit(list(self.shards[0]))), (indexes, Lit(list(self.shards[1])))]
            added += [files, indexes]
        if self.own_order:  # the file list is this rank's epoch in order (data.repeats): read it as it is
            out[:] = [(k, v) for k, v in out if k not in ("random_shuffle", "shuffle_after_epoch", "stick_to_shard")]
            fixed = [k for k in ("random_shuffle", "shuffle_after_epoch") if k in op.args]
            out += [(k, Lit(False)) for k in fixed]
            added += fixed
            given = dict(out)
        shuffles = isinstance(given.get("shuffle_after_epoch"), Lit) and given["shuffle_after_epoch"].value
        if shuffles and "shuffle_after_epoch_seed" in op.args and "shuffle_after_epoch_seed" not in given:
            # the experiment's seed picks the permutation; every rank draws the same one, so shards stay disjoint
            out.append(("shuffle_after_epoch_seed", Lit(self.seed)))
            added.append("shuffle_after_epoch_seed")
        return tuple(added)

    # -- values -------------------------------------------------------------------------------
    def _input(self, value: Value, op: OpInfo) -> Arg:
        if isinstance(value, Call):
            return self.op_call(value)
        if isinstance(value, EXPRESSIONS) and self._has_stream(value):
            return self.expression(value)
        if isinstance(value, (Name, Gpu)):
            return self._stream(value)
        raise self.fail(f"inputs of {op.name} are streams or operator calls; constants go in key=value "
                        "arguments.")

    def _stream(self, value: Name | Gpu) -> Stream:
        name = value.stream.id if isinstance(value, Gpu) else value.id
        if name not in self.live:
            raise self._undefined(name)
        self.used.add((name, self.live[name][0]))
        return Stream(name, gpu=isinstance(value, Gpu) and self.target == "gpu")

    def _arg(self, value: Value, op: OpInfo, info) -> Arg:
        if isinstance(value, EXPRESSIONS) and self._has_stream(value):
            if not info.tensor:
                raise self.fail(f"argument '{info.name}' of {op.name} takes a constant "
                                f"({argtypes.describe_type(info.type)}), not arithmetic on streams.")
            return self.expression(value)
        if isinstance(value, Call):
            if not info.tensor:
                raise self.fail(f"argument '{info.name}' of {op.name} takes a constant "
                                f"({argtypes.describe_type(info.type)}), not an operator output.")
            return self.op_call(value)
        if isinstance(value, Gpu) or (isinstance(value, Name) and value.id in self.live):
            if not info.tensor:
                raise self.fail(f"argument '{info.name}' of {op.name} takes a constant "
                                f"({argtypes.describe_type(info.type)}), not the stream '{self._name(value)}'.")
            return self._stream(value)
        kind = argtypes.ENUM_OF_TYPE.get(info.type)
        if kind and isinstance(value, Name):
            return self._enum(value.id, kind, info, op)
        lit = self.literal(value)
        if kind:
            if isinstance(value, Param) and isinstance(lit, str) and lit in argtypes.enum_members()[kind]:
                return Enum(kind, lit)  # a parameter holding an enum name, e.g. params: {dtype: FLOAT}
            by_number = argtypes.enum_of_number(kind, lit)
            if by_number:  # interp_type=1: DALI takes an enum's number too
                return Enum(kind, by_number)
            if not isinstance(lit, Enum) and not (isinstance(lit, list) and all(isinstance(x, Enum) for x in lit)):
                raise self.fail(f"argument '{info.name}' of {op.name} takes {argtypes.describe_type(info.type)}, "
                                f"written without quotes; got {lit!r}.")
        problem = argtypes.literal_problem(lit, info.type)
        if problem:
            raise self.fail(f"argument '{info.name}' of {op.name} {problem}.")
        return Lit(lit, value)

    @staticmethod
    def _name(value: Name | Gpu) -> str:
        return value.stream.id if isinstance(value, Gpu) else value.id

    def _enum(self, name: str, kind: str, info, op: OpInfo) -> Enum:
        if name in argtypes.enum_members()[kind]:
            return Enum(kind, name)
        other = argtypes.enum_kind_of(name)
        if other:
            raise self.fail(f"argument '{info.name}' of {op.name} takes {argtypes.describe_type(info.type)}; "
                            f"{name} is {argtypes.ENUM_WORDS[other]}.")
        raise self.fail(f"'{name}' is not {argtypes.ENUM_WORDS[kind]} nor a stream; argument '{info.name}' of "
                        f"{op.name} takes one of: {', '.join(argtypes.enum_members()[kind])}."
                        f"{did_you_mean(name, argtypes.enum_members()[kind])}")

    def literal(self, value: Value) -> Any:
        """A constant's Python value: parameters substituted, arithmetic folded, enums as Enum."""
        if isinstance(value, Const):
            return value.value
        if isinstance(value, Param):
            if value.name not in self.g.params:
                raise self.fail(f"unknown parameter ${value.name}.{did_you_mean(value.name, self.g.params)} "
                                f"Parameters of this pipeline: {list_names(self.g.params) or 'none'} "
                                "(declare them under `params:`).")
            return self.g.params[value.name]
        if isinstance(value, Seq):
            items = [self.literal(v) for v in value.items]
            return tuple(items) if value.tuple_ else items
        if isinstance(value, Arith):
            left, right = self.literal(value.left), self.literal(value.right)
            if not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in (left, right)):
                raise self.fail(f"arithmetic '{value.op}' needs numbers; got {left!r} and {right!r}.")
            try:
                return _FOLD[value.op](left, right)
            except ZeroDivisionError:
                raise self.fail("division by zero.") from None
            except TypeError:
                raise self.fail(f"arithmetic '{value.op}' needs integers; got {left!r} and {right!r}.") from None
        if isinstance(value, Unary):
            operand = self.literal(value.operand)
            if not _number(operand) or (value.op == "~" and isinstance(operand, float)):
                raise self.fail(f"'{value.op}' needs {'an integer' if value.op == '~' else 'a number'}; "
                                f"got {operand!r}.")
            return _FOLD_UNARY[value.op](operand)
        if isinstance(value, TypedConst):
            raise self.fail("types.Constant is an operand of arithmetic on streams; an argument takes the number "
                            "itself.")
        if isinstance(value, Name):
            kind = argtypes.enum_kind_of(value.id)
            if kind:
                return Enum(kind, value.id)
            if value.id in argtypes.layout_constants():  # types.NCHW is the string "CHW"
                return argtypes.layout_constants()[value.id]
            raise self._undefined(value.id)
        raise self.fail("expected a constant here, not a stream or an operator call.")

    def _undefined(self, name: str) -> ConfigError:
        later = next((s for s in self.g.steps if s.index > self.step.index and name in s.targets), None) \
            if self.step else None
        if later is not None:
            cycle = self._cycle(later, name)
            if cycle:
                return self.fail(f"cycle: {' -> '.join(cycle)}. A pipeline is a graph without cycles: each step "
                                 "may only use streams defined by the steps above it.")
            return self.fail(f"stream '{name}' is used before it is defined (at step {later.index}); "
                             f"move this step below step {later.index}.")
        hint = did_you_mean(name, self.live)
        if name in self.g.params:
            hint += f" Parameters are written with a dollar sign: ${name}."
        return self.fail(f"undefined stream '{name}'.{hint} Streams defined so far: "
                         f"{list_names(self.live) or 'none (the first step must be a reader)'}.")

    def _cycle(self, later: Step, name: str) -> list[str] | None:
        """The streams of a cycle through the current step and `later` (which defines `name`), if any."""
        current = self.step
        defined_by = {}
        for s in self.g.steps:
            for t in s.targets:
                defined_by.setdefault(t, []).append(s)
        seen: set[int] = set()

        def walk(step: Step, path: list[str]) -> list[str] | None:
            if step.index in seen:
                return None
            seen.add(step.index)
            for name in _names_used(step.call):
                for d in defined_by.get(name, []):
                    if d.index == current.index:
                        return path + [name]
                    if d.index > current.index:
                        found = walk(d, path + [name])
                        if found:
                            return found
            return None

        path = walk(later, [])
        if not path:
            return None
        chain = list(reversed(path))
        return [*chain, name, chain[0]]


def _names_used(call: Value) -> list[str]:
    out: list[str] = []

    def visit(value: Value) -> None:
        if isinstance(value, Name):
            out.append(value.id)
        elif isinstance(value, Gpu):
            out.append(value.stream.id)
        elif isinstance(value, Call):
            for x in value.inputs:
                visit(x)
            for _, x in value.kwargs:
                visit(x)
        elif isinstance(value, Seq):
            for x in value.items:
                visit(x)
        elif isinstance(value, Arith):
            visit(value.left)
            visit(value.right)
        elif isinstance(value, Unary):
            visit(value.operand)
        elif isinstance(value, MathCall):
            for x in [*value.args, *(x for _, x in value.kwargs)]:
                visit(x)
    visit(call)
    return out


def check_graph(graph: Graph, *, target: str = "gpu", rank: int = 0, world: int = 1, seed: int = 0,
                catalog: Catalog | None = None, file_list: str | None = None, own_order: bool = False,
                shards: tuple[tuple[str, ...], tuple[str, ...]] | None = None) -> CheckedGraph:
    """Check `graph` against DALI's schemas, placed for `target` and sharded for `rank` of `world`.

    `file_list`, when given, replaces the reader's own scan of `file_root` (see data.skips); with `own_order` it is
    the rank's files in the order to read them (data.repeats), with rank 0 of 1 and the reader's shuffles off.
    `shards` (tar paths, index paths) replace a readers.webdataset's `paths` that names a folder of shards."""
    if target not in ("cpu", "gpu"):
        raise ValueError(target)
    return _Checker(graph, catalog or load_catalog(), target, rank, world, seed, file_list, own_order, shards).run()
