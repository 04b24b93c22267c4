"""`runner compare`: tracked runs in groups (the params that tell them apart), each group's spread over its seeds,
whether the best group's lead exceeds it, and a chart of the groups' mean curves."""
from __future__ import annotations

import argparse
from pathlib import Path

from runner import console
from runner.errors import RunnerError

PARENT_TAGS = ("runner.sweep", "runner.bench")  # parents group children; they train nothing themselves


def register(sub) -> None:
    p = sub.add_parser("compare", help="tracked runs in groups: n, mean +- std, min-max, whether the lead exceeds "
                                       "the spread over seeds, mean curves (PNG)")
    p.add_argument("run_ids", nargs="*", metavar="RUN_ID", help="runs to compare (a unique start of an id will do)")
    p.add_argument("--experiment", metavar="NAME", help="compare the runs of this MLflow experiment instead")
    p.add_argument("--parent", metavar="RUN_ID", help="compare the children of this run (a runner sweep) instead")
    p.add_argument("--group-by", metavar="KEY[,KEY]", type=group_keys,
                   help="params whose values define the groups (default: every param that differs, except the "
                        "seeds, so the runs of a group are repeats with other seeds)")
    p.add_argument("--limit", type=int, default=20, help="with --experiment: the newest N runs (default 20)")
    p.add_argument("--uri", help="tracking store (default: $MLFLOW_TRACKING_URI, else ./mlflow.db)")
    p.add_argument("--out", default="compare-out", help="folder for compare.png and compare.md (default ./compare-out)")
    p.set_defaults(handler=run)


def group_keys(text: str) -> list[str]:
    keys = [k.strip() for k in text.split(",")]
    if not all(keys):
        raise argparse.ArgumentTypeError(f"'{text}' has an empty key; write KEY or KEY,KEY (e.g. "
                                         "pipelines.train.use,optimizer.lr)")
    return keys


def run(args) -> int:
    from runner.repro.report import show
    from runner.tracking.store import store_uri

    uri = store_uri(args.uri)
    sweep = sweep_parent(args, uri)
    if sweep is not None:
        return show_sweep(sweep, args)
    runs = select_runs(args, uri)
    return show(runs, Path(args.out), group_by=args.group_by)


def sweep_parent(args, uri: str):
    """The sweep whose parent run is named (`runner compare PARENT_RUN_ID` or --parent), as its children landed."""
    from runner.sweep.landing import is_sweep_parent, read_landed
    from runner.tracking.store import get_run

    named = args.parent if args.parent is not None and not args.run_ids else \
        args.run_ids[0] if len(args.run_ids) == 1 and args.parent is None and args.experiment is None else None
    if named is None:
        return None
    record = get_run(uri, named)
    return read_landed(uri, record) if is_sweep_parent(record) else None


def show_sweep(landed, args) -> int:
    """A sweep's children finished so far in groups, with how many are still to come."""
    from runner.repro.report import show

    runs = list(landed.runs.values())
    if not runs:
        console.out.print(f"sweep {landed.parent.run_id}: {landed.counts}; no child has a run yet.")
        return 0
    group_by = args.group_by if args.group_by is not None else landed.group_by
    return show(runs, Path(args.out), group_by=group_by, notes=[landed.counts])


def select_runs(args, uri: str) -> list:
    from runner.tracking.store import find_runs, get_run

    chosen = [bool(args.run_ids), args.experiment is not None, args.parent is not None]
    if sum(chosen) != 1:
        raise RunnerError("name the runs to compare in one way: run ids, --experiment NAME, or --parent RUN_ID.",
                          file="command line")
    if args.run_ids:
        return [get_run(uri, r) for r in args.run_ids]
    runs = find_runs(uri, experiment=args.experiment, parent=args.parent,
                     limit=args.limit if args.experiment else 10_000)
    runs = [r for r in runs if not any(r.tags.get(t) == "parent" for t in PARENT_TAGS)]
    if not runs:
        what = f"experiment '{args.experiment}'" if args.experiment else f"run {args.parent}"
        raise RunnerError(f"{what} has no runs to compare in {uri}.", where="--experiment" if args.experiment
                          else "--parent")
    return runs


