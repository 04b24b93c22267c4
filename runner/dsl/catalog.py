"""The operators the DSL accepts, read from DALI's own schema registry (`nvidia.dali.backend`).

Every `fn.*` operator that DALI registers in C++ is here, under its `fn` name, with its devices,
input counts and typed arguments. Python-level helpers that take callables (python_function,
external_source) are left out on purpose: a YAML file must not name code. The automatic
augmentation policies (`auto_aug.*`), which are Python functions over DALI operators, are added
by hand with signatures read from the functions themselves, and so are runner's own compositions of
DALI operators (`augment.*`, from the table in runner.augment), with typed arguments and a value check.

DALI still runs the names it has deprecated (`fn.image_decoder`, `fn.file_reader`, ...): the catalog
maps each to the operator DALI names as its replacement (`DeprecatedInFavorOf`), so a line from an
older example checks against the current operator and compiles to its current name.

Reading the registries means importing DALI (half a second or more); the catalog, with the enums, math functions
and layouts the checker reads, is made once per installed DALI and kept in runner's cache (files.kept_facts), so
that checking a pipeline imports no DALI. Building one does.
"""
from __future__ import annotations

import dataclasses
import functools
import importlib
import importlib.util
import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runner.augment import COMPOSITIONS, load, resolve_check
from runner.errors import ConfigError, closest, did_you_mean, list_names
from runner.files import facts_key, installed_version, kept_facts

# DALI is imported where its registries are read: a kept catalog (files.kept_facts) serves every later start,
# and a machine without DALI gets a ConfigError rather than an ImportError.

# Arguments the runner owns: dsl.check injects them into each reader from the global rank and world size.
RUNNER_OWNED = {"shard_id": "the global rank", "num_shards": "the world size"}
# Registered in C++ but fed by Python callables: never reachable from a YAML file.
EXCLUDED = {"external_source"}
# DALI's Python-side operators that take a callable: what unknown_message explains
PYTHON_CALLBACKS = {"external_source", "python_function", "torch_python_function", "dl_tensor_python_function",
                    "experimental.inputs.video", "plugin.pytorch.fn.torch_python_function"}
# Accepted by every operator although no schema lists them.
COMMON_ARGS = ("device", "name")


@dataclass(frozen=True)
class ArgInfo:
    name: str
    type: str                 # DALIDataType name: FLOAT, _INT32_VEC, IMAGE_TYPE, ...; "" if unknown
    default: str | None       # as DALI prints it; None when the argument has no default
    required: bool
    tensor: bool              # may be fed a stream (an "argument input")
    doc: str = ""
    deprecated: bool = False
    kind: str = ""            # the type in words where `type` is no DALI type (checked by the op's own check)


@dataclass(frozen=True)
class OpInfo:
    name: str                 # fn name: "decoders.image_random_crop"
    schema: str               # "decoders__ImageRandomCrop", or the Python function for auto_aug
    backends: tuple[str, ...]  # cpu, gpu, mixed
    min_inputs: int
    max_inputs: int
    args: dict[str, ArgInfo] = field(default_factory=dict)
    doc: str = ""
    is_reader: bool = False
    python: bool = False      # a Python function over DALI operators (auto_aug.*, augment.*), not a DALI schema
    conditionals: bool = False  # built on DALI's conditional execution: the pipeline needs enable_conditionals
    check: str | None = None  # runner.augment's MODULE:FUNCTION: the constant arguments -> raises ConfigError

    def check_values(self, constants: dict) -> None:
        """The operator's own check of its constant arguments (runner's compositions have one)."""
        if self.check is not None:
            resolve_check(self.check)(constants)

    @property
    def cpu(self) -> bool:
        return "cpu" in self.backends


def _fn_name(s: Any, fn_module: Any) -> str | None:
    """A schema's `fn` name ("decoders.image_random_crop"), if `nvidia.dali.fn` really exposes it."""
    name = ".".join([*s.ModulePath(), fn_module._to_snake_case(s.OperatorName())])
    target = fn_module
    for part in name.split("."):
        target = getattr(target, part, None)
        if target is None:
            return None
    return name


