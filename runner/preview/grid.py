"""A batch as a captioned grid: the loader's normalisation undone, each image labelled by its classes."""
from __future__ import annotations

import io
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from PIL import Image, ImageDraw, ImageFont

from runner.dsl.checked import Lit, OpNode, Stream

if TYPE_CHECKING:
    import torch
    from PIL import Image

# torchvision is imported where a grid is de-normalised, for start-up (`runner validate` reads GridSource).



Caption = list[tuple[str, float]]              # (class name, weight) per label an image carries


NORMALIZING_OPS = {"crop_mirror_normalize": ("mean", "std"), "normalize": ("mean", "stddev")}


@dataclass(frozen=True)
class Denorm:
    """How a pipeline's output maps back to its input: out = scale * (in - mean) / std + shift (DALI's
    crop_mirror_normalize and normalize, torchvision's Normalize with scale 1 and shift 0)."""
    mean: tuple[float, ...] = (0.0,)
    std: tuple[float, ...] = (1.0,)
    scale: float = 1.0
    shift: float = 0.0
    stretch: bool = False   # the values have no fixed scale (random tensors, per-sample statistics)
    source: str = ""        # where mean and std were read, for the grid's header

    def describe(self) -> str:
        if self.stretch:
            return f"{self.source}: each image shown over its own value range"
        if not self.source:
            return "no normalisation step"
        extra = (f", scale {self.scale:g}" if self.scale != 1 else "") + (f", shift {self.shift:g}" if self.shift else "")
        return f"{self.source} undone (mean {_numbers(self.mean)}, std {_numbers(self.std)}{extra})"

    def invert(self, x: np.ndarray) -> np.ndarray:
        """NHWC pipeline output -> the normalising step's input values."""
        channels = x.shape[-1]
        mean, std = _per_channel(self.mean, channels), _per_channel(self.std, channels)
        return (x - np.float32(self.shift)) / np.float32(self.scale) * std + mean


def _numbers(values: tuple[float, ...]) -> str:
    return " ".join(f"{v:.4g}" for v in values)


def _per_channel(values: tuple[float, ...], channels: int) -> np.ndarray:
    v = np.asarray(values, dtype=np.float32)
    return v if v.size in (1, channels) else np.resize(v, channels)


def graph_denorm(checked) -> Denorm:
    """The normalisation of a checked DALI graph's image output: the crop_mirror_normalize or normalize step
    that makes it (followed back through steps that only move it, such as a transpose), its mean and std as
    written (DALI's are in the input's units: 0-255 for decoded images)."""
    wanted = checked.outputs[0].name
    for s in reversed(checked.steps):
        if wanted not in s.step.targets:
            continue
        node = s.node
        if not isinstance(node, OpNode):
            return Denorm()  # arithmetic on the stream: its values are shown as they are
        if node.op.name not in NORMALIZING_OPS:
            first = node.inputs[0] if node.inputs else None
            if not isinstance(first, Stream):
                return Denorm()
            wanted = first.name
            continue
        mean_key, std_key = NORMALIZING_OPS[node.op.name]
        kwargs = dict(node.kwargs)
        source = f"{node.op.name} (step {s.step.index})"
        if node.op.name == "normalize" and not (mean_key in kwargs and std_key in kwargs):
            return Denorm(stretch=True, source=f"{source}, with statistics of each batch")
        values = {}
        for key, default in ((mean_key, 0.0), (std_key, 1.0), ("scale", 1.0), ("shift", 0.0)):
            arg = kwargs.get(key)
            if arg is not None and not isinstance(arg, Lit):
                return Denorm(stretch=True, source=f"{source}, with {key} drawn per sample")
            values[key] = default if arg is None else arg.value
        return Denorm(mean=_tuple(values[mean_key]), std=_tuple(values[std_key]), scale=float(values["scale"]),
                      shift=float(values["shift"]), source=source)
    return Denorm()


def _tuple(value) -> tuple[float, ...]:
    return tuple(float(v) for v in value) if isinstance(value, list | tuple) else (float(value),)


def transforms_denorm(compose) -> Denorm:
    """The last torchvision Normalize of a Compose (its mean and std are in ToTensor's 0-1 units)."""
    import torchvision.transforms as T

    found = [t for t in compose.transforms if isinstance(t, T.Normalize)]
    if not found:
        return Denorm()
    t = found[-1]
    return Denorm(mean=_tuple(list(t.mean)), std=_tuple(list(t.std)), source="Normalize")


def display_pixels(images: torch.Tensor, parts: list[tuple[int | None, Denorm]]) -> np.ndarray:
    """A batch as the loader yields it (NCHW, or NHWC) -> uint8 NHWC RGB, its normalisation undone. Values
    are read as 0-255 when the tensor is uint8 or any exceeds 1.5 (DALI's decoded range), else as 0-1
    (torchvision's ToTensor)."""
    x = images.detach().float().cpu().numpy()
    if x.ndim == 3:
        x = x[:, None]
    if not (x.shape[-1] in (1, 3, 4) and x.shape[1] not in (1, 3, 4)):
        x = x.transpose(0, 2, 3, 1)  # the loaders' contract is NCHW; an HWC pipeline output is read as is
    out, start = [], 0
    for count, denorm in parts:
        end = len(x) if count is None else min(len(x), start + count)
        part = x[start:end]
        start = end
        if not len(part):
            continue
        if denorm.stretch:
            low = part.min(axis=(1, 2, 3), keepdims=True)
            high = part.max(axis=(1, 2, 3), keepdims=True)
            out.append((part - low) / np.maximum(high - low, 1e-6))
            continue
        values = denorm.invert(part)
        wide = not images.dtype.is_floating_point or values.max(initial=0.0) > 1.5
        out.append(values / 255.0 if wide else values)
    pixels = np.clip(np.concatenate(out), 0.0, 1.0)
    pixels = pixels[..., :3] if pixels.shape[-1] >= 3 else np.repeat(pixels[..., :1], 3, axis=-1)
    return np.rint(pixels * 255).astype(np.uint8)


