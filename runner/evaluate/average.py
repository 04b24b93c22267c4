"""`runner average`: the averaged weights evaluated by `runner evaluate`'s machinery, logged as a new run."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rich.markup import escape

from runner import console
from runner.config.load import is_override
from runner.config.sections import TrackingConfig
from runner.errors import RunnerError, display_path
from runner.evaluate.command import evaluate_command
from runner.evaluate.report import EVALUATES_TAG, description
from runner.run.snapshot import write_snapshot
from runner.run.validate import validate
from runner.tracking import create_tracker
from runner.tracking.store import find_runs, get_run, store_uri
from runner.weights import checkpoint
from runner.weights.average import (
    AVERAGES_TAG,
    FIXED_TRACKING,
    Kept,
    Rule,
    choose,
    epochs,
    kept_checkpoints,
    weights_key,
    with_defaults,
    write_average,
)
from runner.weights.kept import INDEX, STORE_DIR, step_name


def average_command(run_id: str, rule: Rule, *, ema: bool, overrides: list[str], uri: str | None,
                    out: Path = Path("averaged")) -> int:
    """`runner average`: choose the run's kept checkpoints, average them, evaluate the average as a new run."""
    check_overrides(overrides)
    store = store_uri(uri)
    record = get_run(store, run_id)
    kept, folder = kept_checkpoints(record, store)
    rule = with_defaults(rule, kept[-1].config)
    chosen = choose(kept, rule, record.run_id, folder)
    key = weights_key(chosen, ema)
    experiment = write_snapshot(record, out / record.run_id).experiment  # as runner evaluate RUN_ID evaluates
    overrides = [f"tracking.run_name='avg-{rule.kind}{rule.count}-{record.short}'", f"tracking.uri='{store}'",
                 f"tracking.experiment='{record.experiment}'", *overrides]
    validate(experiment, overrides)  # a mistake in an override fails before anything is averaged
    path, state = write_average(record.run_id, chosen, rule, key, out)
    code = evaluate_command(str(path), str(experiment), overrides, store, out)
    if code:
        return code
    new_id, finished = link_run(record, store, path, state, rule, chosen, key)
    print_average(record, rule, chosen, key, get_run(store, new_id), path)
    if not finished.delivered:  # the evaluation said where its run is; this says where the average's files wait
        console.note(f"the averaged checkpoint is not in run {new_id} yet: {finished.message}")
    return 0


def check_overrides(overrides: list[str]) -> None:
    for word in overrides:
        if not is_override(word):
            raise RunnerError(f"'{word}' is not an override; runner average evaluates with the run's own experiment, "
                              "changed by key.path=value overrides, e.g. data.root=/data/imagenet.",
                              file="command line")
        if word.lstrip("~").partition("=")[0].strip() in ("tracking", *FIXED_TRACKING):
            raise RunnerError(f"'{word}': the average is logged beside the run it averages (its store and "
                              "experiment); pick the store with --uri.", file="command line")


def link_run(record, store: str, path: Path, state: dict[str, Any], rule: Rule, chosen: list[Kept],
             key: str):
    """The evaluation's run made the average's: tagged with the source, which checkpoints as params, the average
    as its checkpoint (checkpoints/step-N.pt and index.json, so its id works where a run's weights are asked
    for). Returns its id and how the tracker finished (FinishResult)."""
    found = find_runs(store, experiment=record.experiment, limit=1,
                      tags={EVALUATES_TAG: record.run_id, "runner.evaluated_checkpoint": str(path.resolve())})
    if not found:
        raise RunnerError(f"the evaluation of the averaged weights did not reach {store} (see above); the weights are "
                          f"in {display_path(path)}: runner evaluate {display_path(path)} logs them once it answers.",
                          where="--uri")
    new_id = found[-1].run_id
    state = {**state, "run_id": new_id}  # a checkpoint names the run it is logged in; "averaged" names the source
    checkpoint.save(state, path.parent, path.name)
    tracking = TrackingConfig(uri=store, experiment=record.experiment)
    tracker = create_tracker(tracking, rank=0, resume_run_id=new_id)
    name = step_name(state["step"])
    index = {"last": name, "last_epoch": state["epoch"], "recent": [name], "sizes": {name: path.stat().st_size},
             "steps": {name: state["step"]}}
    which = "EMA" if key == "ema" else "trained"
    summary = (f"Average of {rule} ({epochs(chosen)}; steps {', '.join(str(k.step) for k in chosen)}; their {which} "
               "weights), in float64 as timm's avg_checkpoints.py averages them. ")
    tracker.start({"average.rule": rule.kind, "average.count": rule.count, "average.weights": key,
                   "average.steps": ",".join(str(k.step) for k in chosen),
                   "average.epochs": ",".join(str(k.epoch) for k in chosen),
                   "average.checkpoints": ",".join(k.name for k in chosen),
                   **({"average.metric": rule.metric, "average.mode": rule.mode} if rule.kind == "best" else {})})
    tracker.set_tags({AVERAGES_TAG: record.run_id,
                      "mlflow.note.content": summary + description(tracking, record.run_id, path, state)})
    tracker.log_artifact(path, STORE_DIR)
    tracker.log_text(json.dumps(index, indent=1) + "\n", f"{STORE_DIR}/{INDEX}")
    return new_id, tracker.finish("FINISHED")


def print_average(record, rule: Rule, chosen: list[Kept], key: str, new, path: Path) -> None:
    """Each averaged checkpoint's epoch, step and scores (of the weights averaged), and the average's (run `new`)."""
    prefix = "eval_ema" if key == "ema" else "eval"
    extra = [rule.metric] if rule.kind == "best" and rule.metric not in {f"{prefix}/{m}" for m in
                                                                         ("top1", "top5", "loss")} else []

    def scores(values: dict[str, float], at: str) -> list[str]:
        return [shown(values.get(f"{at}/top1"), True), shown(values.get(f"{at}/top5"), True),
                shown(values.get(f"{at}/loss"), False)]

    rows = [[escape(k.name), k.epoch, k.step, *scores(k.metrics, prefix),
             *[shown(k.metrics.get(m), False) for m in extra]] for k in chosen]
    rows.append(["averaged", "", "", *scores(new.latest, "eval"), *["" for _ in extra]])
    which = "EMA" if key == "ema" else "trained"
    out = console.out
    out.print(console.table(f"run {record.short}: average of {escape(str(rule))} ({which} weights)",
                            ["checkpoint", "epoch", "step", "top-1", "top-5", "loss", *map(escape, extra)], rows))
    out.print(escape(f"weights: {display_path(path)}, logged as checkpoints/{path.name} of run {new.run_id}"))


def shown(value: float | None, share: bool) -> str:
    if value is None:
        return "-"
    return console.percent(value) if share else f"{value:.4f}"
