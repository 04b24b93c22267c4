"""The confusion matrix as a heat map: rows the true class, columns the predicted one, each row as shares of
its class's samples (so that small classes show as clearly as large ones), counts written in the cells."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

# matplotlib is imported where the plot is drawn (~0.5 s); the report's numbers are written without it.

_NAMED = 40       # up to this many classes, every row and column is named
_NUMBERED = 20    # up to this many, every cell shows its count


def draw_confusion(confusion: torch.Tensor, classes: list[str], path: Path, *, title: str) -> Path:
    """The heat map of `confusion` ([true, predicted] counts) as a PNG at `path`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    counts = confusion.double()
    rows = counts.sum(dim=1, keepdim=True)
    shares = (counts / rows.clamp(min=1)).numpy()
    k = len(classes)
    side = min(4 + 0.3 * k, 16) if k <= _NAMED else 12
    fig, ax = plt.subplots(figsize=(side + 1.5, side))
    image = ax.imshow(shares, cmap="Blues", vmin=0, vmax=1, interpolation="nearest")
    fig.colorbar(image, ax=ax, fraction=0.046, pad=0.04, label="share of the true class's images")
    if k <= _NAMED:
        ax.set_xticks(range(k), classes, rotation=60, ha="right", rotation_mode="anchor", fontsize=8)
        ax.set_yticks(range(k), classes, fontsize=8)
    if k <= _NUMBERED:
        for (i, j), n in zip(((i, j) for i in range(k) for j in range(k)), counts.flatten().long().tolist()):
            if n:
                ax.text(j, i, str(n), ha="center", va="center", fontsize=max(6, 12 - k // 3),
                        color="white" if shares[i, j] > 0.5 else "black")
    unnamed = "" if k <= _NAMED else " (label index; names in the CSV)"
    ax.set_xlabel("predicted class" + unnamed)
    ax.set_ylabel("true class" + unnamed)
    ax.set_title(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
