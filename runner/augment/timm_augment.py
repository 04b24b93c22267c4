"""timm's RandAugment, compiled to DALI's automatic-augmentation suite (nvidia.dali.auto_aug).

timm draws, for each of `n` ops per image, an op from its set, applies it with chance `p`, at a magnitude
~ N(m, mstd) clipped to [0, mmax or 10] (uniform in [0, m] for mstd > 100), and maps that magnitude to the op's
parameter with its `_*_level_to_arg` functions. Here DALI's RNG draws the same per sample: the op index, the
coin, the magnitude and its sign are DALI random operators, and DALI's `auto_aug.core` turns a per-sample
magnitude bin into the op's parameter. The bins are timm's magnitude scale in steps of 0.1 (so a drawn
magnitude is rounded to 0.1), and each bin's parameter is timm's own level function of that magnitude.
"""
from __future__ import annotations

import numpy as np
from nvidia.dali import fn, math, types
from nvidia.dali.auto_aug import augmentations as a
from nvidia.dali.auto_aug.core import augmentation, select, signed_bin
from nvidia.dali.pipeline import do_not_convert

from runner.augment.policy import LEVEL_DENOM, TimmRandAugment, parse_timm_policy

BINS_PER_UNIT = 10  # magnitude bins per unit of timm's magnitude: drawn magnitudes are rounded to 0.1


@do_not_convert
def _f32(x) -> np.ndarray:
    return np.array(x, dtype=np.float32)


# timm's level functions (timm/data/auto_augment.py, `_*_level_to_arg`); `level` arrives signed for the ops timm
# negates at random, since DALI's signed bins do timm's `_randomly_negate`. Called once per bin while the graph is
# built, so AutoGraph (DALI's conditionals) is told to leave them as they are: converted, they cost seconds.
@do_not_convert
def _rotate(level):
    return _f32(level / LEVEL_DENOM * 30.0)


@do_not_convert
def _shear(level):
    return _f32([level / LEVEL_DENOM * 0.3, 0.0])


@do_not_convert
def _shear_y(level):
    return _f32([0.0, level / LEVEL_DENOM * 0.3])


@do_not_convert
def _translate_x(level):
    return _f32([level / LEVEL_DENOM * 0.45, 0.0])  # timm's translate_pct default, a fraction of the width


@do_not_convert
def _translate_y(level):
    return _f32([0.0, level / LEVEL_DENOM * 0.45])


@do_not_convert
def _enhance(level):
    return _f32(level / LEVEL_DENOM * 1.8 + 0.1)


@do_not_convert
def _enhance_increasing(level):
    return _f32(max(0.1, 1.0 + level / LEVEL_DENOM * 0.9))


@do_not_convert
def _sharpness(level):
    return a.sharpness_kernel_shifted(_enhance(level))  # PIL's blend of the smoothed image and the image


@do_not_convert
def _sharpness_increasing(level):
    return a.sharpness_kernel_shifted(_enhance_increasing(level))


@do_not_convert
def _bits_mask(bits: int) -> np.ndarray:
    """PIL's posterize mask for `bits` kept bits, at least 1: timm's 0 (PosterizeIncreasing at magnitude 10) fails
    in Pillow 13 ("bits must be between or equal to 1 and 8") and was a black image in older Pillow."""
    bits = min(8, max(1, bits))
    return np.array((0xFF << (8 - bits)) & 0xFF, dtype=np.uint8)


@do_not_convert
def _posterize(level):
    return _bits_mask(int(level / LEVEL_DENOM * 4))


@do_not_convert
def _posterize_increasing(level):
    return _bits_mask(4 - int(level / LEVEL_DENOM * 4))


@do_not_convert
def _solarize(level):
    return _f32(min(256, int(level / LEVEL_DENOM * 256)))


@do_not_convert
def _solarize_increasing(level):
    return _f32(256 - min(256, int(level / LEVEL_DENOM * 256)))


@do_not_convert
def _solarize_add(level):
    return np.array(min(128, int(level / LEVEL_DENOM * 110)), dtype=np.uint8)


@do_not_convert
def _desaturate(level):
    kept = min(1.0, max(0.5, 0.5 + 0.5 * level / LEVEL_DENOM))  # timm's _minmax_level_to_arg(0.5, 1.0)
    return _f32(1.0 - kept)


@do_not_convert
def _blur_sigma(level):
    return _f32(min(2.0, max(0.1, 0.1 + 1.9 * level / LEVEL_DENOM)))  # PIL's GaussianBlur radius is its sigma


@augmentation
def _gaussian_blur(data, sigma):
    return fn.gaussian_blur(data, sigma=sigma)


