"""Bench results as people compare them: the table (terminal and markdown) and a chart.

One run per row shows its numbers as measured; several show the median and, in brackets, the range (min-max).
"""
from __future__ import annotations

import textwrap
from pathlib import Path

from runner.bench.stats import PART_WAIT_KEY, Spread, ratios, spread
from runner.bench.suite import BenchResult, Row
from runner.bench.variants import TRAINING_MODES
from runner.console import percent

# matplotlib is imported where a chart is drawn: the table and JSON are written without it (~0.5 s).

COLUMNS = ["loader", "configuration", "loader-only img/s", "train img/s", "of ceiling", "GPU util", "data wait",
           "stream wait", "host CPU busy", "training thread busy / queued", "bare-loop img/s", "runner/bare",
           "beside the loader img/s", "of ceiling beside", "errors"]
SHARE_OF_ROUNDS = "of ceiling (median of per-round ratios)"


def columns(result: BenchResult) -> list[str]:
    """COLUMNS, with a ceiling column for a suite and the share's header saying how it was taken."""
    cols = [SHARE_OF_ROUNDS if c == "of ceiling" and result.repeat > 1 else c for c in COLUMNS]
    if result.suite is not None:
        cols = ["row", "configuration", "ceiling", *cols[2:]]
    return cols


def _cell(s: Spread | None, repeat: int, one, bracket=None) -> str:
    """'-', a number, or the median and (min-max) of several; '2 of 3' when a round did not measure it."""
    if s is None:
        return "-"
    if repeat == 1:
        return one(s.median)
    bracket = bracket or one
    short = "" if s.n == repeat else f"; {s.n} of {repeat}"
    return f"{one(s.median)} ({bracket(s.low)}-{bracket(s.high)}{short})"


def _num(x: float) -> str:
    return f"{x:,.0f}"


def _points(share: float) -> str:
    """A share as percent points without the sign: the bracket of a range of percentages."""
    return f"{100 * share:.1f}"


def _util(x: float) -> str:
    return f"{x:.0f}%"


def rows(result: BenchResult) -> list[list[str]]:
    """One line per row, in columns(result)."""
    n = result.repeat
    out = []
    for r in result.rows:
        overhead = spread(ratios(r.runs.get("e2e", []), r.runs.get("bare", [])))
        cells = [_cell(r.stat("loader", "images_per_s"), n, _num), _cell(r.stat("e2e", "images_per_s"), n, _num),
                 "-" if r.is_ceiling else _cell(result.share(r), n, percent, _points),
                 _cell(r.stat("e2e", "gpu_util_pct"), n, _util, lambda x: f"{x:.0f}"),
                 _wait(r, n), _cell(r.stat("e2e", "stream_wait_share"), n, percent, _points),
                 _cell(r.stat("e2e", "cpu_busy_pct"), n, _util, lambda x: f"{x:.0f}"), _threads(r, n),
                 _cell(r.stat("bare", "images_per_s"), n, _num),
                 _cell(overhead, n, percent, _points),
                 _cell(r.stat("beside", "images_per_s"), n, _num),
                 "-" if r.is_ceiling else _cell(result.share(r, "beside"), n, percent, _points),
                 _errors(r, n)]
        head = [r.name, r.description] if result.suite is None else \
            [r.name, r.description, "-" if r.is_ceiling or not r.ceiling else r.ceiling]
        out.append([*head, *cells])
    return out


def _errors(r: Row, repeat: int) -> str:
    parts = []
    for mode in r.errors:
        failed = sum(1 for x in r.runs.get(mode, []) if x is None)
        parts.append(f"{mode}: failed" + (f" {failed} of {repeat}" if repeat > 1 else ""))
    return "; ".join(parts)


def _wait(r: Row, repeat: int) -> str:
    """The data wait and, for a hybrid, each pipeline's part of it (medians over the rounds)."""
    cell = _cell(r.stat("e2e", "data_wait_share"), repeat, percent, _points)
    parts = [f"{name} {percent(s.median)}" for name in r.waited_pipelines()
             if (s := r.stat("e2e", PART_WAIT_KEY + name))]
    return f"{cell}: {', '.join(parts)}" if parts else cell


