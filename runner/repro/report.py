"""compare's report: the grouped table, printed and written as compare.md and compare.png."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from rich import box
from rich.markup import escape
from rich.table import Table

from runner import console
from runner.repro.compare import chart, group_table, lead_line, legend, load_compared, markdown, run_table
from runner.repro.groups import SEED_PARAMS, differing_params, group_runs, grouping_keys, varying_within


@dataclass(frozen=True)
class Report:
    """What compare shows: a heading, notes, the table of runs, the groups' spreads, the closing line."""
    title: str
    notes: list[str]
    groups: list
    run_columns: list[str]
    run_rows: list[list[str]]
    group_columns: list[str]
    group_rows: list[list[str]]
    ends: list[int]
    closing: str

    def markdown(self) -> str:
        return "\n".join([self.title, "", *(f"- {n}" for n in self.notes), "",
                          markdown(self.run_columns, self.run_rows), markdown(self.group_columns, self.group_rows),
                          self.closing, ""])


def build_report(runs: list, group_by: list[str] | None = None, notes: Sequence[str] = ()) -> Report:
    """The groups of `runs` and their statistics; `group_by` None groups by every differing param except the
    seeds. `notes` come first (e.g. how many of a sweep's children are still running)."""
    keys = grouping_keys(runs, group_by)
    compared = load_compared(runs)
    groups = group_runs(compared, keys)
    lines = [*notes, *legend(groups)]
    varying = varying_within(groups, keys)
    if varying:
        lines.append(f"also differ within groups: {', '.join(varying)}")
    unfinished = [c.run for c in compared if c.run.status != "FINISHED"]
    if unfinished:
        lines.append("left out of the statistics (not FINISHED): "
                     + ", ".join(f"{r.short} ({r.status})" for r in unfinished))
    run_columns, run_rows = run_table(groups)
    group_columns, group_rows, ends = group_table(groups)
    closing = lead_line(groups, "the spread within groups" if varying else "the spread over seeds")
    return Report(title=heading(runs, keys, len(groups)), notes=lines, groups=groups, run_columns=run_columns,
                  run_rows=run_rows, group_columns=group_columns, group_rows=group_rows, ends=ends, closing=closing)


def print_report(report: Report) -> None:
    console.out.print(escape(report.title))
    for line in report.notes:
        console.out.print(f"  {escape(line)}")
    columns = report.run_columns
    console.out.print(_fitting(columns, report.run_rows, numbers=range(columns.index("time") + 1, len(columns) - 1)))
    console.out.print()
    console.out.print(_table(report.group_columns, report.group_rows, numbers=range(2, len(report.group_columns)),
                             ends=report.ends))
    console.out.print()
    console.out.print(escape(report.closing))


def write_report(report: Report, out: Path) -> tuple[Path, Path]:
    """out/compare.png (the groups' mean curves) and out/compare.md (the tables)."""
    out.mkdir(parents=True, exist_ok=True)
    png = chart(report.groups, out / "compare.png", report.title)
    md = out / "compare.md"
    md.write_text(report.markdown())
    return png, md


def show(runs: list, out: Path | None, group_by: list[str] | None = None, notes: Sequence[str] = ()) -> int:
    """Print the legend, the runs, the groups' spreads and the closing line; write compare.png and
    compare.md to `out` (unless None). `group_by` None groups by every differing param except the seeds."""
    report = build_report(runs, group_by, notes)
    print_report(report)
    if out is not None:
        write_report(report, out)
        console.out.print(f"wrote {out}/compare.png and {out}/compare.md")
    return 0


def heading(runs: list, keys: list[str], groups: int) -> str:
    """'6 runs of tiny in 2 groups, by pipelines.train.use' (or ': only seeds differ', ': no params differ')."""
    experiments = ", ".join(sorted({r.experiment for r in runs}))
    head = f"{len(runs)} run{'s' if len(runs) != 1 else ''} of {experiments} in {groups} group{'s' if groups != 1 else ''}"
    if keys:
        return f"{head}, by {', '.join(keys)}"
    differ = set(differing_params(runs))
    return f"{head}: " + ("no params differ" if not differ else "only seeds differ" if differ <= SEED_PARAMS
                          else "not grouped")


def _table(columns: list[str], rows: list[list[str]], *, numbers: range, ends: Sequence[int] = (),
           upto: int | None = None) -> Table:
    """A compact table whose cells fold rather than end in '…'; columns from `upto` on are left out."""
    t = Table(box=box.HORIZONTALS, show_edge=False, padding=(0, 1, 0, 0), header_style="bold")
    for i, c in enumerate(columns[:upto]):
        t.add_column(escape(c), justify="right" if i in numbers else "left", overflow="fold")
    for i, r in enumerate(rows):
        t.add_row(*(escape(cell) for cell in r[:upto]), end_section=i in ends and i != len(rows) - 1)
    return t


def _fitting(columns: list[str], rows: list[list[str]], *, numbers: range) -> Table:
    """The table of runs, without its last column (the run names) when it would not fit the terminal."""
    t = _table(columns, rows, numbers=numbers)
    natural = console.out.measure(t, options=console.out.options.update_width(10_000)).maximum
    return t if natural <= console.out.width else _table(columns, rows, numbers=numbers, upto=-1)
