"""Reading YAML files with their positions, so that errors can name a line."""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml
from omegaconf import DictConfig, OmegaConf

from runner.errors import ConfigError

_INDEX = re.compile(r"\[(\d+)\]")


class YamlFile:
    """A YAML mapping file: its OmegaConf node and the line of every key."""

    def __init__(self, path: Path, what: str = "file"):
        self.path = path
        try:
            text = path.read_text()
        except FileNotFoundError:
            raise ConfigError(f"{what} not found.", file=path) from None
        except OSError as e:
            raise ConfigError(f"cannot read {what}: {e.strerror}.", file=path) from None
        try:
            self.node = yaml.compose(text)
        except yaml.YAMLError as e:
            mark = getattr(e, "problem_mark", None)
            problem = getattr(e, "problem", None) or str(e)
            context = getattr(e, "context", None)
            detail = f"{problem} ({context})" if context else problem
            raise ConfigError(f"YAML syntax error: {detail}.", file=path,
                              line=mark.line + 1 if mark else None) from None
        if self.node is not None and not isinstance(self.node, yaml.MappingNode):
            raise ConfigError("expected a mapping of keys at the top level of the file.", file=path, line=1)
        try:
            self.config: DictConfig = OmegaConf.create(text) if self.node is not None else OmegaConf.create({})
        except Exception as e:  # omegaconf rejects some YAML that PyYAML accepts (e.g. non-string keys)
            raise ConfigError(f"cannot be loaded as a config: {e}.", file=path) from None

    def line(self, key: str) -> int | None:
        """1-based line of `key` ("a.b[2].c"), or of its deepest existing parent."""
        return self.find(key)[0]

    def find(self, key: str) -> tuple[int | None, bool]:
        """(line, exact): the line of `key` or of its deepest parent, and whether `key` itself is here."""
        node, found = self.node, None
        for part in _split(key):
            if isinstance(node, yaml.MappingNode) and isinstance(part, str):
                match = next(((k, v) for k, v in node.value if k.value == part), None)
                if match is None:
                    return found, False
                found, node = match[0].start_mark.line + 1, match[1]
            elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
                node = node.value[part]
                found = node.start_mark.line + 1
            else:
                return found, False
        return found, True


def _split(key: str) -> list[Any]:
    parts: list[Any] = []
    for piece in key.split("."):
        name = _INDEX.split(piece)
        if name[0]:
            parts.append(name[0])
        parts.extend(int(i) for i in name[1::2])
    return parts
