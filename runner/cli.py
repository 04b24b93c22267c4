"""`runner` subcommands: parse arguments, call the package, print. No logic lives here."""
from __future__ import annotations

import argparse
import os
import sys

from runner import console
from runner.errors import RunnerError


def _split_overrides(items: list[str]) -> tuple[list[str], list[str]]:
    """Positional words -> (files, key=value overrides)."""
    files = [i for i in items if "=" not in i]
    return files, [i for i in items if "=" in i]


def _experiment_and_overrides(args) -> tuple[str, list[str]]:
    files, overrides = _split_overrides([args.experiment, *args.overrides])
    if len(files) != 1:
        raise RunnerError(f"expected one experiment file and key=value overrides; got files {files}.",
                          file="command line")
    return files[0], overrides


def _cpu_note(graphs: dict) -> None:
    moved = {role: g.moved_to_cpu for role, g in graphs.items() if g.moved_to_cpu}
    if moved:
        where = "; ".join(f"{role} steps {', '.join(map(str, steps))}" for role, steps in moved.items())
        console.note(f"no GPU here: pipelines are compiled for the CPU ({where} moved from mixed/gpu to cpu, "
                     ".gpu() dropped).")


def cmd_validate(args) -> int:
    from runner.commands.validate import print_validated
    from runner.validate import validate

    files, overrides = _split_overrides(args.items)
    if not files:
        raise RunnerError("name at least one experiment file, e.g. runner validate experiments/quickstart.yaml.",
                          file="command line")
    for path in files:
        v = validate(path, overrides)
        _cpu_note(v.graphs)
        print_validated(v)
    return 0


def cmd_compile(args) -> int:
    from runner.commands.compile import compiled_source
    from runner.validate import validate

    path, overrides = _experiment_and_overrides(args)
    v = validate(path, overrides)
    _cpu_note(v.graphs)
    source = compiled_source(v, args.pipeline)
    if args.output:
        with open(args.output, "w") as f:
            f.write(source)
        console.err.print(f"wrote {args.output}")
    else:
        print(source)
    return 0


def cmd_ops(args) -> int:
    from runner.commands.ops import print_op, print_ops

    if args.name:
        print_op(args.name)
    else:
        print_ops(args.filter)
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="runner", description="Config-driven DALI + PyTorch experiment runner.")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    s = sub.add_parser("validate", help="check experiments (config, names, pipelines) without running")
    s.add_argument("items", nargs="+", metavar="EXPERIMENT|key=value")
    s.set_defaults(handler=cmd_validate)

    s = sub.add_parser("compile", help="print a pipeline as DALI Python (@pipeline_def of fn.* calls)")
    s.add_argument("experiment")
    s.add_argument("overrides", nargs="*", metavar="key=value")
    s.add_argument("--pipeline", choices=["train", "eval"], default="train")
    s.add_argument("-o", "--output", help="write to this file instead of stdout")
    s.set_defaults(handler=cmd_compile)

    s = sub.add_parser("ops", help="list DSL operators, or show one operator's arguments")
    s.add_argument("name", nargs="?")
    s.add_argument("--filter", help="only names containing this text")
    s.set_defaults(handler=cmd_ops)
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
