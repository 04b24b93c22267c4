"""runner.augment against timm: random erasing and RandAugment strings, run as real DALI CPU pipelines."""
import importlib.util
import random
import re
import textwrap

import numpy as np
import pytest
import yaml
from nvidia.dali import fn, pipeline_def, types

from runner.augment import random_erasing, timm_auto_augment
from runner.augment.policy import GRAMMAR, RAND_INCREASING_TRANSFORMS, TimmRandAugment, parse_timm_policy
from runner.augment.timm_augment import BINS_PER_UNIT, _op_indices, build_suite, magnitude_bins
from runner.dsl.compile import PipelineArgs, build_pipeline
from runner.errors import ConfigError
from runner.run.validate import validate
from tests.helpers import run_cli

FILL = 5.0  # the constant images' value: any erased pixel differs from it


def erase(batches: int = 8, batch_size: int = 64, seed: int = 1, shape=(3, 64, 64), layout: str = "CHW",
          **kwargs) -> np.ndarray:
    """random_erasing on constant float images: (batches * batch_size, *shape)."""
    @pipeline_def(batch_size=batch_size, num_threads=1, device_id=None, seed=seed)
    def pipe():
        images = fn.reshape(types.Constant(np.full(shape, FILL, dtype=np.float32)), layout=layout)
        return random_erasing(images, layout=layout, **kwargs)

    p = pipe()
    p.build()
    return np.concatenate([np.array(p.run()[0].as_tensor()) for _ in range(batches)])


def box(image: np.ndarray) -> tuple[int, int, int, int]:
    """(top, left, height, width) of the one erased rectangle of a CHW image, checked to be one rectangle through
    every channel."""
    mask = image != FILL
    assert (mask == mask[0]).all()  # the same pixels in every channel
    rows, cols = np.flatnonzero(mask[0].any(1)), np.flatnonzero(mask[0].any(0))
    h, w = len(rows), len(cols)
    assert mask[0].sum() == h * w and rows[-1] - rows[0] == h - 1 and cols[-1] - cols[0] == w - 1
    return rows[0], cols[0], h, w


@pytest.mark.parametrize("probability", [0.25, 0.5, 0.9])
def test_share_of_images_erased_is_the_probability(probability):
    images = erase(batches=16, probability=probability)  # 1024 images: the share's standard error is <= 0.016
    erased = (images != FILL).any(axis=(1, 2, 3))
    assert abs(erased.mean() - probability) < 0.05


def test_boxes_have_timms_area_aspect_and_position():
    images = erase(probability=1.0)  # one box each (max_count defaults to min_count = 1)
    area, size = [], 64 * 64
    centres = []
    for image in images:
        top, left, h, w = box(image)
        assert h < 64 and w < 64  # timm's fit test: strictly inside
        # h = round(sqrt(A r)), w = round(sqrt(A / r)) for A in [0.02, 1/3] of the image, r in [0.3, 1/0.3]
        assert (h - 0.5) * (w - 0.5) <= size / 3 and (h + 0.5) * (w + 0.5) >= 0.02 * size
        assert (h - 0.5) / (w + 0.5) <= 1 / 0.3 and (h + 0.5) / (w - 0.5) >= 0.3
        area.append(h * w / size)
        centres.append(((top + h / 2) / 64, (left + w / 2) / 64))
    area = np.array(area)
    assert area.min() < 0.03 and area.max() > 0.3  # the whole range is drawn
    # E[uniform(0.02, 1/3)] = 0.177, a little less for the boxes that do not fit at the first attempt
    assert 0.15 < area.mean() < 0.185
    assert np.allclose(np.mean(centres, axis=0), 0.5, atol=0.03)  # corners uniform over where the box fits


