"""`runner` subcommands: parse arguments, call the package, print. No logic lives here."""
from __future__ import annotations

import argparse
import os
import sys
import traceback

from runner import console
from runner.commands import COMMANDS, load_command
from runner.errors import RunnerError


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="runner", description="Config-driven DALI + PyTorch experiment runner.")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMANDS:
        load_command(name).register(sub)
    return p


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line as `runner` reads it: key=value overrides may come after options too
    (`runner bench X --steps 50 data.batch_size=64`)."""
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra and all(("=" in e or e.startswith("~")) and not e.startswith("-") for e in extra) \
            and hasattr(args, "overrides"):
        args.overrides = [*args.overrides, *extra]
    elif extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    return args


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    os.environ.setdefault("DO_NOT_TRACK", "1")
    args = parse(argv)
    try:
        return args.handler(args) or 0
    except RunnerError as e:
        if os.environ.get("RUNNER_DEBUG") == "1":
            console.err.print(full_traceback(e), markup=False, highlight=False, end="")
        console.error(str(e))
        return e.exit_code
    except KeyboardInterrupt:
        console.error("interrupted.")
        return 130


def full_traceback(error: BaseException) -> str:
    """The traceback with every cause, also those `raise ... from None` hides (shown with RUNNER_DEBUG=1)."""
    seen, e = set(), error
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        e.__suppress_context__ = False
        e = e.__cause__ or e.__context__
    return "".join(traceback.format_exception(error))


if __name__ == "__main__":
    sys.exit(main())
