"""DSL text -> `Graph`, with Python's own parser (`ast`) and nothing evaluated.

A step reads like the DALI Python it stands for, so lines from DALI's docs paste in:

    images = decoders.image_random_crop(jpegs, device="mixed", output_type=RGB)
    images = fn.crop_mirror_normalize(images, mirror=fn.random.coin_flip(probability=0.5), dtype=types.FLOAT)

`$name` is a pipeline parameter; `fn.` and `types.` prefixes are optional. Arithmetic is Python's, as
DALI's expression examples write it: `images = images / 255`, `out = condition * adjusted + (condition ^ True)
* images`, `math.clamp(images, 0, 255)`, `types.Constant(4).uint16() * cats`.
"""
from __future__ import annotations

import ast
import re

from runner.config.load import PipelineSource
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
from runner.errors import ConfigError

_PARAM_PREFIX = "__param__"
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ARITH = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//", ast.Mod: "%",
          ast.Pow: "**", ast.BitAnd: "&", ast.BitOr: "|", ast.BitXor: "^", ast.LShift: "<<", ast.RShift: ">>"}
_COMPARE = {ast.Eq: "==", ast.NotEq: "!=", ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">="}
_UNARY = {ast.USub: "-", ast.UAdd: "+", ast.Invert: "~"}
# how DALI's examples import nvidia.dali.math: `from nvidia.dali import math`, `import nvidia.dali as dali`
_MATH_PREFIXES = ("math.", "dali.math.", "nvidia.dali.math.")
_CONSTANT = ("Constant", "types.Constant", "dali.types.Constant", "nvidia.dali.types.Constant")
# types.Constant(4).uint16(): ScalarConstant's conversions, by the DALIDataType each gives
CONSTANT_METHODS = {"bool": "BOOL", "int8": "INT8", "int16": "INT16", "int32": "INT32", "int64": "INT64",
                    "uint8": "UINT8", "uint16": "UINT16", "uint32": "UINT32", "uint64": "UINT64",
                    "float16": "FLOAT16", "float32": "FLOAT", "float64": "FLOAT64"}
_NOT_BOOL = ("`and`, `or` and `not` need a Python bool, which a DALI stream is not; combine conditions with &, | "
             "and ^ (`condition ^ True` negates one, as DALI's expr_conditional_and_masking example does)")
SHAPE = "a step is written `outputs = operator(inputs..., key=value...)`, e.g. " \
        "`images = resize(images, resize_x=$size, resize_y=$size)`, or computes arithmetic on streams, " \
        "e.g. `images = images / 255`"


class _StepError(Exception):
    pass


def _replace_params(text: str) -> str:
    """`$size` -> `__param__size`, outside string literals."""
    out, i, quote = [], 0, None
    while i < len(text):
        ch = text[i]
        if quote:
            out.append(ch)
            if ch == "\\" and i + 1 < len(text):
                out.append(text[i + 1])
                i += 1
            elif ch == quote:
                quote = None
        elif ch in "\"'":
            quote = ch
            out.append(ch)
        elif ch == "$":
            m = _IDENT.match(text, i + 1)
            if not m:
                raise _StepError("'$' must be followed by a parameter name, as in $size")
            out.append(_PARAM_PREFIX + m.group())
            i = m.end() - 1
        else:
            out.append(ch)
        i += 1
    return "".join(out)


def _dotted(node: ast.expr) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    return ".".join(reversed(parts))


