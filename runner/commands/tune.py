"""`runner tune`: find this machine's fastest pipeline placement and write it as an experiment that runs it."""
from __future__ import annotations

from runner import console
from runner.commands.args import add_experiment, experiment_and_overrides
from runner.errors import display_path


def register(sub) -> None:
    p = sub.add_parser("tune", help="measure decode placement, threads, prefetch...; write the best as overrides")
    add_experiment(p)
    p.add_argument("--max-trials", type=int, default=14,
                   help="end-to-end runs in the search (each ~warmup+steps steps); then the winner and the "
                        "experiment as written run once more")
    p.add_argument("--warmup", type=int, default=50)
    p.add_argument("--steps", type=int, default=150)
    p.add_argument("--window", type=int, default=25)
    p.add_argument("--min-gain", type=float, default=0.01, help="a change must beat the best by this share")
    p.add_argument("-o", "--output", help="experiment file to write: it includes the experiment and sets the tuned "
                                          "keys (default: EXPERIMENT.tuned.yaml beside it)")
    p.set_defaults(handler=run)


def run(args) -> int:
    from runner.bench.tuning import TuneRequest, run_tune

    path, overrides = experiment_and_overrides(args)
    req = TuneRequest(experiment=path, overrides=overrides, output=args.output, warmup=args.warmup, steps=args.steps,
                      window=args.window, max_trials=args.max_trials, min_gain=args.min_gain)
    outcome = run_tune(req, show_trials)
    replaced = " (replacing the one an earlier runner tune wrote)" if outcome.replacing else ""
    console.out.print(f"wrote {display_path(outcome.output)}{replaced}: {outcome.tuned}\n"
                      f"run the tuned setting: {outcome.command}")
    return 0


def show_trials(outcome) -> None:
    console.out.print(console.table(outcome.title, outcome.columns, outcome.rows, justify_numbers=False))
    for note in outcome.notes:
        console.note(note)