def captions(targets: torch.Tensor, names: Sequence[str] | None, most: int = 2) -> list[Caption]:
    """Per image, its classes and weights, heaviest first: from labels (N,) each image one class of weight 1;
    from soft targets (N, C), as batch mixing makes them, the classes at least 0.01 above the row's floor (label
    smoothing's share of every class), at most `most`."""
    t = targets.detach().cpu()

    def name(i: int) -> str:
        return names[i] if names is not None and i < len(names) else f"label {i}"

    if t.ndim == 1:
        return [[(name(int(i)), 1.0)] for i in t.tolist()]
    out = []
    for row in t.float().tolist():
        order = sorted(range(len(row)), key=lambda i: -row[i])[:most]
        floor = min(row)
        out.append([(name(i), row[i]) for i in order if row[i] >= floor + 0.01] or [(name(order[0]), row[order[0]])])
    return out


INK, GREY, PAPER = (20, 20, 20), (90, 90, 90), (255, 255, 255)
MIN_CELL = 160     # px: small crops are enlarged (nearest neighbour, whole multiples) to at least this


PAD = 8


FONT = 14


TITLE_FONT = 16


def _font(size: int):
    return ImageFont.load_default(size=size)  # Pillow's bundled font: the same pixels on every machine


def _fit(text: str, font, width: int) -> str:
    """`text`, cut with an ellipsis where it is wider than `width` px."""
    if font.getlength(text) <= width:
        return text
    while text and font.getlength(text + "…") > width:
        text = text[:-1]
    return text + "…"


def _wrap(text: str, font, width: int) -> list[str]:
    lines, line = [], ""
    for word in text.split():
        trial = f"{line} {word}" if line else word
        if line and font.getlength(trial) > width:
            lines.append(line)
            line = word
        else:
            line = trial
    return [_fit(t, font, width) for t in lines + [line] if t]


def caption_lines(caption: Caption, font, width: int) -> list[str]:
    """'cat' for one class of weight 1; 'cat 0.70 + dog 0.30' on one line when it fits, else a line each
    (a long name is cut, never its weight)."""
    if len(caption) == 1 and caption[0][1] >= 0.995:
        return [_fit(caption[0][0], font, width)]
    joined = " + ".join(f"{name} {weight:.2f}" for name, weight in caption)
    if font.getlength(joined) <= width:
        return [joined]
    lines = []
    for i, (name, weight) in enumerate(caption):
        head, tail = ("+ " if i else ""), f" {weight:.2f}"
        lines.append(head + _fit(name, font, int(width - font.getlength(head + tail))) + tail)
    return lines


def draw_grid(pixels: np.ndarray, caps: Sequence[Caption], title: str, subtitle: str = "") -> Image.Image:
    """uint8 NHWC RGB images in a near-square grid, each over its caption, under a header."""
    n, h, w = pixels.shape[:3]
    k = max(1, math.ceil(MIN_CELL / max(h, w)))
    cw, ch = w * k, h * k
    cols = math.ceil(math.sqrt(n))
    rows = math.ceil(n / cols)
    font, title_font, small = _font(FONT), _font(TITLE_FONT), _font(FONT - 1)
    lines = [caption_lines(c, font, cw) for c in caps]
    line_h = FONT + 4
    cap_h = max(len(t) for t in lines) * line_h + 4
    width = cols * cw + (cols + 1) * PAD
    head = _wrap(title, title_font, width - 2 * PAD)
    sub = _wrap(subtitle, small, width - 2 * PAD)
    head_h = PAD + len(head) * (TITLE_FONT + 5) + len(sub) * (FONT + 3) + PAD
    grid = Image.new("RGB", (width, head_h + rows * (ch + cap_h + PAD)), PAPER)
    draw = ImageDraw.Draw(grid)
    y = PAD
    for text in head:
        draw.text((PAD, y), text, fill=INK, font=title_font)
        y += TITLE_FONT + 5
    for text in sub:
        draw.text((PAD, y), text, fill=GREY, font=small)
        y += FONT + 3
    for i in range(n):
        r, c = divmod(i, cols)
        x0, y0 = PAD + c * (cw + PAD), head_h + r * (ch + cap_h + PAD)
        tile = Image.fromarray(pixels[i])
        grid.paste(tile.resize((cw, ch), Image.NEAREST) if k > 1 else tile, (x0, y0))
        for j, text in enumerate(lines[i]):
            draw.text((x0, y0 + ch + 2 + j * line_h), text, fill=INK, font=font)
    return grid


def png_bytes(image: Image.Image) -> bytes:
    buf = io.BytesIO()
    image.save(buf, format="PNG")  # Pillow writes no time stamp: the same grid gives the same bytes
    return buf.getvalue()
