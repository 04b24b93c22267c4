"""Runs side by side in groups: what tells the groups apart, each group's spread over its seeds, whether
the best group's lead exceeds that spread, and the groups' mean curves."""
from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from runner.repro.groups import Compared, Group, differing_params
from runner.repro.stats import SIGNIFICANT, Spread, p_text, spread, welch_p
from runner.tracking.store import RunRecord, metric_history
from runner.train.budgets import TIME_TO

# matplotlib is imported where the chart is drawn (~0.5 s); the table is printed without it.

# (metric, x axis label, y axis label, scale): one panel of the chart each
CURVES = (("train/loss", "step", "train loss", 1.0), ("eval/top1", "epoch", "eval top-1 (%)", 100.0),
          ("loader/images_per_s", "step", "loader images/s", 1.0))
LEAD_METRIC = "eval/top1"  # the closing line ranks groups by its mean and tests the lead on it


@dataclass(frozen=True)
class Metric:
    key: str
    title: str
    short: str         # its column header in the table of runs
    scale: float       # stored value x scale = printed value
    decimals: int
    always: bool       # a row even when no run logged it (it says "-")


GROUP_METRICS = (Metric("eval/top1", "eval top-1 %", "top-1 %", 100, 2, True),
                 Metric("eval_ema/top1", "EMA eval top-1 %", "EMA top-1 %", 100, 2, False),
                 Metric("epoch/images_per_s", "images/s", "img/s", 1, 0, True),
                 Metric("epoch/data_wait_share", "data wait %", "wait %", 100, 1, True),
                 Metric("epoch/stream_wait_share", "stream wait %", "stream wait %", 100, 1, False),
                 Metric("epoch/gpu_util_pct", "GPU util %", "GPU %", 1, 1, False))
LAST = tuple(m.key for m in GROUP_METRICS)


def time_to_metric(key: str) -> Metric:
    """time_to/eval/top1/0.75/seconds -> 'min to eval/top1 0.75' in minutes; .../epochs -> 'epochs to ...'."""
    watched, _, unit = key.removeprefix(TIME_TO).rpartition("/")
    metric, _, value = watched.rpartition("/")
    if unit == "seconds":
        return Metric(key, f"minutes to {metric} {value}", f"min to {value}", 1 / 60, 1, False)
    return Metric(key, f"epochs to {metric} {value}", f"ep to {value}", 1, 0, False)


def _is_time_to(key: str) -> bool:
    return key.startswith(TIME_TO)