def test_box_bounds_follow_the_arguments():
    images = erase(batches=4, probability=1.0, min_area=0.1, max_area=0.2, min_aspect=0.5, max_aspect=1.0)
    size = 64 * 64
    for image in images:
        _, _, h, w = box(image)
        assert (h - 0.5) * (w - 0.5) <= 0.2 * size and (h + 0.5) * (w + 0.5) >= 0.1 * size
        assert (h - 0.5) / (w + 0.5) <= 1.0 and (h + 0.5) / (w - 0.5) >= 0.5


def test_const_mode_fills_exact_zeros():
    images = erase(batches=2, probability=1.0, mode="const")
    values = np.unique(images)
    assert list(values) == [0.0, FILL]


def test_pixel_mode_fills_standard_normal_noise_per_pixel():
    images = erase(batches=4, probability=1.0, mode="pixel")
    noise = images[images != FILL]
    assert noise.size > 100_000
    assert abs(noise.mean()) < 0.02 and abs(noise.std() - 1) < 0.02
    top, left, h, w = box(images[0])
    patch = images[0][:, top:top + h, left:left + w]
    assert (patch.reshape(3, -1).std(axis=1) > 0.5).all()  # per pixel, not one value per box


def test_rand_mode_gives_each_box_one_normal_colour_and_counts_boxes_uniformly():
    images = erase(batches=8, probability=1.0, mode="rand", max_count=3)
    colours, counts = [], []
    for image in images:
        erased = image[0] != FILL
        per_box = np.unique(image[:, erased], axis=1)  # (3, boxes): each box one colour through its pixels
        colours.append(per_box)
        counts.append(per_box.shape[1])
        assert erased.mean() <= 1 / 3 + 0.05  # boxes of area uniform(0.02, 1/3) / count each
    share = np.bincount(counts, minlength=4)[1:] / len(counts)  # visible boxes: overlaps can hide one, rarely
    assert np.allclose(share, 1 / 3, atol=0.06)
    values = np.concatenate(colours, axis=1)
    assert abs(values.mean()) < 0.1 and abs(values.std() - 1) < 0.1


def test_hwc_layout_erases_the_same_pixels_in_every_channel():
    images = erase(batches=2, probability=1.0, shape=(48, 64, 3), layout="HWC")
    mask = images != FILL
    assert (mask == mask[..., :1]).all()
    assert mask.any(axis=(1, 2, 3)).all()
    assert not mask[:, :, :, 0].all(axis=(1, 2)).any()  # boxes, not whole images


def test_same_seed_same_boxes_other_seed_other_boxes():
    a = erase(batches=2, seed=11, probability=0.5, mode="pixel", max_count=2)
    b = erase(batches=2, seed=11, probability=0.5, mode="pixel", max_count=2)
    c = erase(batches=2, seed=12, probability=0.5, mode="pixel", max_count=2)
    assert np.array_equal(a, b)
    assert not np.array_equal(a, c)


def test_probability_zero_leaves_the_images_as_they_are():
    images = erase(batches=1, probability=0.0)
    assert (images == FILL).all()


TIMM_STRINGS = ["rand-m9-mstd0.5-inc1", "rand-m7-n3-mstd0.5", "rand-m6-mstd0.5-inc1", "rand-m9-mstd101", "rand",
                "rand-m15-mmax20-mstd1", "rand-n1-p1.0", "rand-p0.3-m5", "rand-m9-mstd0.5-tweights", "rand-m9-t3a",
                "rand-m9-n3-mstd0.5-t3aw-inc1", "rand-m10-n0", "rand-mmax0-m12", "rand-inc0-m3-mstd0",
                "rand-m9-mstd1e5", "rand-inc2"]


