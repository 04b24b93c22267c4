"""timm's RandAugment strings (`rand-m9-mstd0.5-inc1`) -> a typed policy, as timm's `rand_augment_transform` reads them.

Plain Python (no DALI): the DSL checks a string with it before anything is built. The grammar and the defaults are
timm 1.0's (timm/data/auto_augment.py); where timm silently ignores a section, this parser stops with the reason.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass

from runner.errors import ConfigError, did_you_mean

LEVEL_DENOM = 10  # timm's _LEVEL_DENOM: magnitudes are out of 10 unless mmax raises the ceiling

# timm's op sets, in timm's order (_RAND_TRANSFORMS, _RAND_INCREASING_TRANSFORMS, _RAND_3A and the weighted dicts)
RAND_TRANSFORMS = ("AutoContrast", "Equalize", "Invert", "Rotate", "Posterize", "Solarize", "SolarizeAdd", "Color",
                   "Contrast", "Brightness", "Sharpness", "ShearX", "ShearY", "TranslateXRel", "TranslateYRel")
RAND_INCREASING_TRANSFORMS = ("AutoContrast", "Equalize", "Invert", "Rotate", "PosterizeIncreasing",
                              "SolarizeIncreasing", "SolarizeAdd", "ColorIncreasing", "ContrastIncreasing",
                              "BrightnessIncreasing", "SharpnessIncreasing", "ShearX", "ShearY", "TranslateXRel",
                              "TranslateYRel")
RAND_3A = ("SolarizeIncreasing", "Desaturate", "GaussianBlur")
RAND_WEIGHTED_3A = {"SolarizeIncreasing": 6, "Desaturate": 6, "GaussianBlur": 6, "Rotate": 3, "ShearX": 2, "ShearY": 2,
                    "PosterizeIncreasing": 1, "AutoContrast": 1, "ColorIncreasing": 1, "SharpnessIncreasing": 1,
                    "ContrastIncreasing": 1, "BrightnessIncreasing": 1, "Equalize": 1, "Invert": 1}
RAND_WEIGHTED_0 = {"Rotate": 3, "ShearX": 2, "ShearY": 2, "TranslateXRel": 1, "TranslateYRel": 1, "ColorIncreasing": .25,
                   "SharpnessIncreasing": 0.25, "AutoContrast": 0.25, "SolarizeIncreasing": .05, "SolarizeAdd": .05,
                   "ContrastIncreasing": .05, "BrightnessIncreasing": .05, "Equalize": .05,
                   "PosterizeIncreasing": 0.05, "Invert": 0.05}
OP_SETS = {"weights": RAND_WEIGHTED_0, "3a": RAND_3A, "3aw": RAND_WEIGHTED_3A}

# section key -> (what it sets, how timm converts its value)
SECTIONS = {"m": ("magnitude", int), "n": ("ops per image", int), "mstd": ("magnitude noise std", float),
            "mmax": ("magnitude ceiling", int), "inc": ("increasing op set", int), "p": ("chance of each op", float)}
GRAMMAR = ("A timm RandAugment string is 'rand' then dash-separated sections in any order: m<int> magnitude "
           "(default 10), n<int> ops per image (default 2), mstd<float> magnitude noise std (default 0; above 100: "
           "uniform in [0, m]), mmax<int> magnitude ceiling (default 10), inc<0|1> timm's increasing op set "
           "(default 0), p<float> the chance each op is applied (default 0.5), t<name> the op set (weights, 3a, "
           "3aw); for example 'rand-m9-mstd0.5-inc1'.")
AUTO_AUGMENT_POLICIES = ("v0", "v0r", "original", "originalr", "3a")


@dataclass(frozen=True, kw_only=True)
class TimmRandAugment:
    """What a timm RandAugment string sets: each image gets `n` ops drawn from `ops` (by `weights`, without
    replacement, when timm weights the set), each applied with chance `p` at a magnitude drawn per op."""
    n: int = 2
    m: int = LEVEL_DENOM
    mstd: float = 0.0              # math.inf: uniform in [0, m] (timm's mstd > 100)
    mmax: int | None = None        # None (or 0, which timm treats as unset): the ceiling is 10
    inc: bool = False
    p: float = 0.5
    ops: tuple[str, ...] = RAND_TRANSFORMS
    weights: tuple[float, ...] | None = None  # normalised choice weights, as timm's _get_weighted_transforms

    @property
    def ceiling(self) -> int:
        """The largest magnitude: timm clips each drawn magnitude to [0, mmax or 10]."""
        return self.mmax or LEVEL_DENOM


def parse_timm_policy(text: str) -> TimmRandAugment:
    """A timm RandAugment string -> its settings; a ConfigError (without a location: the caller adds it) if invalid."""
    if not isinstance(text, str):
        raise ConfigError(f"takes a string; got {text!r}. {GRAMMAR}")
    head, *sections = text.split("-")
    if head != "rand":
        raise ConfigError(f"{text!r} {_not_rand(head)} {GRAMMAR}")
    values: dict[str, str] = {}
    for section in sections:
        key, value = _split_section(text, section)
        if key in values:
            raise ConfigError(f"{text!r} gives '{key}' twice ({key}{values[key]} and {section}); give it once. "
                              f"{GRAMMAR}")
        values[key] = value
    settings = {key: _number(text, key, value) for key, value in values.items() if key != "t"}
    inc = bool(settings.pop("inc", 0))
    mstd = settings.pop("mstd", 0.0)
    ops, weights = _op_set(text, values.get("t"), inc)
    policy = TimmRandAugment(**settings, mstd=math.inf if mstd > 100 else mstd, inc=inc, ops=ops, weights=weights)
    if weights is not None and policy.n > len(ops):
        raise ConfigError(f"{text!r} asks for n={policy.n} ops per image from the weighted set 't{values['t']}', "
                          f"which timm draws without replacement from its {len(ops)} ops; use n{len(ops)} or fewer.")
    return policy


def _not_rand(head: str) -> str:
    if head == "augmix":
        return ("is timm's AugMix, which blends several augmentation chains per image and has no DALI counterpart "
                "here; only timm's RandAugment strings compile.")
    if head in AUTO_AUGMENT_POLICIES:
        return (f"is timm's AutoAugment policy '{head}', which this step does not compile; DALI's own ImageNet "
                "AutoAugment policy is the step auto_aug.auto_augment_image_net.")
    if head.startswith(("trivial", "ta")):
        return ("is not a timm string: timm has no TrivialAugment string; DALI's TrivialAugment Wide is the step "
                "auto_aug.trivial_augment_wide.")
    return f"does not start with 'rand'.{did_you_mean(head, ['rand'])}"


def _split_section(text: str, section: str) -> tuple[str, str]:
    """'mstd0.5' -> ('mstd', '0.5') as timm splits it (at the first digit); 't3a' -> ('t', '3a')."""
    if section.startswith("t"):
        return "t", section[1:]
    first_digit = re.search(r"\d", section)
    cut = first_digit.start() if first_digit else len(section)
    key, value = section[:cut], section[cut:]
    if key == "w":
        raise ConfigError(f"{text!r} has the section '{section}': timm removed the 'w' key; weighted op choice is "
                          f"the section 'tweights'. {GRAMMAR}")
    if key not in SECTIONS:
        hint = did_you_mean(key, SECTIONS) if key else ""
        what = "an empty section (two dashes in a row)" if not section else f"an unknown section '{section}'"
        raise ConfigError(f"{text!r} has {what}.{hint} {GRAMMAR}")
    if not value:
        raise ConfigError(f"{text!r} has the section '{section}' without a value (timm would ignore it); write "
                          f"{key} and a number, as in '{key}{_EXAMPLES[key]}'. {GRAMMAR}")
    return key, value


_EXAMPLES = {"m": "9", "n": "2", "mstd": "0.5", "mmax": "10", "inc": "1", "p": "0.5"}


def _number(text: str, key: str, value: str) -> int | float:
    what, kind = SECTIONS[key]
    try:
        return kind(value)
    except ValueError:
        words = "an integer" if kind is int else "a number"
        raise ConfigError(f"{text!r} has the section '{key}{value}': {key} ({what}) takes {words}, got '{value}'. "
                          f"{GRAMMAR}") from None


def _op_set(text: str, name: str | None, inc: bool) -> tuple[tuple[str, ...], tuple[float, ...] | None]:
    if name is None:
        return (RAND_INCREASING_TRANSFORMS if inc else RAND_TRANSFORMS), None
    chosen = OP_SETS.get(name)
    if chosen is None:
        raise ConfigError(f"{text!r} has the section 't{name}': unknown op set '{name}' (timm would fall back to its "
                          f"default set without a word); t takes weights, 3a or 3aw.{did_you_mean(name, OP_SETS)}")
    if isinstance(chosen, dict):
        total = sum(chosen.values())
        return tuple(chosen), tuple(w / total for w in chosen.values())
    return chosen, None