# timm op -> (DALI augmentation, negated at random as timm does, timm's level function); None: no magnitude
TIMM_OPS = {
    "AutoContrast": (a.auto_contrast, False, None),
    "Equalize": (a.equalize, False, None),
    "Invert": (a.invert, False, None),
    "Rotate": (a.rotate, True, _rotate),
    "Posterize": (a.posterize, False, _posterize),
    "PosterizeIncreasing": (a.posterize, False, _posterize_increasing),
    "Solarize": (a.solarize, False, _solarize),
    "SolarizeIncreasing": (a.solarize, False, _solarize_increasing),
    "SolarizeAdd": (a.solarize_add, False, _solarize_add),
    "Color": (a.color, False, _enhance),
    "ColorIncreasing": (a.color, True, _enhance_increasing),
    "Contrast": (a.contrast, False, _enhance),
    "ContrastIncreasing": (a.contrast, True, _enhance_increasing),
    "Brightness": (a.brightness, False, _enhance),
    "BrightnessIncreasing": (a.brightness, True, _enhance_increasing),
    "Sharpness": (a.sharpness, False, _sharpness),
    "SharpnessIncreasing": (a.sharpness, True, _sharpness_increasing),
    "ShearX": (a.shear_x, True, _shear),
    "ShearY": (a.shear_y, True, _shear_y),
    "TranslateXRel": (a.translate_x, True, _translate_x),
    "TranslateYRel": (a.translate_y, True, _translate_y),
    "Desaturate": (a.color, False, _desaturate),
    "GaussianBlur": (_gaussian_blur, False, _blur_sigma),
}


@do_not_convert
def build_suite(policy: TimmRandAugment) -> tuple[list, int]:
    """DALI augmentations for the policy's ops, in its order, then identity (an op skipped by its coin); and the
    number of magnitude bins, whose bin b is timm's magnitude b / BINS_PER_UNIT."""
    bins = policy.ceiling * BINS_PER_UNIT + 1
    levels = np.arange(bins, dtype=np.float64) / BINS_PER_UNIT
    suite = []
    for name in policy.ops:
        base, negate, level_fn = TIMM_OPS[name]
        if level_fn is None:
            suite.append(base.augmentation(name=name))
        else:
            suite.append(base.augmentation(mag_range=levels, randomly_negate=negate, mag_to_param=level_fn,
                                           name=name))
    return suite + [a.identity], bins


def timm_auto_augment(images, policy: str = "rand-m9-mstd0.5-inc1", shape=None, fill_value: float = 128,
                      interp_type=None):
    """timm's RandAugment string `policy` on uint8 HWC images (DALI's auto_aug input): per image, n ops of timm's set,
    each applied with chance p at a magnitude ~ N(m, mstd) clipped to [0, mmax or 10], as timm draws it.

    `shape` ([height, width] or a stream) scales the relative translations; by default each image's own, read from
    the batch's metadata. `fill_value` pads rotations, shears and translations (timm: 128, or the dataset mean
    with create_transform); `interp_type` is DALI's warp interpolation (INTERP_LINEAR by default).
    """
    config = parse_timm_policy(policy)
    if config.n == 0 or config.p <= 0:
        return images  # timm applies nothing
    suite, bins = build_suite(config)
    if shape is None:
        shape = images.shape(dtype=types.FLOAT)[0:2]
    op_index = _op_indices(config, identity=len(suite) - 1)
    magnitude = magnitude_bins(config)
    # one sign per op applied, drawn once for the image: timm's _randomly_negate
    sign = fn.random.uniform(values=[0, 1], dtype=types.INT32, shape=[config.n])
    magnitude = signed_bin(magnitude, random_sign=sign)
    for layer in range(config.n):
        images = select(suite, op_index[layer], data=images, magnitude_bin=magnitude[layer], num_magnitude_bins=bins,
                        shape=shape, fill_value=fill_value, interp_type=interp_type)
    return images


@do_not_convert
def magnitude_bins(config: TimmRandAugment):
    """Each op's magnitude bin per image (a vector of n), or one int when timm draws no noise."""
    ceiling = config.ceiling
    if config.mstd == 0 or (config.mstd == float("inf") and config.m == 0):
        return round(min(max(config.m, 0), ceiling) * BINS_PER_UNIT)
    if config.mstd == float("inf"):
        level = fn.random.uniform(range=[0, config.m], shape=[config.n])
    else:
        level = fn.random.normal(mean=config.m, stddev=config.mstd, shape=[config.n])
    level = math.clamp(level, 0, ceiling)  # timm: max(0, min(magnitude, mmax or 10))
    return fn.cast(math.floor(level * BINS_PER_UNIT + 0.5), dtype=types.INT32)


@do_not_convert
def _op_indices(config: TimmRandAugment, identity: int):
    """The op each of the n layers applies per image; `identity` where the layer's coin (chance p) says skip."""
    if config.weights is None:  # timm: np.random.choice with replacement
        index = fn.random.uniform(values=list(range(len(config.ops))), dtype=types.INT32, shape=[config.n])
    else:
        index = _weighted_without_replacement(config.weights, config.n)
    if config.p >= 1:
        return index
    applied = fn.random.coin_flip(probability=config.p, shape=[config.n])
    return index * applied + identity * (1 - applied)


@do_not_convert
def _weighted_without_replacement(weights: tuple[float, ...], n: int):
    """n distinct op indices, drawn by `weights` one after another (numpy's choice(replace=False, p=weights)):
    the n largest of log(weight) + Gumbel noise, in order (the Gumbel-top-k trick)."""
    count = len(weights)
    uniform = fn.random.uniform(range=[0, 1], shape=[count])
    keys = types.Constant(np.log(np.array(weights, dtype=np.float32))) - math.log(-math.log(uniform))
    positions = types.Constant(np.arange(count, dtype=np.float32))
    chosen = []
    for _ in range(n):
        first = keys == fn.reductions.max(keys)
        chosen.append(fn.cast(fn.reductions.sum(first * positions), dtype=types.INT32))
        keys = keys - first * 1e9  # out of the running for the next layers
    return fn.stack(*chosen)
