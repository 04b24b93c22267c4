"""`runner reproduce`: re-run a tracked run here from what it logged, saying what differs from its machine."""
from __future__ import annotations

import shlex
from pathlib import Path

import yaml
from rich.markup import escape

from runner import console
from runner.commands.args import split_overrides
from runner.errors import RunnerError, display_path
from runner.run.notes import label_notes, run_notes


def register(sub) -> None:
    p = sub.add_parser("reproduce", help="re-run a tracked run from its logged config (pipelines pinned), "
                                         "warning where this machine differs")
    p.add_argument("run_id", metavar="RUN_ID", help="the run to reproduce (a unique start of its id will do)")
    p.add_argument("overrides", nargs="*", metavar="key=value",
                   help="changes to the logged config, e.g. data.root=/data/imagenet on another machine")
    p.add_argument("--uri", help="tracking store holding the run (default: $MLFLOW_TRACKING_URI, else ./mlflow.db); "
                                 "the reproduction is logged there too unless tracking.uri is overridden")
    p.add_argument("--out", default="reproduced", help="folder for <run id>/experiments/ and pipelines/ "
                                                       "(default ./reproduced)")
    p.add_argument("--dry-run", action="store_true", help="write the experiment and show the differences; train nothing")
    p.add_argument("--weights", nargs="?", const="best", choices=("best", "last"),
                   help="train nothing: fetch the run's best (or last) checkpoint from the store and evaluate it here "
                        "on the run's eval pipeline, beside the metrics it logged")
    p.set_defaults(handler=run)


def run(args) -> int:
    from runner.repro.drift import differences
    from runner.run.data import checked_with_data, ensure_data
    from runner.run.snapshot import write_snapshot
    from runner.tracking.store import get_run, store_uri
    from runner.train.launch import launch

    files, overrides = split_overrides(args.overrides)
    if files:
        raise RunnerError(f"expected key=value overrides after the run id; got {files}.", file="command line")
    uri = store_uri(args.uri)
    record = get_run(uri, args.run_id)
    snap = write_snapshot(record, Path(args.out) / record.run_id)
    for role, local in snap.from_checkout.items():
        console.note(f"run {record.short} did not log its {role} pipeline file; pinned this checkout's "
                     f"{display_path(local)} instead. If it changed since the run's commit, so does the pipeline.")
    overrides = [*overrides, *reproduction_overrides(record.run_id, uri, snap.experiment, overrides)]
    v = _validate(record, snap.experiment, overrides)
    run_notes(v.notes, v.graphs)
    label_notes(v.label_notes)
    if v.config.data.loader != "synthetic" and v.config.data.root is None:
        ensure_data(v)  # the generated set is deterministic: generate it so its fingerprint can be compared
        v = checked_with_data(v)
    print_differences(record, differences(record, v))
    if args.weights:
        return evaluate_weights(record, v, uri, args.weights)
    command = shlex.join(["runner", "launch", display_path(snap.experiment), *overrides])
    if args.dry_run:
        console.out.print(escape(f"wrote {display_path(snap.experiment)}; to run it: {command}"))
        return 0
    console.note(f"reproducing run {record.run_id} ({record.name}): {command}")
    code = launch(v, str(snap.experiment), overrides)
    _point_to_compare(record, v.config.tracking, uri)
    return code


def evaluate_weights(record, v, uri: str, which: str) -> int:
    """The run's checkpoint, fetched from its store, evaluated here by the run's eval pipeline (one process)."""
    from runner.evaluate.command import evaluate_main_split
    from runner.weights.checkpoint import load
    from runner.weights.store import fetch_run_weights

    file = fetch_run_weights(record.run_id, uri, which=which)
    state = load(file)
    console.note(f"evaluating the {which} checkpoint of run {record.short} (step {state.get('step')}, epoch "
                 f"{state.get('epoch')}; {display_path(file)}) on its eval pipeline here")
    here = evaluate_main_split(v, state, file)
    logged = state.get("metrics") or {}
    rows = [[key, f"{logged[key]:.4f}" if key in logged else "-", f"{value:.4f}"] for key, value in here.items()]
    console.out.print(console.table(f"run {record.short}'s {which} checkpoint", ["", "logged by the run", "here"],
                                    rows, justify_numbers=False))
    return 0


