"""Writing the files a command produces without ever leaving half of one behind."""
from __future__ import annotations

import os
import uuid
from pathlib import Path

from runner.errors import RunnerError, display_path


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
