"""`runner sweep`: one run per combination of comma-separated overrides, grouped under one parent MLflow run."""
from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

from rich.markup import escape

from runner import console
from runner.commands.args import add_experiment, experiment_and_overrides, run_notes


def register(sub) -> None:
    p = sub.add_parser("sweep", help="run every combination of key=a,b,c overrides, one after another, as child "
                                     "runs of one MLflow parent run",
                       description="An override with comma-separated values (optimizer.lr=0.1,0.05) is a sweep "
                                   "axis; one without commas applies to every run. Quote a value that holds a comma; "
                                   "brackets keep a list one value: optimizer.betas=[0.9,0.99],[0.8,0.9].")
    add_experiment(p)
    p.add_argument("--dry-run", action="store_true", help="validate every combination and print the grid; run nothing")
    p.set_defaults(handler=run)


def run(args) -> int:
    from runner.repro.sweep import check_grid, grid, parse_sweep, short_keys_unique

    path, items = experiment_and_overrides(args)
    axes, plain = parse_sweep(items)
    children = grid(axes)
    checked = check_grid(path, plain, axes, children)  # every mistake surfaces before the first run
    short = short_keys_unique(axes)
    print_grid(path, axes, plain, children)
    if args.dry_run:
        return 0
    run_notes(checked[0])
    return run_children(path, plain, children, checked[0], short)


def print_grid(path: str, axes, plain: list[str], children) -> None:
    rows = [[str(c.index), *(escape(v) for _, v in c.values)] for c in children]
    keys = [escape(a.key) for a in axes]
    title = f"{Path(path).name}: {len(children)} runs" + (f", each with {' '.join(plain)}" if plain else "")
    console.out.print(console.table(escape(title), ["#", *keys], rows, justify_numbers=False))


def run_children(path: str, plain: list[str], children, v, short: bool) -> int:
    """Launch the children one after another, each in its own process (GPU memory, DALI threads and torch's
    global flags start fresh for every child); a Ctrl-C stops the running child at a step boundary and the sweep."""
    from runner.repro.sweep import child_overrides, run_name

    parent = _open_parent_run(v, path, plain, children)
    parent_id = parent.run_id if parent else None
    named = any(o.split("=", 1)[0].strip() == "tracking.run_name" for o in [*plain, *children[0].overrides])
    codes: list[int] = []
    for child in children:
        overrides = child_overrides(child, plain, parent_run_id=parent_id,
                                    name=None if named else run_name(child, short))
        console.out.print(f"[bold]sweep run {child.index}/{len(children)}[/]: {escape(child.label(short))}")
        codes.append(_launch_child(path, overrides))
        if codes[-1] in (128 + signal.SIGINT, 128 + signal.SIGTERM):
            break
    interrupted = codes[-1] in (128 + signal.SIGINT, 128 + signal.SIGTERM)
    failed = [c.index for c, code in zip(children, codes) if code != 0]
    if parent is not None:
        parent.finish("KILLED" if interrupted else "FAILED" if failed else "FINISHED")
        _summary(parent.uri, parent_id, [k for k, _ in children[0].values])
    if interrupted:
        console.error(f"sweep stopped after run {len(codes)} of {len(children)}.")
        return codes[-1]
    if failed:
        console.error(f"sweep runs {', '.join(map(str, failed))} failed; their output is above.")
        return 1
    return 0


def _launch_child(path: str, overrides: list[str]) -> int:
    proc = subprocess.Popen([sys.executable, "-m", "runner", "launch", path, *overrides])
    try:
        return proc.wait()
    except KeyboardInterrupt:  # the child got the same SIGINT: it stops at a step boundary and saves a checkpoint
        return proc.wait() or 128 + signal.SIGINT


def _open_parent_run(v, path: str, plain: list[str], children):
    from runner.repro.sweep import open_parent_run

    tracker = open_parent_run(v, path, plain, children)
    if tracker is None:
        console.note("tracking is off (tracking.enabled: false): the runs are not grouped under a parent run.")
    else:
        console.note(f"parent run {tracker.run_id} in experiment '{v.config.tracking.experiment}' at {tracker.uri}")
    return tracker


def _summary(uri: str, parent_id: str, swept: list[str]) -> None:
    """compare's grouped table of the children, grouped by the swept keys other than `seed` (the groups
    compare would make by itself, unless a key is written otherwise than its param, e.g. in brackets)."""
    from runner.commands.compare import show
    from runner.errors import RunnerError
    from runner.tracking.store import find_runs

    try:
        runs = find_runs(uri, parent=parent_id, limit=1000)
    except RunnerError:
        return
    if runs:
        group_by = [k for k in swept if k != "seed"]
        if not set(group_by) <= {k for r in runs for k in r.params}:  # a key written unlike its param name
            group_by = None
        show(runs, None, group_by=group_by)
        flag = f" --group-by {','.join(group_by)}" if group_by else ""
        console.out.print(f"chart and table: runner compare --parent {parent_id}{flag} --uri {uri}")