@pytest.mark.parametrize("text", TIMM_STRINGS)
def test_policy_parser_reads_strings_as_timm_does(text):
    from timm.data.auto_augment import rand_augment_transform

    theirs = rand_augment_transform(text, {"translate_const": 100, "img_mean": (128, 128, 128)})
    ours = parse_timm_policy(text)
    op = theirs.ops[0]
    assert ours.n == theirs.num_layers
    assert ours.m == op.magnitude and ours.p == op.prob
    assert ours.mstd == op.magnitude_std and ours.mmax == op.magnitude_max
    assert ours.ceiling == (op.magnitude_max or 10)
    assert list(ours.ops) == [o.name for o in theirs.ops]
    if theirs.choice_weights is None:
        assert ours.weights is None
    else:
        assert np.allclose(ours.weights, theirs.choice_weights)
    inc = re.search(r"inc(\d+)", text)
    assert ours.inc == (inc is not None and bool(int(inc.group(1))))
    if "-t" not in text:  # timm's op set says whether it read inc
        assert (ours.ops == RAND_INCREASING_TRANSFORMS) == ours.inc


BAD_STRINGS = [
    ("rand-m9-q3", "'rand-m9-q3' has an unknown section 'q3'. " + GRAMMAR),
    ("rand-m9-msd0.5", "'rand-m9-msd0.5' has an unknown section 'msd0.5'. Did you mean 'mstd'? " + GRAMMAR),
    ("rand-m9.5", "'rand-m9.5' has the section 'm9.5': m (magnitude) takes an integer, got '9.5'. " + GRAMMAR),
    ("rand-inc", "'rand-inc' has the section 'inc' without a value (timm would ignore it); write inc and a number, "
     "as in 'inc1'. " + GRAMMAR),
    ("rand--m9", "'rand--m9' has an empty section (two dashes in a row). " + GRAMMAR),
    ("rand-m9-m7", "'rand-m9-m7' gives 'm' twice (m9 and m7); give it once. " + GRAMMAR),
    ("rand-w0", "'rand-w0' has the section 'w0': timm removed the 'w' key; weighted op choice is the section "
     "'tweights'. " + GRAMMAR),
    ("rand-m9-tweight", "'rand-m9-tweight' has the section 'tweight': unknown op set 'weight' (timm would fall back "
     "to its default set without a word); t takes weights, 3a or 3aw. Did you mean 'weights'?"),
    ("rand-n16-tweights", "'rand-n16-tweights' asks for n=16 ops per image from the weighted set 'tweights', which "
     "timm draws without replacement from its 15 ops; use n15 or fewer."),
    ("rnad-m9", "'rnad-m9' does not start with 'rand'. Did you mean 'rand'? " + GRAMMAR),
    ("augmix-m5-w4-d2", "'augmix-m5-w4-d2' is timm's AugMix, which blends several augmentation chains per image and "
     "has no DALI counterpart here; only timm's RandAugment strings compile. " + GRAMMAR),
    ("original-mstd0.5", "'original-mstd0.5' is timm's AutoAugment policy 'original', which this step does not "
     "compile; DALI's own ImageNet AutoAugment policy is the step auto_aug.auto_augment_image_net. " + GRAMMAR),
    ("trivialaugment", "'trivialaugment' is not a timm string: timm has no TrivialAugment string; DALI's "
     "TrivialAugment Wide is the step auto_aug.trivial_augment_wide. " + GRAMMAR),
]


@pytest.mark.parametrize("text,message", BAD_STRINGS, ids=[b[0] for b in BAD_STRINGS])
def test_invalid_policy_strings_say_why(text, message):
    with pytest.raises(ConfigError) as e:
        parse_timm_policy(text)
    assert str(e.value) == message


def test_grammar_names_every_section_and_an_example():
    assert GRAMMAR == (
        "A timm RandAugment string is 'rand' then dash-separated sections in any order: m<int> magnitude (default "
        "10), n<int> ops per image (default 2), mstd<float> magnitude noise std (default 0; above 100: uniform in "
        "[0, m]), mmax<int> magnitude ceiling (default 10), inc<0|1> timm's increasing op set (default 0), p<float> "
        "the chance each op is applied (default 0.5), t<name> the op set (weights, 3a, 3aw); for example "
        "'rand-m9-mstd0.5-inc1'.")