def load_compared(runs: list[RunRecord]) -> list[Compared]:
    """The metric histories compare shows, for each run."""
    counts = Counter(r.name for r in runs)
    out = []
    for r in runs:
        wanted = {m for m, *_ in CURVES} | set(LAST) | {k for k in r.metric_keys if _is_time_to(k)}
        history = {k: metric_history(r.uri, r.run_id, k) for k in wanted if k in r.metric_keys}
        out.append(Compared(run=r, label=r.name if counts[r.name] == 1 else f"{r.name} ({r.short})",
                            last={k: h[-1][1] for k, h in history.items() if h and (k in LAST or _is_time_to(k))},
                            curves={m: history.get(m, []) for m, *_ in CURVES}))
    return out


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 120:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes} min {secs} s" if minutes < 60 else f"{minutes // 60} h {minutes % 60} min"


def shown_metrics(groups: Sequence[Group]) -> list[Metric]:
    """GROUP_METRICS the runs logged (or always shown), then the time-to metrics of trainer.time_to: a run that
    never reached a value has none, shows '-' and is left out of that row's n."""
    logged = {k for g in groups for c in g.members for k in c.last}
    timed = sorted((k for k in logged if _is_time_to(k)),
                   key=lambda k: (k.rsplit("/", 2)[0], float(k.rsplit("/", 2)[1]), k.endswith("epochs")))
    return [m for m in GROUP_METRICS if m.always or m.key in logged] + [time_to_metric(k) for k in timed]


def legend(groups: Sequence[Group]) -> list[str]:
    """'A = pipelines.train.use=imagenet_train (3 runs)': the full values each group's key stands for."""
    return [f"{g.name} = {g.label} ({len(g.members)} run{'s' if len(g.members) != 1 else ''})" for g in groups]


def _number(value: float, m: Metric) -> str:
    return f"{value * m.scale:,.{m.decimals}f}"


def group_table(groups: Sequence[Group]) -> tuple[list[str], list[list[str]], list[int]]:
    """Columns, rows and the row indexes that end a section: per metric, one row per group with n, mean,
    std and min - max of the metric's last value over the group's finished runs."""
    columns = ["metric", "group", "n", "mean", "std", "min – max"]
    rows: list[list[str]] = []
    ends: list[int] = []
    for m in shown_metrics(groups):
        for i, g in enumerate(groups):
            s: Spread | None = spread(g.finals(m.key))
            cells = ["0", "-", "-", "-"] if s is None else [
                str(s.n), _number(s.mean, m), "-" if s.std is None else _number(s.std, m),
                f"{_number(s.low, m)} – {_number(s.high, m)}"]
            rows.append([m.title if i == 0 else "", g.name, *cells])
        ends.append(len(rows) - 1)
    return columns, rows, ends


def run_table(groups: Sequence[Group]) -> tuple[list[str], list[list[str]]]:
    """One row per run, by group: id, seed, status, time, final numbers, and its name last."""
    runs = [c.run for g in groups for c in g.members]
    seeds = "seed" in differing_params(runs)
    metrics = shown_metrics(groups)
    columns = ["group", "id", *(["seed"] if seeds else []), "status", "time", *(m.short for m in metrics), "run"]
    rows = []
    for g in groups:
        for c in g.members:
            rows.append([g.name, c.run.short, *([c.run.params.get("seed", "-")] if seeds else []), c.run.status,
                         duration(c.run.duration_s),
                         *("-" if m.key not in c.last else _number(c.last[m.key], m) for m in metrics), c.label])
    return columns, rows


def lead_line(groups: Sequence[Group], spread_name: str = "the spread over seeds", metric: str = LEAD_METRIC) -> str:
    """The closing line: does the best group's lead over the runner-up exceed the spread over seeds?

    Groups are ranked by the mean of `metric` over their finished runs; the lead is tested with Welch's
    two-sample t-test on those runs' values when both groups have two or more of them.
    """
    if len(groups) < 2:
        return (f"all {len(groups[0].members) if groups else 0} runs are one group: there is no other group to "
                "compare with; --group-by KEY names the params that tell groups apart.")
    ranked = sorted((g for g in groups if g.finals(metric)), key=lambda g: -statistics.fmean(g.finals(metric)))
    if not ranked:
        return f"no finished run logged {metric}: there is no lead to test."
    if len(ranked) < 2:
        return (f"only group {ranked[0].name} has finished runs that logged {metric}: there is no runner-up "
                "to test its lead against.")
    best, second = ranked[:2]
    a, b = best.finals(metric), second.finals(metric)
    ma, mb = statistics.fmean(a), statistics.fmean(b)
    counts = f"n = {len(a)} and {len(b)}"
    head = (f"{best.name} and {second.name} tie on {metric} ({100 * ma:.2f}%, {counts})" if ma == mb else
            f"{best.name} leads {second.name} by {100 * (ma - mb):.2f} points of {metric} "
            f"({100 * ma:.2f}% vs {100 * mb:.2f}%, {counts})")
    alone = [g.name for g, values in ((best, a), (second, b)) if len(values) < 2]
    if alone:
        return (f"{head}; {spread_name} is unknown with 1 run in {' and '.join(alone)}, so the lead is not "
                "tested: run each setting with several seeds (seed=0,1,2).")
    p = welch_p(a, b)
    if p < SIGNIFICANT:
        return f"{head}: larger than {spread_name} (Welch's t-test {p_text(p)} < {SIGNIFICANT})."
    return f"{head}: not larger than {spread_name} (Welch's t-test {p_text(p)} >= {SIGNIFICANT})."


def markdown(columns: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in r) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def mean_curve(members: Sequence[Compared], metric: str) -> list[tuple[int, float, float, float]]:
    """(x, mean, min, max) over the members that logged a value at x."""
    at: dict[int, list[float]] = {}
    for c in members:
        for x, y in c.curves.get(metric) or []:
            at.setdefault(x, []).append(y)
    return [(x, statistics.fmean(ys), min(ys), max(ys)) for x, ys in sorted(at.items())]


def chart(groups: Sequence[Group], path: Path, title: str) -> Path:
    """Three panels (train loss by step, eval top-1 by epoch, loader images/s by step): per group its mean
    curve and, where it has more than one run, a band from the min to the max of its runs."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    labels = legend(groups)
    columns = 1 if max(map(len, labels)) > 60 else min(len(labels), 3)
    legend_rows = -(-len(labels) // columns)
    legend_in = 0.3 + 0.22 * legend_rows
    fig, axes = plt.subplots(1, len(CURVES), figsize=(5.2 * len(CURVES), 4.2 + legend_in))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    markers = "osD^vP*X"
    for ax, (metric, xlabel, ylabel, scale) in zip(axes, CURVES):
        drawn, steps = False, set()
        for i, g in enumerate(groups):
            curve = mean_curve(g.members, metric)
            if not curve:
                continue
            xs, mean, low, high = zip(*curve)
            steps.update(xs)
            color = colors[i % len(colors)]
            # later groups get smaller markers, so equal values still show every group's marker
            ax.plot(xs, [y * scale for y in mean], color=color, linewidth=1.4, label=labels[i],
                    marker=markers[i % len(markers)] if len(xs) <= 20 else None,
                    markersize=max(3.0, 7.0 - 1.5 * i))
            if len(g.members) > 1 and len(xs) > 1:
                ax.fill_between(xs, [y * scale for y in low], [y * scale for y in high], color=color, alpha=0.18,
                                linewidth=0)
            elif len(g.members) > 1:  # one point: the band is a vertical bar
                ax.vlines(xs, [y * scale for y in low], [y * scale for y in high], color=color, alpha=0.5,
                          linewidth=6)
            drawn = True
        if not drawn:
            ax.text(0.5, 0.5, f"no {metric} logged", ha="center", va="center", transform=ax.transAxes, color="gray")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # steps and epochs are whole numbers
        if len(steps) == 1:  # one step or epoch: a tick at it, not a fractional axis around it
            (x,) = steps
            ax.set_xticks([x])
            ax.set_xlim(x - 1, x + 1)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.set_title(f"{metric}: group mean, min – max band", fontsize=10)
        ax.grid(alpha=0.3)
    handles, names = next((ax.get_legend_handles_labels() for ax in axes if ax.get_legend_handles_labels()[0]),
                          ([], []))
    if handles:
        fig.legend(handles, names, loc="lower center", ncol=columns, fontsize=9, frameon=False)
    fig.suptitle(title, fontsize=11)
    fig.tight_layout(rect=(0, legend_in / fig.get_figheight(), 1, 1))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