def _schema_op(schema_name: str, fn_module: Any, deprecated: bool = False) -> OpInfo | None:
    from nvidia.dali import backend

    s = backend.GetSchema(schema_name)
    if s.IsInternal() or schema_name.startswith("_") or s.IsDeprecated() != deprecated:
        return None
    if s.IsDocHidden() and not deprecated:  # DALI hides most deprecated names from its docs
        return None
    name = _fn_name(s, fn_module)
    if name is None:
        return None
    args = _schema_args(s)
    backends = tuple(b for b in ("cpu", "gpu", "mixed") if b in s.GetSupportedBackends())
    return OpInfo(name=name, schema=schema_name, backends=backends, min_inputs=s.MinNumInput(),
                  max_inputs=s.MaxNumInput(), args=args, doc=_safe(s.Dox),
                  is_reader=name.startswith("readers.") or "readers." in name or name.endswith("_reader"))


def _schema_args(s, skip: tuple[str, ...] = ()) -> dict[str, ArgInfo]:
    args = {}
    for a in s.GetArgumentNames():
        if a in skip:
            continue
        has_default = s.HasArgumentDefaultValue(a)
        args[a] = ArgInfo(
            name=a, type=s.GetArgumentType(a).name,
            default=s.GetArgumentDefaultValueString(a) if has_default else None,
            required=not s.IsArgumentOptional(a), tensor=s.IsTensorArgument(a),
            doc=_safe(s.GetArgumentDox, a), deprecated=s.IsDeprecatedArg(a))
    return args


def _tfrecord_op() -> dict[str, OpInfo]:
    """readers.tfrecord: DALI's TFRecord reader takes a dict of feature specs that a YAML step does not write, so
    runner's takes DALI's other arguments and reads the features `runner data shard --format tfrecord` writes
    (runner.data.tfrecord)."""
    from nvidia.dali import backend

    s = backend.GetSchema("readers___TFRecord")
    doc = ("Reads the TFRecord shards of `runner data shard --format tfrecord` (DALI's readers.tfrecord with the "
           "features image/encoded and image/class/label): returns the encoded images and int32 labels.")
    args = _schema_args(s, skip=("features", "feature_names"))
    # runner gives the index of each shard in a folder of `runner data shard`'s; written by hand otherwise
    args["index_path"] = dataclasses.replace(args["index_path"], required=False)
    return {"readers.tfrecord": OpInfo(name="readers.tfrecord", schema="runner.data.tfrecord.tfrecord",
                                       backends=("cpu",), min_inputs=0, max_inputs=0, args=args, doc=doc,
                                       is_reader=True, python=True)}


# the step `x = y.gpu()`: DataNode.gpu(), not an operator of the registry
GPU_COPY_OP = OpInfo(name=".gpu", schema="DataNode.gpu", backends=("cpu", "gpu"), min_inputs=1, max_inputs=1)


def _safe(fn: Callable, *args) -> str:
    try:
        return fn(*args)
    except RuntimeError:  # some schemas carry no documentation
        return ""


def _auto_aug_ops() -> dict[str, OpInfo]:
    from nvidia.dali.auto_aug import auto_augment, rand_augment, trivial_augment

    funcs = {
        "auto_aug.rand_augment": rand_augment.rand_augment,
        "auto_aug.trivial_augment_wide": trivial_augment.trivial_augment_wide,
        "auto_aug.auto_augment_image_net": auto_augment.auto_augment_image_net,
        "auto_aug.auto_augment": auto_augment.auto_augment,
    }
    ops = {}
    for name, func in funcs.items():
        params = list(inspect.signature(func).parameters.values())[1:]  # first one is the data
        args = {p.name: ArgInfo(name=p.name, type="", required=p.default is inspect.Parameter.empty,
                                default=None if p.default is inspect.Parameter.empty else repr(p.default),
                                tensor=p.name == "shape", doc=_annotation(p))
                for p in params}
        ops[name] = OpInfo(name=name, schema=f"{func.__module__}.{func.__name__}", backends=("cpu", "gpu"),
                           min_inputs=1, max_inputs=1, args=args,
                           doc=(inspect.getdoc(func) or "").split("\n\n")[0], python=True, conditionals=True)
    return ops


