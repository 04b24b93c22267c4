"""Registry: the only way a name written in YAML becomes code."""
from __future__ import annotations

import fnmatch
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

from runner.errors import ConfigError, did_you_mean, list_names

T = TypeVar("T")


class Registry(Generic[T]):
    """A named table of factories with did-you-mean lookups."""

    def __init__(self, kind: str, listing: Callable[[list[str]], str] | None = None):
        """`listing(names)` ends an unknown name's error (default: 'Valid {kind}s: a, b, ...')."""
        self.kind = kind
        self.listing = listing or (lambda names: f"Valid {kind}s: {list_names(names, limit=40)}.")
        self._entries: dict[str, T] = {}

    def register(self, name: str) -> Callable[[T], T]:
        def add(obj: T) -> T:
            if name in self._entries:
                raise ValueError(f"{self.kind} '{name}' registered twice")
            self._entries[name] = obj
            return obj
        return add

    def add(self, name: str, obj: T) -> None:
        self.register(name)(obj)

    def get(self, name: str, *, file=None, line=None, where: str | None = None) -> T:
        """The entry for `name`, or a ConfigError naming the valid names and the closest one."""
        try:
            return self._entries[name]
        except KeyError:
            raise ConfigError(
                f"unknown {self.kind} '{name}'.{did_you_mean(name, self._entries)} {self.listing(self.names())}",
                file=file, line=line, where=where) from None

    def names(self, pattern: str | None = None) -> list[str]:
        """Sorted names; with `pattern`, those containing it, or matching it as a glob when it has * ? or [."""
        names = sorted(self._entries)
        if not pattern:
            return names
        if any(c in pattern for c in "*?["):
            return [n for n in names if fnmatch.fnmatchcase(n, pattern)]
        return [n for n in names if pattern in n]

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())
