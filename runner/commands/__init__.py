"""One module per subcommand: `register(subparsers)` adds its parser and sets `handler`.

Modules import the heavy parts of the package (torch, DALI, MLflow) inside their handlers, so
that `runner --help` and `runner validate` start fast.
"""
from __future__ import annotations

import importlib
from types import ModuleType

COMMANDS = ["validate", "compile", "ops", "models", "optimizers", "data", "launch", "resume", "bench", "tune", "ui",
            "tracking", "reproduce", "export", "compare", "sweep", "preview", "evaluate", "average"]


def load_command(name: str) -> ModuleType:
    return importlib.import_module(f"runner.commands.{name}")