def _runner_ops() -> dict[str, OpInfo]:
    """runner.augment's compositions: typed like DALI's schemas, so the checker tests constants the same way."""
    ops = {}
    for name, comp in COMPOSITIONS.items():
        func = load(name)
        params = list(inspect.signature(func).parameters.values())[1:]  # first one is the data
        args = {p.name: ArgInfo(name=p.name, type=comp.args[p.name].type, kind=comp.args[p.name].kind,
                                required=p.default is inspect.Parameter.empty,
                                default=None if p.default is inspect.Parameter.empty else repr(p.default),
                                tensor=p.name in comp.streams, doc=comp.args[p.name].doc)
                for p in params}
        # emitted and imported as runner.augment.<function>, its public name
        ops[name] = OpInfo(name=name, schema=f"runner.augment.{func.__name__}", backends=("cpu", "gpu"),
                           min_inputs=1, max_inputs=1, args=args, doc=(inspect.getdoc(func) or "").split("\n\n")[0],
                           python=True, conditionals=comp.conditionals, check=comp.check)
    return ops


def _annotation(p: inspect.Parameter) -> str:
    return "" if p.annotation is inspect.Parameter.empty else inspect.formatannotation(p.annotation)


class Catalog:
    """Name -> OpInfo for every operator the DSL accepts."""

    def __init__(self, ops: dict[str, OpInfo], deprecated: dict[str, OpInfo] | None = None,
                 aliases: dict[str, str] | None = None, *, math: dict[str, tuple[str, ...]] | None = None,
                 enums: dict[str, dict[str, int]] | None = None, layouts: dict[str, str] | None = None):
        self.ops = ops
        self.deprecated = deprecated or {}  # DALI's deprecated fn name -> the operator it stands for
        self.aliases = aliases or {}        # other spellings DALI's docs use -> fn name
        self.math = math or {}              # nvidia.dali.math's functions -> their parameter names
        self.enums = enums or {}            # DALIDataType, DALIImageType, DALIInterpType -> member -> number
        self.layouts = layouts or {}        # the layout names of DALI's types module (NCHW -> "CHW")

    def names(self) -> list[str]:
        return sorted(self.ops)

    def get(self, name: str) -> OpInfo | None:
        """The operator `name` stands for: its own, the replacement of a deprecated name, or an alias's."""
        name = self.aliases.get(name, name)
        return self.ops.get(name) or self.deprecated.get(name)

    def replacement(self, name: str) -> OpInfo | None:
        """For a name DALI has deprecated, what it stands for now (possibly itself, when DALI names none)."""
        return self.deprecated.get(name)

    def suggest(self, name: str) -> str | None:
        """The operator a misspelt or unqualified name most likely meant."""
        leaf = name.split(".")[-1]
        same_leaf = [n for n in self.names() if n.split(".")[-1] == leaf]
        if same_leaf:  # "coin_flip" -> "random.coin_flip"
            return same_leaf[0]
        guess = closest(name, self.ops)
        if guess:
            return guess
        leaf_guess = closest(leaf, [n.split(".")[-1] for n in self.ops])
        return next((n for n in self.names() if n.split(".")[-1] == leaf_guess), None)

    def unknown_message(self, name: str) -> str:
        if name in PYTHON_CALLBACKS:
            return (f"{name} calls back into Python code, and a pipeline step cannot name code; read the data "
                    "with a reader (readers.file, readers.numpy, ...) and transform it with DALI operators.")
        guess = self.suggest(name)
        hint = f" Did you mean '{guess}'?" if guess else ""
        return (f"unknown operator '{name}'.{hint} Operators are DALI's fn names, such as "
                f"readers.file, decoders.image, resize, crop_mirror_normalize, random.coin_flip; "
                f"`runner ops` lists all {len(self.ops)}.")

    def fn(self, op: OpInfo) -> Callable:
        """The DALI callable for a checked operator (the name came from this catalog, not from YAML)."""
        if op.python:
            module, func = op.schema.rsplit(".", 1)
            return getattr(importlib.import_module(module), func)
        from nvidia.dali import fn
        target: Any = fn
        for part in op.name.split("."):
            target = getattr(target, part)
        return target


@functools.cache
def load_catalog() -> Catalog:
    """All operators of the installed DALI, with its enums, math functions and layouts: read from DALI once per
    installed version (and version of this code), then from runner's cache."""
    version = installed_version(prefix="nvidia-dali")
    if version is None or not _importable("nvidia.dali"):
        raise ConfigError(
            "NVIDIA DALI is not installed, so pipelines cannot be checked or built. Install runner with "
            "the DALI extra that matches torch's CUDA: pip install -e '.[cuda13]' (or '.[cuda12]').",
            file="runner") from None
    here = Path(__file__).parent
    sources = (here / "catalog.py", here.parent / "augment" / "__init__.py", *sorted((here.parent / "augment").glob("[!_]*.py")))
    return kept_facts("dali-catalog", facts_key(version, sources=sources), read_catalog)


