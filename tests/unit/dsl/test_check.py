"""Every class of DSL error, through `runner validate`, with its message pinned."""
import textwrap

import pytest
import yaml

from tests.helpers import run_cli

READ = 'jpegs, labels = readers.file(file_root="/data")'


DECODE = 'images = decoders.image(jpegs, device="mixed", output_type=RGB)'


NORM = 'images = crop_mirror_normalize(images, dtype=FLOAT, output_layout="CHW")'


def write_experiment(project, steps, outputs=("images", "labels"), params=None, extra=""):
    pipe = {"steps": list(steps), "outputs": list(outputs)}
    if params:
        pipe["params"] = params
    body = yaml.safe_dump({"pipelines": {"train": pipe}}, sort_keys=False, width=1000)
    path = project / "experiments" / "exp.yaml"
    path.write_text(body + textwrap.dedent(extra))
    return path


def validate_error(project, capsys, steps, outputs=("images", "labels"), target="auto", **kw):
    path = write_experiment(project, steps, outputs, **kw)
    code, out, err = run_cli(["validate", path, f"trainer.accelerator={target}"], capsys)
    assert code == 2, out + err
    assert "Traceback" not in err
    assert err.startswith("error: ") and err.count("\n") == 1, err  # one paragraph
    return err[len("error: "):].strip()


