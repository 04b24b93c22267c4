"""What DALI's image decoder makes of a file, in Pillow's terms: which files it reads, and their 8-bit RGB pixels.

The caches (`runner data cache`) decode with Pillow and must hold the pixels a pipeline decoding the source
with `decoders.image(..., output_type=RGB)` would see. Pillow and DALI agree on 8-bit images; on deeper ones
they do not: Pillow's convert("RGB") clips 16-bit grey to 255 (a white image), where DALI scales 16-bit
samples by 255/65535 and float ones from [0, 1], rounding to nearest (checked against DALI 2.4's CPU decoder
on PNG, TIFF, PGM and JPEG 2000 files; tests/test_data_cache.py compares them).
"""
from __future__ import annotations

import numpy as np
from PIL import Image

# what Pillow calls the formats DALI's image decoder reads (MPO: a camera JPEG with extra frames)
DALI_DECODES = frozenset({"JPEG", "MPO", "PNG", "BMP", "TIFF", "PPM", "JPEG2000", "WEBP"})

_SIXTEEN_BIT = ("I", "I;16", "I;16B", "I;16L", "I;16N")  # Pillow's "I" here: 16-bit PGM/PNG read as int32


def dali_refuses(fmt: str | None, mode: str | None) -> str | None:
    """Why DALI's decoder stops on an image Pillow decodes (None when it reads it)."""
    if fmt not in DALI_DECODES:
        return f"{fmt} image: DALI's decoder does not read {fmt} (convert it to JPEG or PNG)"
    if fmt == "TIFF" and mode == "I":  # Pillow reads 16-bit TIFF as I;16, so "I" is 32 bits a sample
        return ("32-bit integer TIFF: DALI's decoder stops on it ('Invalid sample_type'); save it with 8 or 16 "
                "bits a sample")
    return None


def rgb_as_dali(image: Image.Image) -> Image.Image:
    """`image` as 8-bit RGB with the values DALI's decoder gives (16-bit and float samples scaled, not clipped)."""
    if image.mode in _SIXTEEN_BIT:
        scaled = np.asarray(image, dtype=np.float64).clip(0, 65535) * (255 / 65535)
    elif image.mode == "F":
        scaled = np.asarray(image, dtype=np.float64).clip(0, 1) * 255
    else:
        return image.convert("RGB")
    return Image.fromarray(np.floor(scaled + 0.5).astype(np.uint8), "L").convert("RGB")
