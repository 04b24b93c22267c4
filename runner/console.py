"""The terminal: one rich console for output, one for errors, and the few shapes we print."""
from __future__ import annotations

import os
import sys

from rich.console import Console
from rich.markup import escape
from rich.table import Table

# logs and pipes get wide tables instead of rich's 80 columns, unless $COLUMNS says how wide (rich reads it)
_WIDTH = None if sys.stdout.isatty() or os.environ.get("COLUMNS", "").isdigit() else 150
out = Console(soft_wrap=True, highlight=False, width=_WIDTH)
err = Console(stderr=True, soft_wrap=True, highlight=False, width=_WIDTH)


def error(message: str) -> None:
    """One paragraph, no traceback: the shape of every user-facing failure."""
    err.print(f"[bold red]error:[/] {escape(message)}", markup=True, highlight=False)


def note(message: str) -> None:
    err.print(f"[yellow]note:[/] {escape(message)}", markup=True, highlight=False)


def table(title: str | None, columns: list[str], rows: list[list], *, justify_numbers: bool = True) -> Table:
    t = Table(title=title, title_justify="left", header_style="bold", show_header=any(columns))
    for i, c in enumerate(columns):
        t.add_column(c, justify="right" if justify_numbers and i > 0 else "left")
    for r in rows:
        t.add_row(*[str(x) for x in r])
    return t


def percent(share: float | None, missing: str = "-") -> str:
    """A share (0-1) as a table cell, 0.123 -> '12.3%'; `missing` where there is no value."""
    return missing if share is None else f"{100 * share:.1f}%"


def interactive() -> bool:
    """True when stdout is a terminal a person watches (live bars), False for logs and pipes."""
    return sys.stdout.isatty() and out.is_terminal