CASES = [
    # (name, steps, outputs, expected message)
    ("unknown operator",
     [READ, "images = decoders.imag(jpegs)", NORM], None,
     "experiments/exp.yaml:5: step 2 (images = decoders.imag(jpegs)): unknown operator 'decoders.imag'. "
     "Did you mean 'decoders.image'? Operators are DALI's fn names, such as readers.file, decoders.image, "
     "resize, crop_mirror_normalize, random.coin_flip; `runner ops` lists all"),
    ("unqualified operator",
     [READ, "images = decoders.image(jpegs)", "images = flip(images, horizontal=normal())", NORM], None,
     "step 3 (images = flip(images, horizontal=normal())): unknown operator 'normal'. "
     "Did you mean 'random.normal'?"),
    ("unknown argument",
     [READ, "images = decoders.image(jpegs)", "images = resize(images, resize_shortr=256)", NORM], None,
     "step 3 (images = resize(images, resize_shortr=256)): unknown argument 'resize_shortr'. resize takes: "
     "antialias, bytes_per_sample_hint, dtype, interp_type, mag_filter, max_size, min_filter, minibatch_size, "
     "mode, preserve, resize_longer, resize_shorter, "),
    ("did you mean argument",
     [READ, "images = decoders.image(jpegs)", "images = resize(images, resize_shortr=256)", NORM], None,
     "Did you mean 'resize_shorter'?"),
    ("wrong argument type",
     [READ, "images = decoders.image(jpegs)", "images = resize(images, resize_shorter='big')", NORM], None,
     "argument 'resize_shorter' of resize takes a number; got 'big'."),
    ("list for a scalar",
     [READ, "images = decoders.image(jpegs)", "images = resize(images, antialias=[True])", NORM], None,
     "argument 'antialias' of resize takes a single value (True or False), not a list."),
    ("fraction for an int",
     [READ, "images = decoders.image(jpegs)", "images = flip(images, horizontal=0.5)", NORM], None,
     "argument 'horizontal' of flip takes an integer; got 0.5, which DALI would truncate to 0."),
    ("string for a bool",
     [READ, "images = decoders.image(jpegs)", "images = resize(images, size=8, antialias='False')", NORM], None,
     "argument 'antialias' of resize takes True or False; got 'False'."),
    ("enum of the wrong kind",
     [READ, "images = decoders.image(jpegs, output_type=FLOAT)", NORM], None,
     "argument 'output_type' of decoders.image takes an image type (RGB, BGR, GRAY, YCbCr, ANY_DATA); "
     "FLOAT is a data type."),
    ("enum as a string",
     [READ, "images = decoders.image(jpegs)", 'images = crop_mirror_normalize(images, dtype="FLOAT")'], None,
     "argument 'dtype' of crop_mirror_normalize takes a data type (FLOAT, UINT8, FLOAT16, INT32, INT64, "
     "FLOAT64, INT8, INT16, ...), written without quotes; got 'FLOAT'."),
    ("misspelt enum",
     [READ, "images = decoders.image(jpegs, output_type=RBG)", NORM], None,
     "'RBG' is not an image type nor a stream; argument 'output_type' of decoders.image takes one of: RGB, BGR, "
     "GRAY, YCbCr, ANY_DATA. Did you mean 'RGB'?"),
    ("stream for a constant argument",
     [READ, "images = decoders.image(jpegs)", "images = resize(images, dtype=labels)", NORM], None,
     "argument 'dtype' of resize takes a constant (a data type (FLOAT, UINT8, FLOAT16, INT32, INT64, FLOAT64, "
     "INT8, INT16, ...)), not the stream 'labels'."),
    ("undefined stream",
     [READ, "images = decoders.image(jpgs)", NORM], None,
     "step 2 (images = decoders.image(jpgs)): undefined stream 'jpgs'. Did you mean 'jpegs'? "
     "Streams defined so far: jpegs, labels."),
    ("param written as a stream",
     [READ, "images = decoders.image(jpegs)", "images = resize(images, resize_x=size)", NORM], None,
     "undefined stream 'size'. Parameters are written with a dollar sign: $size."),
    ("unknown parameter",
     [READ, "images = decoders.image(jpegs)", "images = resize(images, resize_x=$szie)", NORM], None,
     "unknown parameter $szie. Did you mean 'size'? Parameters of this pipeline: size (declare them under "
     "`params:`)."),
    ("unused stream",
     [READ, "images = decoders.image(jpegs)", "shapes = peek_image_shape(jpegs)", NORM], None,
     "step 3 (shapes = peek_image_shape(jpegs)): stream 'shapes' is never used; use it in a later step, list "
     "it in outputs, or name it _shapes to discard it."),
    ("reassigned before use",
     [READ, "images = decoders.image(jpegs)", "images = decoders.image(jpegs)", NORM], None,
     "step 3 (images = decoders.image(jpegs)): 'images' is assigned again before its value from step 2 was "
     "used; use it first, give one of them another name, or remove step 2."),
    ("used before defined",
     [READ, "images = flip(images)", "images = decoders.image(jpegs)", NORM], None,
     "step 2 (images = flip(images)): stream 'images' is "
     "used before it is defined (at step 3); move this step below step 3."),
    ("cycle",
     [READ, "a = resize(b, resize_x=8)", "b = flip(a)", "images = decoders.image(jpegs)", NORM], ("images", "labels", "b"),
     "step 2 (a = resize(b, resize_x=8)): cycle: a -> b -> a. A pipeline is a graph without cycles: each step "
     "may only use streams defined by the steps above it."),
    ("GPU stream into a CPU-only operator",
     [READ, DECODE, "images = decoders.numpy(images)", NORM], None,
     "step 3 (images = decoders.numpy(images)): stream 'images' (from step 2, decoders.image on the GPU) is on "
     "the GPU but this step runs on the CPU, and DALI cannot copy data back to the CPU; decoders.numpy runs only "
     "on the CPU, so move this step before the data goes to the GPU."),
    ("GPU stream into a CPU step",
     [READ, DECODE, 'images = resize(images, device="cpu", resize_x=8)', NORM], None,
     "is on the GPU but this step runs on the CPU, and DALI cannot copy data back to the CPU; set device=\"gpu\" "
     "on this step."),
    ("no implementation on the device",
     [READ, 'images = decoders.image(jpegs, device="gpu")', NORM], None,
     "step 2 (images = decoders.image(jpegs, device=\"gpu\")): decoders.image has no 'gpu' implementation; it "
     "runs on: cpu, mixed."),
    ("mixed op fed from the GPU",
     [READ, 'images = decoders.image(jpegs.gpu(), device="mixed")', NORM], None,
     "decoders.image with device=\"mixed\" takes CPU input, but 'jpegs.gpu()' is on the GPU."),
    ("bad device",
     [READ, 'images = decoders.image(jpegs, device="tpu")', NORM], None,
     "device must be one of cpu, gpu, mixed; got 'tpu'."),
    ("missing outputs",
     [READ, "images = decoders.image(jpegs)", NORM], (),
     "experiments/exp.yaml:7: outputs: the pipeline has no outputs; list the streams it returns, for example "
     "`outputs: [images, labels]`."),
    ("undefined output",
     [READ, "images = decoders.image(jpegs)", NORM], ("images", "label"),
     "outputs: output 'label' is not a stream of this pipeline. Did you mean 'labels'? Streams: jpegs, labels, "
     "images."),
    ("runner-owned argument",
     ['jpegs, labels = readers.file(file_root="/data", shard_id=0)', "images = decoders.image(jpegs)", NORM], None,
     "'shard_id' is set by the runner from the global rank; remove it from the pipeline (sharding is injected "
     "into every reader)."),
    ("input count",
     [READ, "images = decoders.image(jpegs, labels)", NORM], None,
     "decoders.image takes 1 input stream(s), got 2."),
    ("constant as input",
     [READ, "images = decoders.image(jpegs)", "images = resize(images, 224)", NORM], None,
     "inputs of resize are streams or operator calls; constants go in key=value arguments."),
    ("constant argument given an operator",
     [READ, "images = decoders.image(jpegs, output_type=random.coin_flip())", NORM], None,
     "argument 'output_type' of decoders.image takes a constant (an image type (RGB, BGR, GRAY, YCbCr, "
     "ANY_DATA)), not an operator output."),
    ("required argument",
     [READ, "images = decoders.image(jpegs)", "images = random_resized_crop(images)", NORM], None,
     "random_resized_crop needs argument(s): size."),
    ("arithmetic on a string",
     [READ, "images = decoders.image(jpegs)", 'images = resize(images, resize_x="a" * 2)', NORM], None,
     "arithmetic '*' needs numbers; got 'a' and 2."),
    ("a string as an arithmetic operand",
     [READ, "images = decoders.image(jpegs)", 'images = images * "2"', NORM], None,
     "experiments/exp.yaml:6: step 3 (images = images * \"2\"): operand '2' of '*' is not a number; arithmetic on "
     "streams takes streams, operator calls, numbers (True and False too), lists of numbers and types.Constant."),
    ("an enum as an arithmetic operand",
     [READ, "images = decoders.image(jpegs)", "images = types.FLOAT - images", NORM], None,
     "operand types.FLOAT of '-' is not a number; arithmetic on streams takes"),
    ("a string in a list operand",
     [READ, "images = decoders.image(jpegs)", "images = images * [1, 'a', 3]", NORM], None,
     "operand [1, 'a', 3] of '*' is not a number;"),
    ("a string in a math function",
     [READ, "images = decoders.image(jpegs)", "images = math.clamp(images, 'lo', 255)", NORM], None,
     "operand 'lo' of 'math.clamp' is not a number;"),
    ("unknown math function",
     [READ, "images = decoders.image(jpegs)", "images = math.sqr(images)", NORM], None,
     "step 3 (images = math.sqr(images)): unknown function 'math.sqr'. Did you mean 'math.sqrt'? DALI's math "
     "functions: abs, acos, acosh, asin, asinh, atan, atan2, atanh, cbrt, ceil, clamp, cos,"),
    ("math function arity",
     [READ, "images = decoders.image(jpegs)", "images = dali.math.clamp(images, 0)", NORM], None,
     "math.clamp takes 3 operand(s) (value, lo, hi), got 2."),
    ("math function on numbers only",
     [READ, "images = decoders.image(jpegs)", "images = resize(images, resize_x=math.sqrt(64))", NORM], None,
     "math.sqrt needs a stream among its operands (the output of an operator); DALI's math functions work on "
     "streams, not on numbers alone."),
    ("a constant for a step",
     [READ, "images = decoders.image(jpegs)", "images = 2 * 128", NORM], None,
     "step 3 (images = 2 * 128): the right-hand side is a constant; a step computes a stream: an operator call, or "
     "arithmetic on a stream such as `images = images / 255`."),
    ("arithmetic with an undefined stream",
     [READ, "images = decoders.image(jpegs)", "images = imgs / 255", NORM], None,
     "step 3 (images = imgs / 255): undefined stream 'imgs'. Did you mean 'images'?"),
    ("arithmetic for a constant argument",
     [READ, "images = decoders.image(jpegs)", "images = resize(images, dtype=labels * 2)", NORM], None,
     "argument 'dtype' of resize takes a constant (a data type (FLOAT, UINT8, FLOAT16, INT32, INT64, FLOAT64, "
     "INT8, INT16, ...)), not arithmetic on streams."),
    ("arithmetic assigned to two names",
     [READ, "images = decoders.image(jpegs)", "images, mask = images * 2", NORM], None,
     "arithmetic gives one stream, but 2 names are assigned; write one name on the left."),
    ("a chained comparison",
     [READ, "images = decoders.image(jpegs)", "mask = 0 < images < 128", NORM], None,
     "'0 < images < 128': a chained comparison asks Python for a bool, which a DALI stream is not; compare once "
     "per expression and combine them with &, as in `(x > 0) & (x < 1)`."),
    ("not on a stream",
     [READ, "images = decoders.image(jpegs)", "images = images * (not labels)", NORM], None,
     "'not labels': `and`, `or` and `not` need a Python bool, which a DALI stream is not; combine conditions with "
     "&, | and ^ (`condition ^ True` negates one, as DALI's expr_conditional_and_masking example does)."),
    ("a typed constant of a non-numeric type",
     [READ, "images = decoders.image(jpegs)", "images = images * types.Constant(2, dtype=types.RGB)", NORM], None,
     "'RGB' is not a data type DALI's arithmetic takes; one of: FLOAT, UINT8,"),
    ("a list in types.Constant",
     [READ, "images = decoders.image(jpegs)", "images = images * types.Constant([1, 2, 3])", NORM], None,
     "types.Constant takes a number here; got [1, 2, 3] (a list operand is written as the list itself, as in "
     "`images * [0.5, 1.0, 1.5]`)."),
    ("arithmetic on the GPU into a CPU-only operator",
     [READ, DECODE, "images = images / 255", "images = decoders.numpy(images)", NORM], None,
     "step 4 (images = decoders.numpy(images)): stream 'images' (from step 3, arithmetic on the GPU) is on the GPU "
     "but this step runs on the CPU, and DALI cannot copy data back to the CPU; decoders.numpy runs only on the "
     "CPU, so move this step before the data goes to the GPU."),
    ("python callables are not operators",
     [READ, "images = external_source(jpegs)", NORM], None,
     "external_source calls back into Python code, and a pipeline step cannot name code; read the data with a "
     "reader (readers.file, readers.numpy, ...) and transform it with DALI operators."),
    ("three outputs",
     [READ, "images = decoders.image(jpegs)", NORM], ("images", "labels", "jpegs"),
     "outputs: the train pipeline returns 3 stream(s); the trainer takes two: images (float, CHW) and labels, "
     "as in `outputs: [images, labels]`."),
]


