"""Argument shapes shared by subcommands."""
from __future__ import annotations

from runner import console
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


def run_notes(v) -> None:
    """Say once what a validated experiment runs differently from how it reads: a GPU pipeline placed on the CPU,
    deprecated DALI names, a schedule that never leaves its warm-up or never decays."""
    for note in v.notes:
        console.note(note)
    graphs = v.graphs
    renamed = dict(pair for g in graphs.values() for pair in g.renamed)
    if renamed:
        console.note("DALI has deprecated " + ", ".join(
            f"fn.{old} (now fn.{new})" if new != old else f"fn.{old} (no replacement named; it still runs)"
            for old, new in renamed.items()) + "; the pipelines are compiled with the current names.")
    moved = {role: g.moved_to_cpu for role, g in graphs.items() if g.moved_to_cpu}
    if moved:
        where = "; ".join(f"{role} steps {', '.join(map(str, steps))}" for role, steps in moved.items())
        console.note(f"no GPU here: pipelines are compiled for the CPU ({where} moved from mixed/gpu to cpu, "
                     ".gpu() dropped).")


def label_notes(v) -> None:
    """Say once what the eval split or model.num_classes leave out of the train split's label map."""
    for text in v.label_notes:
        console.note(text)
