"""Runs side by side: the params that differ between them, the numbers that matter, and their curves."""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from runner.console import percent
from runner.repro.snapshot import IDENTITY_TAGS
from runner.tracking.store import RunRecord, metric_history

# params that say which run it is and where it was logged (its name, store, parent, what it reproduces),
# not how it trains; `runner reproduce` logs to the original's store, so its tracking.uri may be set
IDENTITY_PARAMS = frozenset({"tracking.run_name", "tracking.uri", *(f"tracking.tags.{t}" for t in IDENTITY_TAGS)})
# (metric, x axis label, y axis label, scale): one panel of the chart each
CURVES = (("train/loss", "step", "train loss", 1.0), ("eval/top1", "epoch", "eval top-1 (%)", 100.0),
          ("loader/images_per_s", "step", "loader images/s", 1.0))
LAST = ("eval/top1", "epoch/images_per_s", "epoch/data_wait_share", "epoch/gpu_util_pct")
MAX_VALUE = 40  # characters of a param value in the table


@dataclass(frozen=True)
class Compared:
    run: RunRecord
    label: str                                        # the legend entry: run name, with its id when repeated
    last: dict[str, float]                            # LAST metric -> its last value
    curves: dict[str, list[tuple[int, float]]]        # CURVES metric -> (step, value)


def load_compared(runs: list[RunRecord]) -> list[Compared]:
    """The metric histories compare shows, for each run."""
    counts = Counter(r.name for r in runs)
    out = []
    for r in runs:
        wanted = {m for m, *_ in CURVES} | set(LAST)
        history = {k: metric_history(r.uri, r.run_id, k) for k in wanted if k in r.metric_keys}
        out.append(Compared(run=r, label=r.name if counts[r.name] == 1 else f"{r.name} ({r.short})",
                            last={k: h[-1][1] for k, h in history.items() if h and k in LAST},
                            curves={m: history.get(m, []) for m, *_ in CURVES}))
    return out


def differing_params(runs: list[RunRecord]) -> list[str]:
    """Param keys whose values are not the same in every run (a missing key counts as a value).

    An empty mapping is logged as "{}" (tracking.flatten), and a filled one as its keys: "{}" is
    the same as no keys at all, so it is not a difference by itself.
    """
    params = [{k: v for k, v in r.params.items() if v != "{}"} for r in runs]
    keys = sorted({k for p in params for k in p} - IDENTITY_PARAMS)
    return [k for k in keys if len({p.get(k) for p in params}) > 1]


def _cut(text: str | None) -> str:
    if text is None:
        return "-"
    return text if len(text) <= MAX_VALUE else text[:MAX_VALUE - 1] + "…"


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 120:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes} min {secs} s" if minutes < 60 else f"{minutes // 60} h {minutes % 60} min"


def table(compared: list[Compared]) -> tuple[list[str], list[list[str]]]:
    """Columns and rows: one row per run; the differing params, then status, time and results."""
    params = differing_params([c.run for c in compared])
    columns = ["run", "id", *params, "status", "duration", "eval top-1", "img/s (last epoch)", "data wait",
               "GPU util"]
    rows = []
    for c in compared:
        util = c.last.get("epoch/gpu_util_pct")
        ips = c.last.get("epoch/images_per_s")
        rows.append([c.label, c.run.short, *(_cut(c.run.params.get(k)) for k in params), c.run.status,
                     duration(c.run.duration_s), percent(c.last.get("eval/top1")),
                     "-" if ips is None else f"{ips:,.0f}", percent(c.last.get("epoch/data_wait_share")),
                     "-" if util is None else f"{util:.0f}%"])
    return columns, rows


def markdown(columns: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in r) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def chart(compared: list[Compared], path: Path, title: str) -> Path:
    """Three panels (train loss by step, eval top-1 by epoch, loader images/s by step), one line per run."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    fig, axes = plt.subplots(1, len(CURVES), figsize=(5.2 * len(CURVES), 4.2))
    for ax, (metric, xlabel, ylabel, scale) in zip(axes, CURVES):
        drawn = False
        for c in compared:
            points = c.curves.get(metric) or []
            if points:
                xs, ys = zip(*points)
                ax.plot(xs, [y * scale for y in ys], marker="o" if len(points) <= 20 else None, markersize=3,
                        linewidth=1.3, label=c.label)
                drawn = True
        if not drawn:
            ax.text(0.5, 0.5, f"no {metric} logged", ha="center", va="center", transform=ax.transAxes, color="gray")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # steps and epochs are whole numbers
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.set_title(metric, fontsize=10)
        ax.grid(alpha=0.3)
    handles, labels = axes[0].get_legend_handles_labels()
    if not handles:
        handles, labels = next((ax.get_legend_handles_labels() for ax in axes if ax.get_legend_handles_labels()[0]),
                               ([], []))
    if handles:
        fig.legend(handles, labels, loc="lower center", ncol=min(len(labels), 4), fontsize=9, frameon=False)
    fig.suptitle(title, fontsize=11)
    fig.tight_layout(rect=(0, 0.06 + 0.04 * ((len(labels) - 1) // 4 if handles else 0), 1, 1))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
