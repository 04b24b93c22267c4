"""Argument shapes shared by subcommands."""
from __future__ import annotations

from runner.errors import RunnerError


def split_overrides(items: list[str]) -> tuple[list[str], list[str]]:
    """Positional words -> (files, key=value and ~key overrides)."""
    from runner.config.load import is_override

    return [i for i in items if not is_override(i)], [i for i in items if is_override(i)]


def experiment_and_overrides(args) -> tuple[str, list[str]]:
    from runner.config.load import is_override

    stray = [o for o in args.overrides if not is_override(o)]
    if stray:
        raise RunnerError(f"'{stray[0]}' is not an override; write key.path=value, for example "
                          "optimizer.lr=0.05 (one experiment file comes first).", file="command line")
    return args.experiment, list(args.overrides)


def add_experiment(parser) -> None:
    parser.add_argument("experiment", help="experiment YAML file")
    parser.add_argument("overrides", nargs="*", metavar="key=value", help="overrides, e.g. optimizer.lr=0.05")


