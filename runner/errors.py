"""User-facing errors: each carries where the mistake is (file, line, key path or pipeline step).

`where` is always that key path or label, a string. A `locate` (a Locator) maps a key path to its file and
line; `error_at(key, locate)` makes the file/line/where keyword arguments, passed on as `at`.

The CLI prints `str(error)` as one paragraph and exits with code 2; nothing below the CLI prints.
"""
from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

# key path -> (file, line) of the place that set it
Locator = Callable[[str], tuple[Any, int | None]]


def closest(name: str, choices: Iterable[str]) -> str | None:
    """The nearest valid name to a misspelt one, or None when nothing is close."""
    matches = difflib.get_close_matches(name, list(choices), n=1, cutoff=0.6)
    return matches[0] if matches else None


def did_you_mean(name: str, choices: Iterable[str]) -> str:
    """' Did you mean 'x'?' or an empty string."""
    match = closest(name, choices)
    return f" Did you mean '{match}'?" if match else ""


def list_names(names: Iterable[str], limit: int = 12) -> str:
    """A short comma-separated listing: 'a, b, c, ... (40 in all)'."""
    names = list(names)
    if len(names) <= limit:
        return ", ".join(names)
    return ", ".join(names[:limit]) + f", ... ({len(names)} in all)"


def first_names(names: Sequence[str], limit: int) -> str:
    """The first `limit` names and how many more: 'a, b, c and 4 more'."""
    extra = len(names) - limit
    return ", ".join(names[:limit]) + (f" and {extra} more" if extra > 0 else "")


def counted(n: int, singular: str, plural: str) -> str:
    """'1 entry', '3 entries'."""
    return f"{n} {singular if n == 1 else plural}"


def first_line(e: BaseException) -> str:
    """The first line of an exception's message (OmegaConf's `msg` without its key listing), no end stop."""
    text = str(getattr(e, "msg", None) or e).strip()
    return text.splitlines()[0].rstrip(".:") if text else type(e).__name__


def display_path(path: str | Path | None) -> str | None:
    """A Path as the user would type it (relative to the working directory when below it).

    Plain strings are labels such as "command line" and are kept as they are.
    """
    if path is None or isinstance(path, str):
        return path
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def error_at(key: str, locate: Locator | None = None, *, file: str | Path | None = None) -> dict[str, Any]:
    """The file/line/where keyword arguments of an error about `key` (a key path, option or label)."""
    line = None
    if locate is not None:
        file, line = locate(key)
    return {"file": file, "line": line, "where": key}


class RunnerError(Exception):
    """A mistake the user can fix; printed without a traceback, exit code 2."""

    exit_code = 2

    def __init__(self, message: str, *, file: str | Path | None = None, line: int | None = None,
                 where: str | None = None):
        self.message = message
        self.file = display_path(file)
        self.line = line
        self.where = where
        super().__init__(str(self))

    def __str__(self) -> str:
        prefix = ""
        if self.file:
            prefix = self.file + (f":{self.line}" if self.line else "") + ": "
        if self.where:
            prefix += self.where + ": "
        return prefix + self.message


class ConfigError(RunnerError):
    """An experiment or pipeline file (or a command-line override) is invalid."""


class DataError(RunnerError):
    """The data a run would read is missing or unusable."""


class MachineError(RunnerError):
    """The machine cannot do what the experiment asks (no GPU, no DALI, ...)."""