def draw(build, batches: int = 8, batch_size: int = 256, seed: int = 5) -> np.ndarray:
    @pipeline_def(batch_size=batch_size, num_threads=1, device_id=None, seed=seed)
    def pipe():
        return build()

    p = pipe()
    p.build()
    return np.concatenate([np.array(p.run()[0].as_tensor()) for _ in range(batches)])


def timm_magnitudes(text: str, count: int) -> np.ndarray:
    """The magnitudes timm's own AugmentOp draws for `text` (its level function records them)."""
    from timm.data.auto_augment import rand_augment_transform

    op = rand_augment_transform(text).ops[3]  # Rotate: an op with a level function
    drawn = []
    op.prob, op.level_fn = 1.0, lambda level, _hparams: drawn.append(level) or (0.0,)
    op.aug_fn = lambda img, *args, **kwargs: img
    random.seed(0)
    for _ in range(count):
        op(None)
    return np.array(drawn)


@pytest.mark.parametrize("text", ["rand-m9-mstd0.5", "rand-m9-mstd2", "rand-m7-mstd101", "rand-m15-mstd3-mmax20"])
def test_magnitude_noise_per_sample_is_timms(text):
    policy = parse_timm_policy(text)
    ours = draw(lambda: magnitude_bins(policy)) / BINS_PER_UNIT  # (2048 images, n=2 ops)
    theirs = timm_magnitudes(text, 20_000)
    # 4096 draws: the mean's standard error is std / 64; rounding to 0.1 adds 0.03 to the std at most
    assert abs(ours.mean() - theirs.mean()) < 4 * theirs.std() / 64 + 0.01
    assert abs(ours.std() - theirs.std()) < 0.06 * theirs.std() + 0.03
    at_ceiling = (ours >= policy.ceiling).mean()
    assert abs(at_ceiling - (theirs >= policy.ceiling).mean()) < 0.03
    assert abs(np.corrcoef(ours[:, 0], ours[:, 1])[0, 1]) < 0.1  # each op draws its own
    assert ours.min() >= 0 and ours.max() <= policy.ceiling


def test_no_noise_gives_one_bin():
    assert magnitude_bins(parse_timm_policy("rand-m9")) == 9 * BINS_PER_UNIT
    assert magnitude_bins(parse_timm_policy("rand-m15-mstd0")) == 10 * BINS_PER_UNIT  # clipped, as timm does


def test_ops_are_drawn_uniformly_and_skipped_with_chance_p():
    policy = parse_timm_policy("rand-m9-n2")
    index = draw(lambda: _op_indices(policy, identity=len(policy.ops)))
    share = np.bincount(index.ravel(), minlength=16) / index.size
    assert abs(share[15] - 0.5) < 0.04  # p = 0.5: half the ops are skipped
    assert np.allclose(share[:15], 0.5 / 15, atol=0.012)


def test_weighted_sets_draw_without_replacement_by_weight():
    policy = parse_timm_policy("rand-n3-p1-tweights")
    index = draw(lambda: _op_indices(policy, identity=len(policy.ops)))
    assert all(len(set(row)) == 3 for row in index)
    rng = np.random.default_rng(0)  # timm's own call
    theirs = np.array([rng.choice(15, 3, replace=False, p=policy.weights) for _ in range(20_000)])
    for layer in range(3):
        ours_share = np.bincount(index[:, layer], minlength=15) / len(index)
        their_share = np.bincount(theirs[:, layer], minlength=15) / len(theirs)
        assert np.abs(ours_share - their_share).max() < 0.035


def smooth_image() -> np.ndarray:
    from PIL import Image, ImageFilter

    pixels = np.random.default_rng(0).integers(0, 256, (40, 48, 3), dtype=np.uint8)
    return np.array(Image.fromarray(pixels).filter(ImageFilter.GaussianBlur(2)))


