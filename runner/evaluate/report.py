"""What `runner evaluate` records and prints on rank 0: a new MLflow run linked to the run that trained the
weights (metrics, per-class metrics, the evaluation files and heat maps), and the tables on the terminal."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.markup import escape

from runner import console
from runner.errors import RunnerError
from runner.evaluate.sums import Evaluation, class_names, log_evaluation
from runner.run.record import log_run_inputs, run_params, split_fingerprints
from runner.tracking import create_tracker, resolve_tracking_uri
from runner.tracking.store import run_page

PER_CLASS_ROWS = 50      # above this many classes, the per-class table shows the worst and best ones
CONFUSION_TABLE = 20     # up to this many classes the confusion matrix is printed; above, its most confused pairs


def finish_evaluation(v, d, state: dict[str, Any], weights: Path, results: dict[str, Evaluation]) -> None:
    """Log the evaluation as a new run (tagged and described as the source run's) and print its tables."""
    cfg = v.config
    names = class_names(v.labels, cfg.model.num_classes)
    source = state.get("run_id")
    tracker = create_tracker(cfg.tracking, rank=d.rank, at=v.loaded.at("tracking.uri"))
    try:
        # the split it evaluated, as a dataset of the run (not the train split: this run trains on nothing)
        fingerprints = {role: found for role, found in split_fingerprints(v.config.data, v.graphs).items()
                        if role == "eval"}
        tracker.start(run_params(v, d.world, fingerprints))
        log_run_inputs(v, tracker, d.world, fingerprints)
        tracker.set_tags({EVALUATES_TAG: source or "", "runner.evaluated_checkpoint": str(weights.resolve()),
                          "runner.evaluated_step": str(state.get("step", 0)),
                          "mlflow.note.content": description(cfg.tracking, source, weights, state)})
        step = int(state.get("step", 0))  # the training step the weights are from
        for prefix, ev in results.items():
            tracker.log_metrics({**ev.metrics(prefix), **ev.class_metrics(prefix, names)}, step)
            log_evaluation(tracker, ev, prefix, names)
    except BaseException:
        tracker.finish("FAILED")
        raise
    finished = tracker.finish("FINISHED")
    print_evaluation(cfg.name or v.loaded.path.stem, results, names, source, weights, finished.message)


def description(tracking, source: str | None, weights: Path, state: dict[str, Any]) -> str:
    """The run's MLflow description (markdown): which run's weights, with a link to its page."""
    if not source:
        return f"Evaluation of the weights in `{weights}` (step {state.get('step', 0)})."

    try:
        link = f"[{source}]({run_page(resolve_tracking_uri(tracking.uri), source)})"
    except RunnerError:  # the run is in another store: name it without a link
        link = f"`{source}`"
    return f"Evaluation of run {link}: its weights in `{weights}` (step {state.get('step', 0)})."


def print_evaluation(experiment: str, results: dict[str, Evaluation], names: list[str], source: str | None,
                     weights: Path, tracked: str) -> None:
    """The evaluation's tables on the terminal; `experiment`: its name in the title."""
    out = console.out
    title = f"{experiment}: evaluation of " + (f"run {source}" if source else str(weights))
    rows = [[escape(p), f"{ev.samples}", console.percent(ev.top1 / max(ev.samples, 1)),
             console.percent(ev.top5 / max(ev.samples, 1)), f"{ev.loss_sum / max(ev.samples, 1):.4f}"]
            for p, ev in results.items()]
    out.print(console.table(title, ["", "images", "top-1", "top-5", "loss"], rows))
    for prefix, ev in results.items():
        out.print(per_class_table(prefix, ev, names))
        out.print(confusion_table(prefix, ev, names))
    if len(names) > CONFUSION_TABLE:
        out.print(escape("every class and the whole matrix: evaluation/PREFIX_per_class.csv, PREFIX_confusion.csv "
                         "and PREFIX_confusion.png in the run's artifacts"))
    if tracked:
        out.print(escape(f"tracking: {tracked}"))


def per_class_table(prefix: str, ev: Evaluation, names: list[str]):
    rows = [r for r in ev.per_class(names) if r[1]]
    note = ""
    if len(rows) > PER_CLASS_ROWS:  # the worst and the best, the rest in evaluation/PREFIX_per_class.csv
        rows.sort(key=lambda r: r[2])
        half = PER_CLASS_ROWS // 2
        note = f", lowest and highest {half} of {len(rows)}"
        rows = rows[:half] + rows[-half:]
    return titled(f"{escape(prefix)}: top-1 per class{note}", ["class", "images", "top-1"],
                  [[escape(c), n, console.percent(t)] for c, n, t in rows])


def confusion_table(prefix: str, ev: Evaluation, names: list[str]):
    if len(names) <= CONFUSION_TABLE:
        return titled(f"{escape(prefix)}: confusion matrix (rows: true class, columns: predicted)",
                      ["true \\ predicted", *map(escape, names)],
                      [[escape(c), *row] for c, row in zip(names, ev.confusion.tolist())])
    pairs = ev.confused_pairs(names)
    return titled(f"{escape(prefix)}: most confused pairs", ["true class", "predicted as", "images", "of its class"],
                  [[escape(t), escape(p), n, console.percent(share)] for t, p, n, share in pairs])


def titled(title: str, columns: list[str], rows: list[list]):
    """console.table at least as wide as its title, which rich would otherwise wrap to a narrow table's width."""
    table = console.table(title, columns, rows)
    table.min_width = len(title)
    return table


EVALUATES_TAG = "runner.evaluates"        # the id of the run whose weights were evaluated
