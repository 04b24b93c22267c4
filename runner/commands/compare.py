"""`runner compare`: tracked runs side by side, the params that differ, results, and a chart of their curves."""
from __future__ import annotations

from pathlib import Path

from rich.markup import escape

from runner import console
from runner.errors import RunnerError

PARENT_TAGS = ("runner.sweep", "runner.bench")  # parents group children; they train nothing themselves


def register(sub) -> None:
    p = sub.add_parser("compare", help="tracked runs side by side: differing params, results, curves (PNG)")
    p.add_argument("run_ids", nargs="*", metavar="RUN_ID", help="runs to compare (a unique start of an id will do)")
    p.add_argument("--experiment", metavar="NAME", help="compare the runs of this MLflow experiment instead")
    p.add_argument("--parent", metavar="RUN_ID", help="compare the children of this run (a runner sweep) instead")
    p.add_argument("--limit", type=int, default=20, help="with --experiment: the newest N runs (default 20)")
    p.add_argument("--uri", help="tracking store (default: $MLFLOW_TRACKING_URI, else ./mlflow.db)")
    p.add_argument("--out", default="compare-out", help="folder for compare.png and compare.md (default ./compare-out)")
    p.set_defaults(handler=run)


def run(args) -> int:
    from runner.tracking.store import store_uri

    uri = store_uri(args.uri)
    runs = select_runs(args, uri)
    return show(runs, Path(args.out))


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


def show(runs: list, out: Path | None) -> int:
    """Print the table; write compare.png and compare.md to `out` (unless None)."""
    from runner.repro.compare import chart, differing_params, load_compared, markdown, table

    compared = load_compared(runs)
    columns, rows = table(compared)
    experiments = sorted({r.experiment for r in runs})
    title = f"{len(runs)} run{'s' if len(runs) > 1 else ''} of {', '.join(experiments)}"
    params = len(differing_params(runs))
    note = f"{params} param{'s' if params != 1 else ''} differ{'s' if params == 1 else ''}" if params \
        else "no params differ"
    console.out.print(console.table(escape(f"{title}: {note}"), [escape(c) for c in columns],
                                    [[escape(cell) for cell in r] for r in rows], justify_numbers=False))
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        chart(compared, out / "compare.png", title)
        (out / "compare.md").write_text(f"{title}\n\n" + markdown(columns, rows))
        console.out.print(f"wrote {out}/compare.png and {out}/compare.md")
    return 0