@pytest.mark.parametrize("name,steps,outputs,message", CASES, ids=[c[0] for c in CASES])
def test_error(project, capsys, name, steps, outputs, message):
    params = {"size": 8} if "size" in message or "szie" in message else None
    err = validate_error(project, capsys, steps, outputs if outputs is not None else ("images", "labels"),
                         params=params)
    assert message in err


def test_cpu_only_operator_on_cpu_target(project, capsys):
    steps = [READ, "images = decoders.image(jpegs)", "images = decoders.inflate(images.gpu(), shape=[8])", NORM]
    err = validate_error(project, capsys, steps, target="cpu")
    assert "decoders.inflate has no CPU implementation, and this run has no GPU (it runs on: gpu)." in err


def test_line_numbers_point_at_the_step(project, capsys):
    err = validate_error(project, capsys, [READ, "images = decoders.image(jpegs)", "images = resize(images, bad=1)", NORM])
    assert err.startswith("experiments/exp.yaml:6: step 3 (images = resize(images, bad=1)):")


def test_pipeline_file_error_names_that_file(project, capsys):
    (project / "pipelines" / "mine.yaml").write_text(textwrap.dedent("""\
        params: {data_root: /d}
        steps:
          - jpegs, labels = readers.file(file_root=$data_root)
          - images = decoders.image(jpegs, output_typ=RGB)
        outputs: [images, labels]
        """))
    (project / "experiments" / "e.yaml").write_text("pipelines: {train: {use: mine}}\n")
    code, _, err = run_cli(["validate", "experiments/e.yaml"], capsys)
    assert code == 2
    assert err.startswith("error: pipelines/mine.yaml:4: step 2 (images = decoders.image(jpegs, output_typ=RGB)): "
                          "unknown argument 'output_typ'.")
    assert "Did you mean 'output_type'?" in err


