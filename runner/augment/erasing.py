"""Random erasing (Zhong et al. 2017) with timm's semantics (timm.data.random_erasing.RandomErasing), as DALI operators.

Per image, with chance `probability`, `count` boxes (count uniform in [min_count, max_count]); each box's area is
uniform(min_area, max_area) / count of the image's, its aspect (height / width) log-uniform in [min_aspect,
max_aspect], its size rounded to whole pixels, and it must fit strictly inside the image. timm retries a box that
does not fit up to 10 times, then gives it up; here the 10 attempts are drawn at once, side by side, and the first
that fits is kept, which is the same distribution. The box's corner is uniform over the places it fits. Inside it:
0 (const), one N(0, 1) value per channel (rand), or N(0, 1) per pixel and channel (pixel).

The image sizes are read per sample from the batch's metadata (`DataNode.shape()`), which DALI gives on the CPU
also for GPU images without copying them; every draw is a DALI random operator, so the pipeline's seed fixes it.
"""
from __future__ import annotations

import inspect
import math as pymath

import numpy as np
from nvidia.dali import fn, math, types
from nvidia.dali.pipeline import do_not_convert

from runner.errors import ConfigError, did_you_mean

ATTEMPTS = 10  # timm's tries per box
MODES = ("const", "rand", "pixel")
LAYOUTS = ("CHW", "HWC")


@do_not_convert  # no per-sample `if` here; AutoGraph (when the pipeline has conditionals) would only slow it
def random_erasing(images, probability: float = 0.5, min_area: float = 0.02, max_area: float = 1 / 3,
                   min_aspect: float = 0.3, max_aspect: float | None = None, mode: str = "const", min_count: int = 1,
                   max_count: int | None = None, layout: str = "CHW"):
    """timm's RandomErasing on a batch of normalised float images (`layout` CHW or HWC); the defaults are the
    RandomErasing class's own (timm's train.py passes --remode pixel, --reprob, --recount)."""
    if probability <= 0:
        return images  # timm erases nothing (ResNet Strikes Back A3 sets --reprob 0)
    max_aspect = max_aspect or 1 / min_aspect
    min_count = int(min_count)
    max_count = int(max_count or min_count)
    size = images.shape(dtype=types.FLOAT)
    height, width = size[layout.index("H")], size[layout.index("W")]
    top, left, box_h, box_w = _boxes(height, width, probability, (min_area, max_area),
                                     (pymath.log(min_aspect), pymath.log(max_aspect)), (min_count, max_count))
    if mode == "rand":  # each box its own colour, drawn after the earlier boxes, as timm fills them
        channels = fn.cast(size[layout.index("C"):layout.index("C") + 1], dtype=types.INT32)
        for k in range(max_count):
            images = fn.erase(images, anchor=fn.stack(top[k], left[k]), shape=fn.stack(box_h[k], box_w[k]),
                              axis_names="HW", fill_value=fn.random.normal(shape=channels))
        return images
    anchor = fn.reshape(fn.stack(top, left, axis=1), shape=[-1])  # [top0, left0, top1, left1, ...]
    extent = fn.reshape(fn.stack(box_h, box_w, axis=1), shape=[-1])
    erased = fn.erase(images, anchor=anchor, shape=extent, axis_names="HW", fill_value=0.0)
    if mode == "const":
        return erased
    # pixel: the boxes take fresh N(0, 1) noise, the rest stays as it was (random.normal keeps no layout)
    noise = fn.reshape(fn.random.normal(images), layout=layout)
    return fn.cast_like(erased + (noise - fn.erase(noise, anchor=anchor, shape=extent, axis_names="HW",
                                                   fill_value=0.0)), images)