def _value(node: ast.expr) -> Value:
    if isinstance(node, ast.Constant):
        if isinstance(node.value, (bytes, complex)) or node.value is Ellipsis:
            raise _StepError(f"{node.value!r} is not a supported literal")
        return Const(node.value)
    if isinstance(node, ast.Name):
        if node.id.startswith(_PARAM_PREFIX):
            return Param(node.id[len(_PARAM_PREFIX):])
        return Name(node.id)
    if isinstance(node, ast.Attribute):
        path = _dotted(node)
        if path and path.startswith("types."):
            return Name(path.split(".")[-1])  # types.RGB, types.DALIDataType.FLOAT
        raise _StepError(f"'{ast.unparse(node)}' is not a value; operators must be called, "
                         "constants are written RGB or types.RGB")
    if isinstance(node, ast.Call):
        return _call(node)
    if isinstance(node, (ast.List, ast.Tuple)):
        return Seq(tuple(_value(e) for e in node.elts), tuple_=isinstance(node, ast.Tuple))
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        operand = _value(node.operand)
        if isinstance(operand, Const) and isinstance(operand.value, (int, float)) \
                and not isinstance(operand.value, bool) and not isinstance(node.op, ast.Invert):
            return Const(-operand.value if isinstance(node.op, ast.USub) else operand.value)
        return Unary(_UNARY[type(node.op)], operand)
    if isinstance(node, ast.BinOp) and type(node.op) in _ARITH:
        return Arith(_ARITH[type(node.op)], _value(node.left), _value(node.right))
    if isinstance(node, ast.Compare):
        return _compare(node)
    if isinstance(node, ast.BoolOp) or (isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not)):
        raise _StepError(f"'{ast.unparse(node)}': {_NOT_BOOL}")
    raise _StepError(f"'{ast.unparse(node)}' is not allowed in a pipeline step; use literals, "
                     "stream names, $parameters, arithmetic and operator calls")


def _compare(node: ast.Compare) -> Arith:
    if len(node.ops) != 1:
        raise _StepError(f"'{ast.unparse(node)}': a chained comparison asks Python for a bool, which a DALI stream "
                         "is not; compare once per expression and combine them with &, as in `(x > 0) & (x < 1)`")
    if type(node.ops[0]) not in _COMPARE:
        raise _StepError(f"'{ast.unparse(node)}': DALI compares streams with ==, !=, <, <=, > and >=, "
                         "not with 'is' or 'in'")
    return Arith(_COMPARE[type(node.ops[0])], _value(node.left), _value(node.comparators[0]))


def _arguments(node: ast.Call) -> tuple[tuple[Value, ...], tuple[tuple[str, Value], ...]]:
    for arg in node.args:
        if isinstance(arg, ast.Starred):
            raise _StepError("*args is not supported; list the inputs")
    kwargs = []
    for kw in node.keywords:
        if kw.arg is None:
            raise _StepError("**kwargs is not supported; write each argument as key=value")
        kwargs.append((kw.arg, _value(kw.value)))
    return tuple(_value(a) for a in node.args), tuple(kwargs)


def _call(node: ast.Call) -> Value:
    func = node.func
    if isinstance(func, ast.Attribute) and func.attr == "gpu":
        if node.args or node.keywords or not isinstance(func.value, ast.Name):
            raise _StepError(f"'{ast.unparse(node)}': .gpu() takes no arguments and applies to a stream name")
        return Gpu(Name(func.value.id))
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Call) and _dotted(func.value.func) in _CONSTANT:
        if func.attr not in CONSTANT_METHODS or node.args or node.keywords:
            raise _StepError(f"'{ast.unparse(node)}': a DALI Constant converts with one of "
                             f"{', '.join(f'.{m}()' for m in CONSTANT_METHODS)}")
        return TypedConst(_constant(func.value).value, CONSTANT_METHODS[func.attr], method=func.attr)
    op = _dotted(func)
    if op is None:
        raise _StepError(f"'{ast.unparse(func)}' is not an operator name")
    if op in _CONSTANT:
        return _constant(node)
    if op.startswith(_MATH_PREFIXES):
        args, kwargs = _arguments(node)
        return MathCall(op.split("math.", 1)[1], args, kwargs)
    op = op.removeprefix("fn.")
    args, kwargs = _arguments(node)
    return Call(op, args, kwargs)


