"""Bench results as people compare them: a loader-by-loader table (terminal and markdown) and a chart."""
from __future__ import annotations

from pathlib import Path

from runner.bench.suite import BenchResult


def _num(x) -> str:
    return "-" if x is None else f"{x:,.0f}"


def _pct(x) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def rows(result: BenchResult) -> list[list[str]]:
    """configuration, loader-only img/s, end-to-end img/s, share of the ceiling, GPU util, data wait, the training
    thread's CPU, bare loop."""
    out = []
    for r in result.rows:
        e2e = r.e2e or {}
        util = e2e.get("gpu_util_pct")
        bare = r.bare or {}
        overhead = (e2e["images_per_s"] / bare["images_per_s"]) if e2e and bare else None
        out.append([r.variant, r.description, _num((r.loader or {}).get("images_per_s")),
                    _num(e2e.get("images_per_s")), _pct(r.ratio(result.ceiling)),
                    "-" if util is None else f"{util:.0f}%", _pct(e2e.get("data_wait_share")),
                    _threads(e2e), _num(bare.get("images_per_s")), _pct(overhead) if overhead else "-",
                    "; ".join(f"{k}: failed" for k in r.errors)])
    return out


def _threads(e2e: dict) -> str:
    """The training thread's share of the wall time on a core, and waiting for one."""
    busy, queued = e2e.get("train_thread_busy_pct"), e2e.get("train_thread_queued_pct")
    return "-" if busy is None else f"{busy:.0f}% / {queued:.1f}%"


COLUMNS = ["loader", "configuration", "loader-only img/s", "train img/s", "of ceiling", "GPU util", "data wait",
           "training thread busy / queued", "bare-loop img/s", "runner/bare", "errors"]


def markdown(result: BenchResult) -> str:
    body = rows(result)
    keep = [i for i, c in enumerate(COLUMNS) if any(r[i] not in ("-", "") for r in body)]
    lines = ["| " + " | ".join(COLUMNS[i] for i in keep) + " |", "|" + "---|" * len(keep)]
    lines += ["| " + " | ".join(r[i] for i in keep) + " |" for r in body]
    return "\n".join(lines)


def chart(result: BenchResult, path: Path) -> Path:
    """Horizontal bars: training img/s per loader (the ceiling as a line) and loader-only img/s, a panel for each
    mode that was measured."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [r.variant for r in result.rows]
    train = [(r.e2e or {}).get("images_per_s", 0) for r in result.rows]
    only = [(r.loader or {}).get("images_per_s", 0) for r in result.rows]
    panels = [(mode, title, values, color) for mode, title, values, color in (
        ("e2e", "training, end to end (img/s)", train, "#4c72b0"), ("loader", "loader only (img/s)", only, "#55a868"))
        if any(values) or any(mode in r.errors for r in result.rows)]
    fig, axes = plt.subplots(1, len(panels), figsize=(5.5 * len(panels) + 0.5, 0.6 * len(names) + 2), sharey=True,
                             squeeze=False)
    axes = axes[0]
    y = range(len(names))
    for ax, (mode, title, values, color) in zip(axes, panels):
        ax.barh(y, values, color=color)
        ax.set_title(title)
        for i, val in enumerate(values):
            if not val:
                if mode in result.rows[i].errors:
                    ax.text(0, i, " failed", va="center", fontsize=9, color="#c44e52")
                continue
            share = f" ({100 * val / result.ceiling:.1f}%)" if mode == "e2e" and result.ceiling else ""
            ax.text(val, i, f" {val:,.0f}{share}", va="center", fontsize=9,
                    bbox={"facecolor": "white", "edgecolor": "none", "pad": 0.5}, zorder=3)  # over the ceiling line
        if mode == "e2e" and result.ceiling:
            ax.axvline(result.ceiling, color="black", linestyle="--", linewidth=1)
        ax.grid(axis="x", alpha=0.3)
        ax.margins(x=0.25)
    axes[0].set_yticks(list(y), names)
    axes[0].invert_yaxis()
    title = chart_title(result, width=int(18 * fig.get_figwidth()))
    fig.suptitle(title, fontsize=11 if "\n" not in title else 9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def chart_title(result: BenchResult, width: int = 100) -> str:
    """The experiment, machine and time, then the command line's overrides: two charts of one experiment differ
    there."""
    import textwrap

    machine = result.machine.get("gpu.model") or result.machine.get("cpu", "CPU")
    head = f"{Path(result.experiment).name} on {machine} ({result.started})"
    return "\n".join([head, *textwrap.wrap(" ".join(result.overrides), width)]) if result.overrides else head
