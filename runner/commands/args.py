"""Argument shapes shared by subcommands."""
from __future__ import annotations

from runner import console
from runner.errors import RunnerError


def split_overrides(items: list[str]) -> tuple[list[str], list[str]]:
    """Positional words -> (files, key=value overrides)."""
    return [i for i in items if "=" not in i], [i for i in items if "=" in i]


def experiment_and_overrides(args) -> tuple[str, list[str]]:
    files, overrides = split_overrides([args.experiment, *args.overrides])
    if len(files) != 1:
        raise RunnerError(f"expected one experiment file and key=value overrides; got files {files}.",
                          file="command line")
    return files[0], overrides


def add_experiment(parser) -> None:
    parser.add_argument("experiment", help="experiment YAML file")
    parser.add_argument("overrides", nargs="*", metavar="key=value", help="overrides, e.g. optimizer.lr=0.05")


def cpu_note(graphs: dict) -> None:
    """Say once that a GPU pipeline was placed on the CPU."""
    moved = {role: g.moved_to_cpu for role, g in graphs.items() if g.moved_to_cpu}
    if moved:
        where = "; ".join(f"{role} steps {', '.join(map(str, steps))}" for role, steps in moved.items())
        console.note(f"no GPU here: pipelines are compiled for the CPU ({where} moved from mixed/gpu to cpu, "
                     ".gpu() dropped).")