def _importable(module: str) -> bool:
    """Whether `module` can be found, without importing it: its metadata alone may outlive a broken install."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def read_catalog() -> Catalog:
    """The catalog read from DALI's registries (importing DALI)."""
    try:
        from nvidia.dali import backend, fn
    except ImportError as e:
        raise ConfigError(
            "NVIDIA DALI is not installed, so pipelines cannot be checked or built. Install runner with "
            "the DALI extra that matches torch's CUDA: pip install -e '.[cuda13]' (or '.[cuda12]'). "
            f"({e})", file="runner") from None
    names = set(backend.RegisteredCPUOps()) | set(backend.RegisteredGPUOps()) | set(backend.RegisteredMixedOps())
    ops = {}
    for schema_name in sorted(names):
        op = _schema_op(schema_name, fn)
        if op is not None and op.name not in EXCLUDED:
            ops[op.name] = op
    ops.update(_auto_aug_ops())
    ops.update(_runner_ops())
    ops.update(_tfrecord_op())
    return Catalog(ops, _deprecated_ops(names, fn, ops), AUTO_AUG_ALIASES, math=_math_functions(),
                   enums=_enums(), layouts=_layouts())


def _deprecated_ops(names: set[str], fn_module: Any, ops: dict[str, OpInfo]) -> dict[str, OpInfo]:
    """DALI's deprecated fn names -> the current operator (DeprecatedInFavorOf) when its schema takes every
    argument and input the old one took, else the old operator itself (it still runs)."""
    from nvidia.dali import backend

    out = {}
    for schema_name in sorted(names):
        s = backend.GetSchema(schema_name)
        if not s.IsDeprecated() or s.IsInternal() or schema_name.startswith("_"):
            continue
        old = _schema_op(schema_name, fn_module, deprecated=True)
        if old is None or old.name in ops or old.name in EXCLUDED:
            continue
        new_schema = s.DeprecatedInFavorOf()
        new = next((op for op in ops.values() if op.schema == new_schema), None) if new_schema else None
        fits = new is not None and set(old.args) <= set(new.args) and set(old.backends) <= set(new.backends) \
            and new.min_inputs <= old.min_inputs and old.max_inputs <= new.max_inputs
        out[old.name] = new if fits else old
    return out


def math_functions() -> dict[str, tuple[str, ...]]:
    """nvidia.dali.math's functions (sqrt, clamp, ...) -> their parameter names."""
    return load_catalog().math


def _math_functions() -> dict[str, tuple[str, ...]]:
    from nvidia.dali import math

    return {name: tuple(inspect.signature(f).parameters) for name, f in sorted(vars(math).items())
            if inspect.isfunction(f) and not name.startswith("_") and f.__module__ == math.__name__}


def _enums() -> dict[str, dict[str, int]]:
    """DALI's argument enums: kind -> member name -> number, in DALI's order."""
    from nvidia.dali import types

    return {kind: {name: int(member) for name, member in getattr(types, kind).__members__.items()}
            for kind in ("DALIDataType", "DALIImageType", "DALIInterpType")}


def _layouts() -> dict[str, str]:
    """The layout names DALI's types module defines (types.NCHW == "CHW", types.NHWC, ...)."""
    from nvidia.dali import types

    return {n: v for n, v in vars(types).items() if n.isupper() and isinstance(v, str)}


# `from nvidia.dali.auto_aug import auto_augment` and friends: DALI's docs call the policies through their modules
AUTO_AUG_ALIASES = {"auto_augment.auto_augment_image_net": "auto_aug.auto_augment_image_net",
                    "auto_augment.auto_augment": "auto_aug.auto_augment",
                    "rand_augment.rand_augment": "auto_aug.rand_augment",
                    "trivial_augment.trivial_augment_wide": "auto_aug.trivial_augment_wide"}


def describe_arg_names(op: OpInfo) -> str:
    common = ["device"] if op.python else ["device", "name"]  # a Python function has no DALI operator to name
    return list_names([a for a in op.args if not op.args[a].deprecated] + common, limit=30)


__all__ = ["ArgInfo", "Catalog", "OpInfo", "GPU_COPY_OP", "load_catalog", "math_functions", "RUNNER_OWNED", "COMMON_ARGS",
           "describe_arg_names", "did_you_mean"]
