"""`runner sweep`: one child run per combination of comma-separated overrides, grouped under one parent MLflow run,
run on this machine (several at once, each on its own GPUs and cores) or as SLURM jobs; `--resume` runs again the
children that did not finish."""
from __future__ import annotations

import argparse
from pathlib import Path

from rich.markup import escape

from runner import console
from runner.commands.args import experiment_and_overrides
from runner.errors import ConfigError, RunnerError
from runner.run.notes import run_notes

FLAG_KEYS = {"launcher": "launcher.name", "parallel": "launcher.parallel", "gpus_per_run": "launcher.gpus_per_run"}


def register(sub) -> None:
    p = sub.add_parser("sweep", help="run every combination of key=a,b,c overrides as child runs of one MLflow "
                                     "parent run: on this machine, several at once, or as SLURM jobs",
                       description="An override with comma-separated values (optimizer.lr=0.1,0.05) is a sweep "
                                   "axis; one without commas applies to every run. Quote a value that holds a comma; "
                                   "brackets keep a list one value: optimizer.betas=[0.9,0.99],[0.8,0.9]. Each child "
                                   "is frozen as the resolved experiment it trains, in the sweep's folder "
                                   "(launcher.dir), and launched there with --resume auto. The launcher section of "
                                   "the experiment (or launcher.KEY=VALUE here) says where children run.")
    p.add_argument("experiment", nargs="?", help="experiment YAML file")
    p.add_argument("overrides", nargs="*", metavar="key=value", help="overrides and sweep axes, e.g. seed=0,1,2")
    p.add_argument("--launcher", choices=("local", "slurm"),
                   help="where children run (launcher.name): local, this machine (default); slurm, job arrays")
    p.add_argument("--parallel", type=_positive, metavar="N",
                   help="children at once (launcher.parallel): local, default 1 or GPUs / --gpus-per-run; slurm, the "
                        "job array's limit")
    p.add_argument("--gpus-per-run", type=_positive_or_zero, metavar="K",
                   help="GPUs each child gets (launcher.gpus_per_run): CUDA_VISIBLE_DEVICES here, --gpus-per-node "
                        "on SLURM")
    p.add_argument("--resume", metavar="PARENT_RUN_ID",
                   help="run again the children of this sweep that did not finish (those whose config or data "
                        "failed them stay failed unless --retry-failed); follows the ones SLURM still holds")
    p.add_argument("--retry-failed", action="store_true", help="with --resume: also the children that failed for "
                                                               "their config or data")
    p.add_argument("--uri", help="with --resume: the tracking store of the parent run (default: $MLFLOW_TRACKING_URI, "
                                 "else ./mlflow.db)")
    p.add_argument("--detach", action="store_true", help="slurm: submit and return; the parent run and runner compare "
                                                         "PARENT_RUN_ID show the results as they land")
    p.add_argument("--dry-run", action="store_true", help="validate every combination and print the grid; run nothing")
    p.set_defaults(handler=run)


def _positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"'{text}' is not a whole number of 1 or more")
    return int(text)


def _positive_or_zero(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"'{text}' is not a whole number of 0 or more")
    return int(text)


def flag_overrides(args) -> list[str]:
    """--launcher, --parallel and --gpus-per-run as the launcher.* overrides they stand for."""
    return [f"{key}={getattr(args, flag)}" for flag, key in FLAG_KEYS.items() if getattr(args, flag) is not None]


def run(args) -> int:
    if args.resume:
        if args.experiment:
            raise RunnerError("--resume PARENT_RUN_ID reads the experiment and its children from the sweep's folder; "
                              "give no experiment file or overrides with it.", file="command line")
        from runner.sweep.start import resume_sweep

        return resume_sweep(args.resume, uri=args.uri, flags=flag_overrides(args), retry_failed=args.retry_failed,
                            detach=args.detach)
    if not args.experiment:
        raise RunnerError("name the experiment file to sweep (runner sweep EXPERIMENT key=a,b ...), or --resume "
                          "PARENT_RUN_ID.", file="command line")
    from runner.sweep.grid import grid, parse_sweep
    from runner.sweep.start import check_children, start_sweep

    path, items = experiment_and_overrides(args)
    flags = flag_overrides(args)
    axes, plain = parse_sweep([*items, *(f for f in flags if f.split("=")[0] not in _keys(items))],
                              require_axis=False)  # one child is a sweep on SLURM (check_children)
    for axis in axes:
        if axis.key.split(".")[0] == "launcher":
            raise ConfigError("the launcher says how the whole sweep runs; give it one value, not a list.",
                              file=f"command line '{axis.item}'", where=axis.key)
    children = grid(axes)
    sweep = check_children(path, plain, axes, children)  # every mistake surfaces before the first run
    print_grid(path, axes, plain, sweep)
    for text in dict.fromkeys(str(e) for e in sweep.errors.values()):  # a bad value of an axis: said once
        console.error(text)
    if args.dry_run:
        return 2 if sweep.errors else 0
    if sweep.errors:
        console.note(f"{_children(list(sweep.errors))} {'does' if len(sweep.errors) == 1 else 'do'} not validate and "
                     f"will not run; the other {len(sweep.checked)} will.")
    run_notes(sweep.first.notes, sweep.first.graphs)
    return start_sweep(sweep, detach=args.detach)


def _children(indices: list[int]) -> str:
    from runner.errors import first_names

    return f"child {indices[0]}" if len(indices) == 1 else f"children {first_names([str(i) for i in indices], 8)}"


def _keys(items: list[str]) -> set[str]:
    return {i.split("=", 1)[0].strip() for i in items if "=" in i}


def print_grid(path: str, axes, plain: list[str], sweep) -> None:
    rows = [[str(c.index), *(escape(v) for _, v in c.values), "invalid" if c.index in sweep.errors else ""]
            for c in sweep.children]
    keys = [escape(a.key) for a in axes]
    n = len(sweep.children)
    title = f"{Path(path).name}: {n} run{'s' if n != 1 else ''}" + (f", each with {' '.join(plain)}" if plain else "")
    has_invalid = bool(sweep.errors)
    columns = ["#", *keys, *(["check"] if has_invalid else [])]
    console.out.print(console.table(escape(title), columns, [r if has_invalid else r[:-1] for r in rows],
                                    justify_numbers=False))

