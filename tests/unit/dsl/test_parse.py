"""DSL text -> graph: table-driven (source, expected) and (source, error) pairs."""
import pytest

from runner.dsl.graph import GPU_COPY, Arith, Call, Const, Gpu, MathCall, Name, Param, Seq, TypedConst, Unary
from runner.dsl.parse import _StepError, parse_output, parse_step

PARSES = [
    ("images = resize(images, resize_x=$size)",
     ("images",), Call("resize", (Name("images"),), (("resize_x", Param("size")),))),
    ("jpegs, labels = readers.file(file_root=$data_root, random_shuffle=True, name=\"Reader\")",
     ("jpegs", "labels"),
     Call("readers.file", (), (("file_root", Param("data_root")), ("random_shuffle", Const(True)),
                               ("name", Const("Reader"))))),
    ("images = fn.crop_mirror_normalize(images, mirror=fn.random.coin_flip(probability=0.5), dtype=types.FLOAT)",
     ("images",), Call("crop_mirror_normalize", (Name("images"),),
                       (("mirror", Call("random.coin_flip", (), (("probability", Const(0.5)),))),
                        ("dtype", Name("FLOAT"))))),
    ("x = random_resized_crop(images.gpu(), size=($s, 224))",
     ("x",), Call("random_resized_crop", (Gpu(Name("images")),),
                  (("size", Seq((Param("s"), Const(224)), tuple_=True)),))),
    ("x = crop_mirror_normalize(y, mean=[0.485 * 255, -1], std=[4 / 3])",
     ("x",), Call("crop_mirror_normalize", (Name("y"),),
                  (("mean", Seq((Arith("*", Const(0.485), Const(255)), Const(-1)))),
                   ("std", Seq((Arith("/", Const(4), Const(3)),)))))),
    ("labels = labels.gpu()", ("labels",), Call(GPU_COPY, (Name("labels"),), ())),
    ("x = resize(y, file='$not_a_param')", ("x",),
     Call("resize", (Name("y"),), (("file", Const("$not_a_param")),))),
    # arithmetic on streams, as DALI's expression examples write it
    ("images = images / 255", ("images",), Arith("/", Name("images"), Const(255))),
    ("out = condition * adjusted + (condition ^ True) * imgs", ("out",),
     Arith("+", Arith("*", Name("condition"), Name("adjusted")),
           Arith("*", Arith("^", Name("condition"), Const(True)), Name("imgs")))),
    ("mask = -images >= $threshold", ("mask",), Arith(">=", Unary("-", Name("images")), Param("threshold"))),
    ("x = ~m", ("x",), Unary("~", Name("m"))),
    ("x = math.clamp(images, 0, hi=255)", ("x",), MathCall("clamp", (Name("images"), Const(0)), (("hi", Const(255)),))),
    ("x = nvidia.dali.math.sqrt(fn.random.uniform(range=[0, 1]))", ("x",),
     MathCall("sqrt", (Call("random.uniform", (), (("range", Seq((Const(0), Const(1)))),)),))),
    ("x = Constant(4).uint16() * cats // types.Constant(20, dtype=types.UINT16)", ("x",),
     Arith("//", Arith("*", TypedConst(Const(4), "UINT16", method="uint16"), Name("cats")),
           TypedConst(Const(20), "UINT16"))),
    ("x = rotate(y, angle=fn.random.uniform(range=[-10, 10]) * 2)", ("x",),
     Call("rotate", (Name("y"),), (("angle", Arith("*", Call("random.uniform", (), (("range", Seq((Const(-10), Const(10)))),)),
                                                   Const(2))),))),
]


@pytest.mark.parametrize("text,targets,call", PARSES, ids=[p[0][:40] for p in PARSES])
def test_parses(text, targets, call):
    step = parse_step(text, 3, 12)
    assert step.targets == targets
    assert step.call == call
    assert (step.index, step.line) == (3, 12)


ERRORS = [
    ("resize(images)", "a step is written `outputs = operator(inputs..., key=value...)`"),
    ("images = resize(images", "syntax error: '(' was never closed"),
    ("images = 3", "the right-hand side must be an operator call"),
    ("images = __import__('os').system('id')", "is not an operator name"),
    ("images = resize(images, size=open('x'))", None),  # a call of an unknown op: parsed, rejected by check
    ("images = resize(images, **opts)", "**kwargs is not supported"),
    ("images = resize(*inputs)", "*args is not supported"),
    ("images = resize(images, size=lambda: 3)", "is not allowed in a pipeline step"),
    ("images = resize(images, size={'a': 1})", "is not allowed in a pipeline step"),
    ("images = resize(images, size=os.environ)", "is not a value"),
    ("images.x = resize(images)", "outputs must be plain names"),
    ("images = resize(images, size=$)", "'$' must be followed by a parameter name"),
    ("$size = resize(images)", "a $parameter cannot be assigned"),
    ("images = resize(images.gpu(1))", ".gpu() takes no arguments"),
    ("a = resize(x); b = resize(a)", "a step is written"),
    ("if c: images = flip(images)", "Python control flow (if, for, while, or DALI's conditionals"),
    ("images = flip(images) if c else images", "Python control flow"),
    ("mask = 0 < images < 128", "a chained comparison asks Python for a bool, which a DALI stream is not"),
    ("mask = images in labels", "DALI compares streams with ==, !=, <, <=, > and >=, not with 'is' or 'in'"),
    ("mask = a and b", "`and`, `or` and `not` need a Python bool, which a DALI stream is not"),
    ("x = images @ w", "is not allowed in a pipeline step"),
    ("x = Constant(4).uint17() * y", "a DALI Constant converts with one of .bool(), .int8(),"),
    ("x = types.Constant(1, types.UINT8, 3) * y", "types.Constant takes a number and, optionally, dtype"),
    ("x = y", "the right-hand side must be an operator call or arithmetic on streams"),
]


@pytest.mark.parametrize("text,message", ERRORS, ids=[e[0][:40] for e in ERRORS])
def test_rejects(text, message):
    if message is None:
        parse_step(text)
        return
    with pytest.raises(_StepError) as err:
        parse_step(text)
    assert message in str(err.value)


def test_outputs():
    assert parse_output("labels.gpu()") == Gpu(Name("labels"))
    assert parse_output("images") == Name("images")
    with pytest.raises(_StepError, match="an output is a stream name"):
        parse_output("resize(images)")