def run_op(name: str, level: float, negate: bool) -> np.ndarray:
    from nvidia.dali.auto_aug.core import signed_bin

    suite, bins = build_suite(TimmRandAugment(ops=(name,)))
    aug, image = suite[0], smooth_image()

    def build():
        data = fn.reshape(types.Constant(image), layout="HWC")
        magnitude = round(level * BINS_PER_UNIT)
        if aug.randomly_negate:
            magnitude = signed_bin(magnitude, random_sign=fn.random.uniform(values=[int(negate)], dtype=types.INT32))
        return aug(data, magnitude_bin=magnitude, num_magnitude_bins=bins, shape=[40, 48], fill_value=128)

    return draw(build, batches=1, batch_size=1)[0]


def timm_op(name: str, level: float) -> np.ndarray:
    import timm.data.auto_augment as taa
    from PIL import Image

    op = taa.AugmentOp(name, prob=1.0, magnitude=level,
                       hparams={"img_mean": (128, 128, 128), "interpolation": Image.BILINEAR})
    keep_sign = taa._randomly_negate
    taa._randomly_negate = lambda v: v
    try:
        return np.array(op(Image.fromarray(smooth_image())))
    finally:
        taa._randomly_negate = keep_sign


# (op, how close to timm's pixels: "equal", a bound on the largest difference, or a share within 1 level)
OP_CASES = [(n, "equal") for n in ("Invert", "Posterize", "PosterizeIncreasing", "Solarize", "SolarizeIncreasing",
                                    "SolarizeAdd")] + \
           [(n, 1) for n in ("AutoContrast", "Brightness", "Color", "Contrast", "BrightnessIncreasing",
                             "ColorIncreasing", "ContrastIncreasing")] + \
           [("Sharpness", "interior"), ("SharpnessIncreasing", "interior"), ("Desaturate", 2), ("GaussianBlur", 5)] + \
           [(n, "warp") for n in ("Rotate", "ShearX", "ShearY", "TranslateXRel", "TranslateYRel")]


@pytest.mark.parametrize("level", [3, 7])
@pytest.mark.parametrize("name,close", OP_CASES, ids=[c[0] for c in OP_CASES])
def test_each_op_does_what_timms_does(name, close, level):
    theirs = timm_op(name, level).astype(int)
    # DALI's forward warp by +s is PIL's inverse warp by -s: the fair sign coin makes them the same distribution
    ours = run_op(name, level, negate=name.startswith(("Shear", "Translate"))).astype(int)
    diff = np.abs(ours - theirs)
    if close == "equal":
        assert diff.max() == 0
    elif close == "interior":  # DALI's sharpness filters the 1-pixel border too, PIL keeps it
        assert diff[1:-1, 1:-1].max() <= 1 and diff.max() <= 5
    elif close == "warp":  # bilinear both; pixel-centre conventions differ along the filled edges
        assert (diff <= 1).mean() > 0.95 and diff.mean() < 1
    else:
        assert diff.max() <= close


def test_equalize_follows_opencv_not_pil():
    diff = np.abs(run_op("Equalize", 5, False).astype(int) - timm_op("Equalize", 5).astype(int))
    assert 0 < diff.mean() < 8  # the known difference of DALI's equalize (see docs/pipelines.md)


def augment_batch(policy: str, seed: int, batch_size: int = 8) -> np.ndarray:
    image = smooth_image()

    @pipeline_def(batch_size=batch_size, num_threads=1, device_id=None, seed=seed, enable_conditionals=True)
    def pipe():
        return timm_auto_augment(fn.reshape(types.Constant(image), layout="HWC"), policy=policy)

    p = pipe()
    p.build()
    return np.array(p.run()[0].as_tensor())


def test_policy_draws_per_sample_and_repeats_with_the_seed():
    a, b, c = (augment_batch("rand-m9-mstd0.5-t3a-p1", seed) for seed in (3, 3, 4))
    assert np.array_equal(a, b) and not np.array_equal(a, c)
    assert len({x.tobytes() for x in a}) > 4  # one image in, different ops per sample out


