"""runner's files: those a command produces, never left half written; and its own cache (reader file lists,
fetched checkpoints, facts read from installed libraries)."""
from __future__ import annotations

import hashlib
import os
import pickle
import sys
import uuid
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import TypeVar

from runner.errors import RunnerError, display_path

T = TypeVar("T")


def check_writable(path: str | Path, option: str = "--output") -> Path:
    """Fail before any work when `path` cannot be written (a folder, a missing parent)."""
    path = Path(path)
    if path.is_dir():
        raise RunnerError(f"{display_path(path)} is a folder; name a file to write.", file="command line",
                          where=option)
    if not path.parent.is_dir():
        raise RunnerError(f"folder {display_path(path.parent)} does not exist; create it or name another file.",
                          file="command line", where=option)
    return path


def write_text_atomic(path: str | Path, text: str, option: str = "--output") -> Path:
    """Write to a temporary file beside `path`, then rename it over `path`."""
    return _write_atomic(path, text, "w", option)


def write_bytes_atomic(path: str | Path, data: bytes, option: str = "--output") -> Path:
    """write_text_atomic for bytes (a PNG)."""
    return _write_atomic(path, data, "wb", option)


def _write_atomic(path: str | Path, data: str | bytes, mode: str, option: str) -> Path:
    path = check_writable(path, option)
    try:
        # open(..., "x"), not mkstemp: the file gets the umask's permissions, not mkstemp's private 0600
        tmp = path.parent / f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}"
        with open(tmp, mode.replace("w", "x")) as f:
            f.write(data)
        os.replace(tmp, path)
    except OSError as e:
        raise RunnerError(f"cannot write {display_path(path)} ({e.strerror}).", file="command line",
                          where=option) from None
    return path


def user_cache(*parts: str) -> Path:
    """$RUNNER_CACHE, else $XDG_CACHE_HOME/runner, else ~/.cache/runner; joined with `parts`. Read at each call,
    so a process (or a test session) that sets the variable moves everything it writes."""
    root = os.environ.get("RUNNER_CACHE")
    if not root:
        root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "runner"
    return Path(root).joinpath(*parts)


def kept_facts(name: str, key: str, compute: Callable[[], T]) -> T:
    """compute()'s result, kept as a pickle in runner's user cache under `name` and `key`: facts read from a heavy
    library (DALI's operator schemas, timm's optimizers) made once per installed version instead of importing the
    library at every start. `key` names what the facts depend on (versions, the code that makes them); a file
    that cannot be read is made again, one that cannot be written is not kept."""
    path = user_cache("facts", f"{name}-{key}.pickle")
    try:
        with open(path, "rb") as f:
            return pickle.load(f)
    except Exception:  # noqa: BLE001 - missing, partly written, or from code that has changed: make it again
        pass
    value = compute()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.parent / f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}"
        tmp.write_bytes(pickle.dumps(value))
        os.replace(tmp, path)
    except OSError:
        pass
    return value


def facts_key(*parts: str, sources: tuple[str | Path, ...] = ()) -> str:
    """A short key for kept_facts: `parts` (versions), this Python's version and the bytes of `sources`."""
    digest = hashlib.sha256("\0".join([*parts, sys.version.split()[0]]).encode())
    for source in sources:
        digest.update(Path(source).read_bytes())
    return digest.hexdigest()[:16]


def installed_version(*distributions: str, prefix: str | None = None) -> str | None:
    """The version of the first of `distributions` that is installed (or of any whose name starts with `prefix`),
    read from its metadata without importing it; None when none is."""
    for name in distributions:
        try:
            return f"{name}=={metadata.version(name)}"
        except metadata.PackageNotFoundError:
            continue
    if prefix is not None:
        for dist in metadata.distributions():
            name = dist.metadata["Name"] or ""
            if name.lower().startswith(prefix):
                return f"{name}=={dist.version}"
    return None