def _constant(node: ast.Call) -> TypedConst:
    """`types.Constant(value)` or `types.Constant(value, dtype=types.UINT16)`: a number DALI's arithmetic types."""
    args, kwargs = _arguments(node)
    given = dict(kwargs)
    if len(args) == 2 and "dtype" not in given:
        args, given = args[:1], {**given, "dtype": args[1]}
    extra = set(given) - {"value", "dtype"}
    if len(args) + ("value" in given) != 1 or extra or len(args) > 2:
        raise _StepError(f"'{ast.unparse(node)}': types.Constant takes a number and, optionally, dtype; "
                         "for a tensor of constants write a list, as in `images * [0.5, 1.0, 1.5]`")
    dtype = given.get("dtype")
    if dtype is not None and not isinstance(dtype, Name):
        raise _StepError(f"'{ast.unparse(node)}': dtype is a DALI data type, as in dtype=types.UINT16")
    return TypedConst(args[0] if args else given["value"], dtype.id if dtype is not None else "")


def parse_step(text: str, index: int = 1, line: int | None = None) -> Step:
    """One step's text -> Step; raises _StepError with a short reason."""
    try:
        tree = ast.parse(_replace_params(text.strip()), mode="exec")
    except SyntaxError as e:
        raise _StepError(f"syntax error: {e.msg}; {SHAPE}") from None
    if any(isinstance(n, (ast.If, ast.IfExp, ast.While, ast.For)) for n in ast.walk(tree)):
        raise _StepError("Python control flow (if, for, while, or DALI's conditionals with enable_conditionals) "
                         "cannot be a step, since each step is one operator call; choose per sample with an "
                         "argument input such as mirror=random.coin_flip(probability=0.5), or an auto_aug policy")
    if len(tree.body) != 1 or not isinstance(tree.body[0], ast.Assign) or len(tree.body[0].targets) != 1:
        raise _StepError(SHAPE)
    assign = tree.body[0]
    target = assign.targets[0]
    elts = target.elts if isinstance(target, (ast.Tuple, ast.List)) else [target]
    if not all(isinstance(t, ast.Name) for t in elts):
        raise _StepError(f"outputs must be plain names, got '{ast.unparse(target)}'; {SHAPE}")
    names = tuple(t.id for t in elts)
    if any(n.startswith(_PARAM_PREFIX) for n in names):
        raise _StepError("a $parameter cannot be assigned; parameters are set under `params:`")
    call = _value(assign.value)
    if not isinstance(call, (Call, Gpu, *EXPRESSIONS)):
        raise _StepError(f"the right-hand side must be an operator call or arithmetic on streams; {SHAPE}")
    if isinstance(call, Gpu):  # `labels = labels.gpu()`, as NVIDIA's examples write it
        call = Call(GPU_COPY, (call.stream,), ())
    return Step(index=index, text=text.strip(), line=line, targets=names, call=call)


def parse_output(text: str) -> Name | Gpu:
    try:
        value = _value(ast.parse(_replace_params(str(text).strip()), mode="eval").body)
    except SyntaxError as e:
        raise _StepError(f"syntax error: {e.msg}") from None
    if not isinstance(value, (Name, Gpu)):
        raise _StepError("an output is a stream name, optionally with .gpu()")
    return value


def parse_pipeline(source: PipelineSource) -> Graph:
    """A composed pipeline (see config.load) -> Graph; syntax errors name the file, line and step."""
    steps = []
    for i, (text, line) in enumerate(zip(source.steps, source.step_lines), start=1):
        if not isinstance(text, str):
            raise ConfigError(f"step {i} must be a string such as `images = resize(images, size=224)`.",
                              file=source.file, line=line, where=f"{source.role} pipeline")
        try:
            steps.append(parse_step(text, i, line))
        except _StepError as e:
            raise ConfigError(f"{e}.", file=source.file, line=line,
                              where=Step(i, text, line, (), Call("", (), ())).label()) from None
    outputs = []
    for text in source.outputs:
        try:
            outputs.append(parse_output(text))
        except _StepError as e:
            raise ConfigError(f"output '{text}': {e}.", file=source.file, line=source.outputs_line,
                              where="outputs") from None
    return Graph(name=source.name, role=source.role, file=source.file, steps=tuple(steps),
                 outputs=tuple(outputs), outputs_line=source.outputs_line, params=dict(source.params))