def test_cpu_placement_is_announced_once(project, capsys):
    path = write_experiment(project, [READ, DECODE, "images = resize(images, resize_x=8, resize_y=8)", NORM],
                            ("images", "labels.gpu()"))
    code, out, err = run_cli(["validate", path, "trainer.accelerator=cpu"], capsys)
    assert code == 0, err
    assert err.count("note: no GPU here") == 1
    assert "train steps 2 moved from mixed/gpu to cpu" in err


ACCEPTED = [
    # what DALI 2.4 runs, as its examples write it: deprecated names, Python numbers as DALI converts them,
    # enums by number, layout constants, a stream copied to the GPU by a step of its own
    "images = flip(images, horizontal=True)",
    "images = crop_mirror_normalize(images, mirror=1, mean=128, std=1.0, output_layout=types.NCHW)",
    "images = resize(images, size=8, interp_type=1, antialias=0)",
    "images = jpeg_compression_distortion(images, quality=5.0)",
    "images = flip(images, horizontal=coin_flip(probability=0.5))",
    "images = rotate(images, angle=uniform(range=[-10, 10], seed=3))",
    # arithmetic on streams, as DALI's expression examples write it
    "images = fn.cast(images, dtype=types.FLOAT) / 255",
    "images = images * fn.random.uniform(range=[0.5, 1.5]) + 0.1 - labels.gpu()",
    "images = (0.4 * images + 0.6 * images) / 2",
    "images = -images // types.Constant(2).uint16() % 7 ** 2",
    "images = math.clamp(images * (images > 128) + (fn.random.coin_flip(dtype=types.BOOL) ^ True), 0, 255)",
    "images = math.max(math.sqrt(math.abs(math.sin(images))), math.pow(images, 0.5)) * (~images | 1 & images)",
    "images = rotate(images, angle=fn.random.uniform(range=[-10, 10]) * 2 - $size)",
    "images = images * [0.5, 1, 1.5] + (images >= labels) * (images != 3)",
]


@pytest.mark.parametrize("step", ACCEPTED)
def test_dali_accepted_forms_validate(project, capsys, step):
    path = write_experiment(project, [READ, "images = image_decoder(jpegs, output_type=types.RGB)", step,
                                      "images = images.gpu()"], params={"size": 8})
    code, out, err = run_cli(["validate", path, "trainer.accelerator=cpu"], capsys)
    assert code == 0, err
    assert "note: DALI has deprecated fn.image_decoder (now fn.decoders.image)" in err
