"""Reading YAML files with their positions, so that errors can name a line."""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml
from omegaconf import DictConfig, OmegaConf

from runner.errors import ConfigError, first_line

_INDEX = re.compile(r"\[(\d+)\]")


class YamlFile:
    """A YAML mapping file: its OmegaConf node and the line of every key."""

    def __init__(self, path: Path, what: str = "file"):
        self.path = path
        text = _read(path, what)
        try:
            self.node = yaml.compose(text)
        except yaml.YAMLError as e:
            mark = getattr(e, "problem_mark", None)
            raise ConfigError(f"YAML syntax error: {_syntax_problem(e)}", file=path,
                              line=mark.line + 1 if mark else None) from None
        if self.node is not None and not isinstance(self.node, yaml.MappingNode):
            raise ConfigError("expected a mapping of keys at the top level of the file.", file=path, line=1)
        _check_duplicates(self.node, "", path)
        try:
            self.config: DictConfig = OmegaConf.create(text) if self.node is not None else OmegaConf.create({})
        except Exception as e:  # omegaconf rejects some YAML that PyYAML accepts (e.g. non-string keys)
            raise ConfigError(f"cannot be loaded as a config: {first_line(e)}.", file=path) from None

    def line(self, key: str) -> int | None:
        """1-based line of `key` ("a.b[2].c"), or of its deepest existing parent."""
        return self.find(key)[0]

    def find(self, key: str) -> tuple[int | None, bool]:
        """(line, exact): the line of `key` or of its deepest parent, and whether `key` itself is here."""
        line, depth = self._walk(key)
        return line, depth == len(_split(key))

    def depth(self, key: str) -> int:
        """How many parts of `key`'s path this file writes: 0 for none, all of them when it sets `key`."""
        return self._walk(key)[1]

    def _walk(self, key: str) -> tuple[int | None, int]:
        node, found = self.node, None
        for depth, part in enumerate(_split(key)):
            if isinstance(node, yaml.MappingNode) and isinstance(part, str):
                match = next(((k, v) for k, v in node.value if k.value == part), None)
                if match is None:
                    return found, depth
                found, node = match[0].start_mark.line + 1, match[1]
            elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
                node = node.value[part]
                found = node.start_mark.line + 1
            else:
                return found, depth
        return found, len(_split(key))


def _split(key: str) -> list[Any]:
    parts: list[Any] = []
    for piece in key.split("."):
        name = _INDEX.split(piece)
        if name[0]:
            parts.append(name[0])
        parts.extend(int(i) for i in name[1::2])
    return parts


def _read(path: Path, what: str) -> str:
    try:
        return path.read_text()
    except FileNotFoundError:
        hint = ""
        if path.suffix not in (".yaml", ".yml") and len(path.parts) == 1:
            # `runner validate exp.yaml optimizer.lr` : an override without '=' reads as a file name
            hint = " If it was meant as an override, write key.path=value, for example optimizer.lr=0.05."
        raise ConfigError(f"{what} not found.{hint}", file=path) from None
    except IsADirectoryError:
        names = sorted(p.name for p in path.glob("*.y*ml") if p.is_file())
        inside = f" YAML files in it: {', '.join(names[:10])}." if names else " It holds no YAML files."
        raise ConfigError(f"is a folder, not an {what}; name a YAML file.{inside}", file=path) from None
    except UnicodeDecodeError as e:
        raise ConfigError(f"cannot read {what}: not UTF-8 text (byte {e.start}).", file=path) from None
    except OSError as e:
        raise ConfigError(f"cannot read {what}: {e.strerror}.", file=path) from None


def _syntax_problem(e: yaml.YAMLError) -> str:
    """PyYAML's problem, where the construct it was reading began, and the usual cause."""
    problem = getattr(e, "problem", None) or first_line(e)
    context, start = getattr(e, "context", None), getattr(e, "context_mark", None)
    mark = getattr(e, "problem_mark", None)
    if context and start is not None and mark is not None and start.line != mark.line:
        problem += f" ({context} that starts on line {start.line + 1})"
    elif context and "scanning for the next token" not in context:
        problem += f" ({context})"
    if "'\\t'" in problem:
        return problem + ". YAML indents with spaces only: replace the tab with spaces."
    if context and "flow mapping" in context and start is not None:
        return problem + f". Check that the '{{' on line {start.line + 1} is closed with '}}' and its items are separated by commas."
    if context and "flow sequence" in context and start is not None:
        return problem + f". Check that the '[' on line {start.line + 1} is closed with ']' and its items are separated by commas."
    if "mapping values are not allowed" in problem:
        return problem + ". Check the indentation of this line, or quote a value that contains ': '."
    return problem + "."


def _check_duplicates(node: yaml.Node | None, key: str, path: Path) -> None:
    """A key written twice in one mapping: PyYAML keeps the last silently, OmegaConf rejects it without a line."""
    if isinstance(node, yaml.MappingNode):
        seen: dict[str, int] = {}
        for k, v in node.value:
            name = str(k.value)
            child = f"{key}.{name}" if key else name
            if name in seen and name != "<<":
                raise ConfigError(f"duplicate key (first written on line {seen[name]}). A YAML mapping holds each key "
                                  "once: merge the two or remove one.", file=path, line=k.start_mark.line + 1,
                                  where=child)
            seen[name] = k.start_mark.line + 1
            _check_duplicates(v, child, path)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _check_duplicates(item, f"{key}[{i}]", path)