@pytest.mark.parametrize("policy", ["rand-m9-p0", "rand-m9-n0"])
def test_policies_that_apply_nothing_leave_images_alone(policy):
    assert (augment_batch(policy, seed=1) == smooth_image()).all()


READ = 'jpegs, labels = readers.file(file_root="/data")'


DECODE = "images = decoders.image(jpegs, output_type=RGB)"


NORM = 'images = crop_mirror_normalize(images, dtype=FLOAT, output_layout="CHW")'


def validate_error(project, capsys, steps) -> str:
    body = yaml.safe_dump({"pipelines": {"train": {"steps": steps, "outputs": ["images", "labels"]}}},
                          sort_keys=False, width=1000)
    (project / "experiments" / "exp.yaml").write_text(body)
    code, out, err = run_cli(["validate", "experiments/exp.yaml", "trainer.accelerator=cpu"], capsys)
    assert code == 2 and err.startswith("error: ") and err.count("\n") == 1, out + err
    return err[len("error: "):].strip()


DSL_ERRORS = [
    ("bad policy", [READ, DECODE, 'images = augment.timm_auto_augment(images, policy="rand-m9-q3")', NORM],
     "experiments/exp.yaml:6: step 3 (images = augment.timm_auto_augment(images, policy=\"rand-m9-q3\")): argument "
     "'policy' of augment.timm_auto_augment: 'rand-m9-q3' has an unknown section 'q3'. " + GRAMMAR),
    ("policy not a string", [READ, DECODE, "images = augment.timm_auto_augment(images, policy=9)", NORM],
     "step 3 (images = augment.timm_auto_augment(images, policy=9)): argument 'policy' of "
     "augment.timm_auto_augment takes a string; got 9."),
    ("misspelt erasing argument", [READ, DECODE, NORM, "images = augment.random_erasing(images, probabilty=0.25)"],
     "experiments/exp.yaml:7: step 4 (images = augment.random_erasing(images, probabilty=0.25)): unknown argument "
     "'probabilty'. augment.random_erasing takes: probability, min_area, max_area, min_aspect, max_aspect, mode, "
     "min_count, max_count, layout, device. Did you mean 'probability'?"),
    ("erasing probability type", [READ, DECODE, NORM, 'images = augment.random_erasing(images, probability="high")'],
     "argument 'probability' of augment.random_erasing takes a number; got 'high'."),
    ("erasing probability range", [READ, DECODE, NORM, "images = augment.random_erasing(images, probability=1.5)"],
     "step 4 (images = augment.random_erasing(images, probability=1.5)): argument 'probability' of "
     "augment.random_erasing: the chance an image is erased, from 0 to 1; got 1.5."),
    ("erasing mode", [READ, DECODE, NORM, 'images = augment.random_erasing(images, mode="pixels")'],
     "argument 'mode' of augment.random_erasing: how a box is filled: const (0), rand (one N(0, 1) value per "
     "channel) or pixel (N(0, 1) per pixel and channel); got 'pixels'. Did you mean 'pixel'?"),
    ("erasing areas", [READ, DECODE, NORM, "images = augment.random_erasing(images, min_area=0.5, max_area=0.4)"],
     "arguments 'min_area' and 'max_area' of augment.random_erasing: fractions of the image's area, with 0 < "
     "min_area <= max_area <= 1; got min_area=0.5, max_area=0.4."),
    ("erasing counts", [READ, DECODE, NORM, "images = augment.random_erasing(images, min_count=3, max_count=2)"],
     "arguments 'min_count' and 'max_count' of augment.random_erasing: the boxes per erased image, with 1 <= "
     "min_count <= max_count; got min_count=3, max_count=2."),
    ("erasing layout", [READ, DECODE, NORM, 'images = augment.random_erasing(images, layout="NCHW")'],
     "argument 'layout' of augment.random_erasing: the images' layout, CHW or HWC (crop_mirror_normalize's "
     "output_layout); got 'NCHW'."),
    ("erasing aspect", [READ, DECODE, NORM, "images = augment.random_erasing(images, max_aspect=-1)"],
     "argument 'max_aspect' of augment.random_erasing: a box's height / width, a number above 0; got -1."),
    ("misspelt step", [READ, DECODE, NORM, "images = augment.random_erase(images)"],
     "unknown operator 'augment.random_erase'. Did you mean 'augment.random_erasing'?"),
    ("a Python step has no name", [READ, DECODE, NORM, 'images = augment.random_erasing(images, name="re")'],
     "unknown argument 'name'. augment.random_erasing takes: probability,"),
]


