"""`runner bench`: loader-only and end-to-end throughput of each loader, against the synthetic ceiling; one
experiment from the command line, or a suite file of configurations measured together."""
from __future__ import annotations

from runner import console
from runner.bench.variants import DEFAULT_LOADERS


def register(sub) -> None:
    p = sub.add_parser("bench", help="measure each loader: loader-only and training img/s, GPU use, data wait")
    p.add_argument("experiment", nargs="?", help="experiment YAML file (none with --suite)")
    p.add_argument("overrides", nargs="*", metavar="key=value",
                   help="overrides, e.g. optimizer.lr=0.05; with --suite they apply to every entry, and "
                        "vars.NAME=VALUE sets a variable of the suite")
    p.add_argument("--suite", default=None, help="a suite file (bench/suites/*.yaml): named configurations "
                                                 "measured together, into one CSV and one markdown table")
    p.add_argument("--entries", default=None, help="with --suite: comma-separated names of the entries to measure "
                                                   "(default all), with their ceilings")
    p.add_argument("--repeat", type=int, default=None,
                   help="rounds (default 1, or the suite's): each measures every row once; the table gives the "
                        "median and range (min-max)")
    p.add_argument("--loaders", default=None, help=f"comma-separated, from {DEFAULT_LOADERS} (the default)")
    p.add_argument("--modes", default=None, help="loader (loader only), e2e (training through runner), "
                                                 "bare (training in a bare loop, for runner's overhead), "
                                                 "beside (the ceiling's model with the loader running beside it, "
                                                 "its batches dropped: what the loader's work costs training); "
                                                 "default loader,e2e")
    p.add_argument("--warmup", type=int, default=None, help="steps left out of every measurement (default 100)")
    p.add_argument("--steps", type=int, default=None, help="measured steps (default 300)")
    p.add_argument("--window", type=int, default=None, help="steps per metrics window, e2e (default 25)")
    p.add_argument("--out", default=None, help="folder for the results, the chart and the log")
    p.set_defaults(handler=run)


def run(args) -> int:
    from runner.bench.report import columns, filled, rows
    from runner.bench.run import BenchRequest, run_bench

    req = BenchRequest(experiment=args.experiment, overrides=tuple(args.overrides), suite=args.suite,
                       loaders=args.loaders, modes=args.modes, repeat=args.repeat, warmup=args.warmup,
                       steps=args.steps, window=args.window, entries=args.entries, out=args.out)
    outcome = run_bench(req)
    cols, body = columns(outcome.result), rows(outcome.result)
    # the .md's columns without the descriptions; errors below
    shown = [i for i in filled(cols, body) if cols[i] not in ("configuration", "errors")]
    console.out.print(console.table(outcome.title, [cols[i] for i in shown], [[r[i] for i in shown] for r in body]))
    for r in outcome.result.rows:
        for err in r.errors.values():
            console.error(err)
    console.out.print(f"wrote {', '.join(str(f) for f in outcome.files)}" +
                      (f"; MLflow parent run {outcome.parent_run_id}" if outcome.parent_run_id else ""))
    return 1 if outcome.failed else 0
