"""Dataset tools: a synthetic ImageFolder set, the layout DALI's file reader sees, decode checks.

Names are imported on first use, so that `runner.data.scan` (and the CLI's help) do not pay for
numpy and Pillow.
"""
from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "scan": ["DEFAULT_SKIP_LIST", "CheckReport", "FileIssue", "ImageFolderScan", "check_images",
             "default_skip_list", "fingerprint", "read_skip_list", "scan_image_folder", "write_skip_list"],
    "synth": ["SynthSummary", "generate_synthetic"],
}
_MODULE_OF = {name: module for module, names in _EXPORTS.items() for name in names}
__all__ = sorted(_MODULE_OF)


def __getattr__(name: str) -> Any:
    if name not in _MODULE_OF:
        raise AttributeError(f"module 'runner.data' has no attribute '{name}'")
    return getattr(importlib.import_module(f"runner.data.{_MODULE_OF[name]}"), name)