@pytest.mark.parametrize("name,steps,message", DSL_ERRORS, ids=[c[0] for c in DSL_ERRORS])
def test_dsl_checks_the_steps_before_anything_runs(project, capsys, name, steps, message):
    assert message in validate_error(project, capsys, steps)


def test_only_the_policy_needs_conditionals(project):
    def graph(step):
        path = project / "experiments" / "c.yaml"
        path.write_text(yaml.safe_dump({"pipelines": {"train": {
            "steps": [READ, DECODE, step, NORM], "outputs": ["images", "labels"]}}}))
        return validate(path, accelerator="cpu").graphs["train"]

    assert graph("images = augment.timm_auto_augment(images)").conditionals
    assert not graph("images = augment.random_erasing(images, layout=\"HWC\")").conditionals


def test_runner_ops_lists_and_describes_the_steps(capsys):
    code, out, _ = run_cli(["ops", "--filter", "augment."], capsys)
    assert code == 0 and "augment.random_erasing" in out and "augment.timm_auto_augment" in out
    code, out, _ = run_cli(["ops", "augment.timm_auto_augment"], capsys)
    assert code == 0
    assert "runner's composition of DALI operators; needs conditionals, enabled automatically" in out
    code, out, _ = run_cli(["ops", "augment.random_erasing"], capsys)
    assert "(runner's composition of DALI operators)" in out and "timm --reprob" in out


def test_shipped_pipeline_compiles_to_runnable_code_with_the_same_tensors(project, image_dataset, tmp_path, capsys):
    (project / "experiments" / "t.yaml").write_text(textwrap.dedent(f"""\
        data: {{root: {image_dataset}, batch_size: 4, num_threads: 1}}
        seed: 7
        pipelines: {{train: {{use: imagenet_train_timm, params: {{size: 32, reprob: 1.0, recount: 2}}}}}}
        """))
    out_file = tmp_path / "timm_pipeline.py"
    code, _, err = run_cli(["compile", "experiments/t.yaml", "trainer.accelerator=cpu", "-o", out_file], capsys)
    assert code == 0, err
    source = out_file.read_text()
    assert "from runner import augment\n" in source
    assert "@pipeline_def(enable_conditionals=True)" in source
    assert "images = fn.flip(images, horizontal=fn.random.coin_flip(probability=0.5))" in source
    assert "images = augment.timm_auto_augment(images, policy=policy, shape=[size, size])" in source
    assert "images = augment.random_erasing(images, probability=reprob, mode=remode, max_count=recount)" in source
    assert 'policy="rand-m9-mstd0.5-inc1", reprob=1.0, remode="pixel", recount=2' in source
    spec = importlib.util.spec_from_file_location("timm_pipeline", out_file)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    emitted = module.train_pipeline(**module.PIPELINE_ARGS)
    emitted.build()
    graph = validate(project / "experiments" / "t.yaml", accelerator="cpu").graphs["train"]
    ours = build_pipeline(graph, PipelineArgs(**module.PIPELINE_ARGS))
    for _ in range(2):
        (a, la), (b, lb) = ours.run(), emitted.run()
        a, b = np.array(a.as_tensor()), np.array(b.as_tensor())
        assert a.shape == (4, 3, 32, 32) and a.dtype == np.float32
        assert np.array_equal(a, b) and np.array_equal(np.array(la.as_tensor()), np.array(lb.as_tensor()))
