"""runner's own files under the user's cache folder: things any run can make again (reader file lists, skip lists of
folders it cannot write to, checkpoints fetched from a tracking store)."""
from __future__ import annotations

import os
from pathlib import Path


def user_cache(*parts: str) -> Path:
    """$RUNNER_CACHE, else $XDG_CACHE_HOME/runner, else ~/.cache/runner; joined with `parts`. Read at each call,
    so a process (or a test session) that sets the variable moves everything it writes."""
    root = os.environ.get("RUNNER_CACHE")
    if not root:
        root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "runner"
    return Path(root).joinpath(*parts)
