"""`runner` subcommands: parse arguments, call the package, print. No logic lives here."""
from __future__ import annotations

import argparse
import os
import sys

from runner import console
from runner.commands import COMMANDS, load_command
from runner.errors import RunnerError


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="runner", description="Config-driven DALI + PyTorch experiment runner.")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMANDS:
        load_command(name).register(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    os.environ.setdefault("DO_NOT_TRACK", "1")
    args = build_parser().parse_args(argv)
    try:
        return args.handler(args) or 0
    except RunnerError as e:
        console.error(str(e))
        return e.exit_code
    except KeyboardInterrupt:
        console.error("interrupted.")
        return 130


if __name__ == "__main__":
    sys.exit(main())