def _threads(r: Row, repeat: int) -> str:
    """The training thread's share of the wall time on a core, and waiting for one."""
    busy, queued = r.stat("e2e", "train_thread_busy_pct"), r.stat("e2e", "train_thread_queued_pct")
    if busy is None:
        return "-"
    return (f"{_cell(busy, repeat, _util, lambda x: f'{x:.0f}')} / "
            f"{_cell(queued, repeat, lambda x: f'{x:.1f}%', lambda x: f'{x:.1f}')}")


def filled(cols: list[str], body: list[list[str]]) -> list[int]:
    """The indices of the columns some row has a number in (a mode not measured leaves its columns empty)."""
    return [i for i in range(len(cols)) if any(r[i] not in ("-", "") for r in body)]


def markdown(result: BenchResult) -> str:
    """The table with the columns that hold a number in some row."""
    body, cols = rows(result), columns(result)
    keep = filled(cols, body)
    lines = ["| " + " | ".join(cols[i] for i in keep) + " |", "|" + "---|" * len(keep)]
    lines += ["| " + " | ".join(r[i] for i in keep) + " |" for r in body]
    return "\n".join(lines)


def chart(result: BenchResult, path: Path) -> Path:
    """Horizontal bars: training img/s per row (its share of its ceiling beside it; one ceiling also as a line) and
    loader-only img/s, a panel for each mode that was measured; bars at the median, error bars over min-max."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = ["\n".join(textwrap.wrap(r.name, 34)) for r in result.rows]  # long row names would squeeze the bars
    label_lines = sum(n.count("\n") + 1 for n in names)
    panels = [(mode, title, [r.stat(mode, "images_per_s") for r in result.rows], color)
              for mode, title, color in (("e2e", "training, end to end (img/s)", "#4c72b0"),
                                         ("beside", "training beside the loader (img/s)", "#8172b2"),
                                         ("loader", "loader only (img/s)", "#55a868"))]
    panels = [p for p in panels if any(p[2]) or any(p[0] in r.errors for r in result.rows)]
    fig, axes = plt.subplots(1, len(panels), figsize=(5.5 * len(panels) + 0.5,
                                                          max(0.6 * len(names), 0.3 * label_lines) + 2), sharey=True,
                             squeeze=False)
    axes = axes[0]
    y = range(len(names))
    ceilings = [r for r in result.rows if r.is_ceiling and r.e2e]
    for ax, (mode, title, stats, color) in zip(axes, panels):
        medians = [s.median if s else 0 for s in stats]
        err = [[s.median - s.low if s else 0 for s in stats], [s.high - s.median if s else 0 for s in stats]]
        ax.barh(y, medians, color=color, xerr=err if result.repeat > 1 else None, capsize=3)
        ax.set_title(title)
        for i, (s, row) in enumerate(zip(stats, result.rows)):
            if s is None:
                if mode in row.errors:
                    ax.text(0, i, " failed", va="center", fontsize=9, color="#c44e52")
                continue
            share = result.share(row, mode) if mode in TRAINING_MODES and not row.is_ceiling else None
            text = f" {s.median:,.0f}" + (f" ({100 * share.median:.1f}%)" if share else "")
            ax.text(s.high, i, text, va="center", fontsize=9,
                    bbox={"facecolor": "white", "edgecolor": "none", "pad": 0.5}, zorder=3)  # over the ceiling line
        if mode in TRAINING_MODES and len(ceilings) == 1:
            ax.axvline(ceilings[0].e2e["images_per_s"], color="black", linestyle="--", linewidth=1)
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
    """The experiment (or suite), machine and time, then the command line's overrides: two charts of one
    experiment differ there."""
    machine = result.machine.get("gpu.model") or result.machine.get("cpu", "CPU")
    what = f"suite {result.suite}" if result.suite is not None else Path(result.experiment).name
    rounds = f", median of {result.repeat} rounds" if result.repeat > 1 else ""
    head = f"{what} on {machine} ({result.started}{rounds})"
    return "\n".join([head, *textwrap.wrap(" ".join(result.overrides), width)]) if result.overrides else head
