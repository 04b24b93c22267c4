"""`runner sweep`: the grid over comma-separated overrides, one child run per combination.

`optimizer.lr=0.1,0.05 data.batch_size=32,64 trainer.epochs=3` is four children, each launched
with one value of every list and every plain override. Values are written as in any override (a
list value stays one value: `optimizer.betas=[0.9,0.99]`; quote a value that holds a comma:
`description='a, b'`). Every combination is validated before the first child starts.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass

from runner.errors import ConfigError, RunnerError
from runner.run.validate import validate

_OPEN, _CLOSE = "[{(", "]})"


@dataclass(frozen=True)
class Axis:
    key: str
    item: str                       # as written on the command line
    values: tuple[str, ...]         # value texts, each parsed later like an override's value


@dataclass(frozen=True)
class Child:
    index: int                      # 1-based
    values: tuple[tuple[str, str], ...]  # (key, value text), one per axis

    @property
    def overrides(self) -> list[str]:
        return [f"{k}={v}" for k, v in self.values]

    def label(self, short_keys: bool = True) -> str:
        return " ".join(f"{k.rsplit('.', 1)[-1] if short_keys else k}={v}" for k, v in self.values)


def split_list(text: str) -> list[str]:
    """Split at commas outside brackets, braces and quotes: 'a,[1,2],"x,y"' -> ['a', '[1,2]', '"x,y"']."""
    parts, depth, quote, start = [], 0, None, 0
    for i, ch in enumerate(text):
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch in _OPEN:
            depth += 1
        elif ch in _CLOSE:
            depth = max(0, depth - 1)
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [p.strip() for p in parts]


NOTHING_TO_SWEEP = ("nothing to sweep: no override has a comma-separated list of values (key=a,b,c). runner launch "
                    "runs a single experiment (runner sweep --launcher slurm, a single SLURM job).")


def parse_sweep(items: list[str], *, require_axis: bool = True) -> tuple[list[Axis], list[str]]:
    """key=value command-line items -> (sweep axes, plain overrides applied to every child); no axis at all is
    one child, unless `require_axis`."""
    axes: list[Axis] = []
    plain: list[str] = []
    seen: dict[str, str] = {}
    for item in items:
        key, _, value = item.partition("=")
        key = key.strip()
        if key in seen:
            raise ConfigError(f"given twice (also by '{seen[key]}'); give each key once, with all its "
                              "values in one comma-separated list.", file=f"command line '{item}'", where=key)
        seen[key] = item
        values = split_list(value)
        if len(values) == 1:
            plain.append(item)
            continue
        for i, v in enumerate(values):
            if not v:
                raise ConfigError(f"value {i + 1} of this sweep list is empty; write key=a,b,c with a value between "
                                  "every two commas.", file=f"command line '{item}'", where=key)
        repeated = next((v for v in values if values.count(v) > 1), None)
        if repeated is not None:
            raise ConfigError(f"the sweep list names {repeated} more than once; each value makes one run.",
                              file=f"command line '{item}'", where=key)
        axes.append(Axis(key=key, item=item, values=tuple(values)))
    if not axes and require_axis:
        raise ConfigError(NOTHING_TO_SWEEP, file="command line")
    return axes, plain


def grid(axes: list[Axis]) -> list[Child]:
    """Every combination, the last axis varying fastest."""
    combos = itertools.product(*([(a.key, v) for v in a.values] for a in axes))
    return [Child(index=i + 1, values=tuple(c)) for i, c in enumerate(combos)]


def short_keys_unique(axes: list[Axis]) -> bool:
    leaves = [a.key.rsplit(".", 1)[-1] for a in axes]
    return len(set(leaves)) == len(leaves)


def check_grid(experiment: str, plain: list[str], axes: list[Axis], children: list[Child], *,
               accelerator: str | None = None, processes: int | None = None) -> list:
    """Validate every child before any runs (for the machine the children run on: this one, or `accelerator` with
    `processes` per node); an error names the sweep item it came from. Returns, per child, its Validated or its
    error: one child's mistake does not hold up the rest, but a mistake every child shares is raised."""
    items = {f"command line '{a.key}={v}'": a.item for a in axes for v in a.values}
    checked: list = []
    for child in children:
        try:
            checked.append(validate(experiment, [*plain, *child.overrides], accelerator=accelerator,
                                    processes=processes))
        except RunnerError as e:
            if e.file in items:
                checked.append(type(e)(e.message, file=f"command line '{items[e.file]}'", where=e.where))
            else:
                checked.append(type(e)(f"{e.message} (sweep run {child.index}: {child.label(False)})", file=e.file,
                                       line=e.line, where=e.where))
    if all(isinstance(c, RunnerError) for c in checked):
        raise checked[0] from None
    return checked


def run_name(child: Child, short_keys: bool) -> str:
    """The child's MLflow run name: its values, e.g. 'lr=0.1 batch_size=64' (quotes and $ dropped)."""
    return "".join(ch for ch in child.label(short_keys) if ch not in "'\"\\$")