def _validate(record, experiment: Path, overrides: list[str]):
    """validate(), with the run's commit named when its logged config does not load with this runner."""
    from runner.errors import ConfigError
    from runner.run.validate import validate

    try:
        return validate(experiment, overrides)
    except ConfigError as e:
        commit = record.tags.get("git.commit")
        if not commit or e.file != display_path(experiment):
            raise
        raise ConfigError(f"{e.message} The run ran runner at commit {commit[:12]}: reproduce it from a checkout of "
                          "that commit, or fix this file.", file=experiment, line=e.line, where=e.where) from None


def reproduction_overrides(run_id: str, uri: str, experiment: Path, user: list[str]) -> list[str]:
    """Tag the new run as a reproduction, and log it to the store the original came from."""
    from runner.tracking import resolve_tracking_uri

    out = [f"tracking.tags[runner.reproduces]='{run_id}'"]
    logged = (yaml.safe_load(experiment.read_text()) or {}).get("tracking") or {}
    user_sets_uri = any(o.split("=", 1)[0].strip() == "tracking.uri" for o in user)
    if not user_sets_uri and resolve_tracking_uri(logged.get("uri")) != uri:
        out.append(f"tracking.uri='{uri}'")
    return out


def print_differences(record, diffs) -> None:
    """The warning table: what differs between the run's machine and this one."""
    if not diffs:
        console.note(f"this machine matches run {record.short}: same package versions, GPU, code, process layout "
                     "and data fingerprint.")
        return
    rows = [[escape(d.what), escape(d.run), escape(d.here)] for d in diffs]
    console.err.print(console.table(f"warning: this machine differs from the one run {record.short} ran on "
                                    f"({len(diffs)} difference{'s' if len(diffs) > 1 else ''}); results may differ",
                                    ["", f"run {record.short}", "here"], rows, justify_numbers=False))
    if any(d.kind == "labels" for d in diffs):
        console.note(f"the train split here maps class names to other labels than run {record.short} logged in "
                     "label_map.json: its model's outputs mean other classes here, and a new run learns other ones.")
    if any(d.kind == "data" for d in diffs):
        console.note("the data differs from what the run read (file names or sizes): the batches, and so the "
                     "results, will not be the run's. Point data.root=... at the same data to reproduce it.")
    if any(d.kind == "cache" for d in diffs):
        console.note(cache_advice(record))


def cache_advice(record) -> str:
    """How to make here the cache the run trained on (or say that it read none)."""
    from runner.data.manifest import build_options
    from runner.repro.drift import describe_cache, logged_cache

    cache = logged_cache(record.params, "train")
    if not cache:
        return (f"run {record.short} read its train split from the original images, not a cache: point "
                "data.root=... at them to reproduce it.")
    sha = cache.get("source_fingerprint.sha256", "")
    return (f"run {record.short} trained on a {describe_cache(cache)}. To reproduce it, make that cache here from "
            f"the same source (`runner data fingerprint SRC/train` gives sha256 {sha[:12]}...): `runner data cache SRC "
            f"DST {build_options(cache)}`, then pass data.root=DST; the same Pillow and libjpeg-turbo write the same "
            "files.")


def _point_to_compare(record, tracking, uri: str) -> None:
    from runner.tracking.store import find_runs

    if not tracking.enabled:
        return
    try:
        new = find_runs(uri, experiment=tracking.experiment,
                        tags={"runner.reproduces": record.run_id}, limit=1)
    except RunnerError:
        return
    if new:
        console.out.print(escape(f"compare with the original: runner compare {record.run_id} {new[-1].run_id} --uri {uri}"))