@do_not_convert
def _boxes(height, width, probability: float, area: tuple[float, float], log_aspect: tuple[float, float],
           count: tuple[int, int]):
    """(top, left, height, width) of each of max_count boxes, per image: vectors of max_count, boxes that are not
    drawn (the image is not erased, the box is past the image's count, or no attempt fit) with height 0."""
    boxes = count[1]
    shape = [boxes, ATTEMPTS]
    erase = fn.random.coin_flip(probability=probability)
    drawn = _uniform_int(count) if count[0] != count[1] else count[0]
    target = _uniform(area, shape) * (height * width) / drawn
    aspect = math.exp(_uniform(log_aspect, shape))
    # timm: int(round(sqrt(...))); floor(x + 0.5) differs only on exact halves
    box_h = math.floor(math.sqrt(target * aspect) + 0.5)
    box_w = math.floor(math.sqrt(target / aspect) + 0.5)
    fits = (box_h < height) & (box_w < width)
    # the first attempt that fits: the fitting attempt with the highest score ATTEMPTS - attempt
    score = fits * types.Constant(np.arange(ATTEMPTS, 0, -1, dtype=np.float32))
    best = fn.expand_dims(fn.reductions.max(score, axes=[1]), axes=[1])
    first = (score == best) & (best > 0)
    kept = erase * (types.Constant(np.arange(boxes, dtype=np.int32)) < drawn)
    box_h = fn.reductions.sum(box_h * first, axes=[1]) * kept
    box_w = fn.reductions.sum(box_w * first, axes=[1]) * kept
    # timm: randint(0, height - h), both ends included
    top = math.min(math.floor(fn.random.uniform(range=[0, 1], shape=[boxes]) * (height - box_h + 1)), height - box_h)
    left = math.min(math.floor(fn.random.uniform(range=[0, 1], shape=[boxes]) * (width - box_w + 1)), width - box_w)
    return top, left, box_h, box_w


def _uniform(bounds: tuple[float, float], shape: list[int]):
    """uniform(low, high) of `shape`; DALI refuses an empty range, where timm's random.uniform returns `low`."""
    low, high = bounds
    if low == high:
        return fn.random.uniform(values=[low], shape=shape)
    return fn.random.uniform(range=[min(low, high), max(low, high)], shape=shape)


def _uniform_int(bounds: tuple[int, int]):
    return fn.random.uniform(values=list(range(bounds[0], bounds[1] + 1)), dtype=types.INT32)


def check_random_erasing(args: dict) -> None:
    """Raise a ConfigError for values RandomErasing cannot use; `where` names the argument, the DSL adds the step."""
    given = {**defaults(random_erasing), **args}
    if not 0 <= given["probability"] <= 1:
        raise ConfigError(f"the chance an image is erased, from 0 to 1; got {given['probability']!r}.",
                          where="argument 'probability'")
    min_area, max_area = given["min_area"], given["max_area"]
    if not 0 < min_area <= max_area <= 1:
        raise ConfigError(f"fractions of the image's area, with 0 < min_area <= max_area <= 1; got "
                          f"min_area={min_area!r}, max_area={max_area!r}.", where="arguments 'min_area' and 'max_area'")
    for name in ("min_aspect", "max_aspect"):
        value = given[name]
        if value is not None and not (_number(value) and value > 0):
            raise ConfigError(f"a box's height / width, a number above 0; got {value!r}.", where=f"argument '{name}'")
    if given["mode"] not in MODES:
        raise ConfigError(f"how a box is filled: const (0), rand (one N(0, 1) value per channel) or pixel (N(0, 1) "
                          f"per pixel and channel); got {given['mode']!r}.{did_you_mean(str(given['mode']), MODES)}",
                          where="argument 'mode'")
    min_count, max_count = given["min_count"], given["max_count"]
    if max_count is not None and not (_number(max_count) and float(max_count).is_integer()):
        raise ConfigError(f"a whole number of boxes, or None for min_count; got {max_count!r}.",
                          where="argument 'max_count'")
    if not 1 <= min_count <= (max_count or min_count):
        raise ConfigError(f"the boxes per erased image, with 1 <= min_count <= max_count; got min_count={min_count!r}, "
                          f"max_count={max_count!r}.", where="arguments 'min_count' and 'max_count'")
    if given["layout"] not in LAYOUTS:
        raise ConfigError(f"the images' layout, CHW or HWC (crop_mirror_normalize's output_layout); got "
                          f"{given['layout']!r}.", where="argument 'layout'")


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def defaults(func) -> dict:
    """A function's keyword defaults by name."""
    return {p.name: p.default for p in inspect.signature(func).parameters.values()
            if p.default is not inspect.Parameter.empty}
