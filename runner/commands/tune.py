"""`runner tune`: find this machine's fastest pipeline placement and write it as an experiment that runs it."""
from __future__ import annotations

import os
import shlex
import time
from pathlib import Path

from runner import console
from runner.commands.args import add_experiment, run_notes, experiment_and_overrides
from runner.errors import display_path


def register(sub) -> None:
    p = sub.add_parser("tune", help="measure decode placement, threads, prefetch...; write the best as overrides")
    add_experiment(p)
    p.add_argument("--max-trials", type=int, default=12,
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
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from runner.bench.suite import measure
    from runner.bench.tune import Trial, as_overrides, baseline_settings, decode_limit, default_output, knobs, search
    from runner.data.jpeg_cache import median_longer_side
    from runner.data.manifest import find_manifest
    from runner.errors import ConfigError, RunnerError
    from runner.launch import ensure_data
    from runner.data.paths import data_root, split_dir
    from runner.telemetry import gpu_info
    from runner.validate import validate

    from runner.files import check_writable

    path, overrides = experiment_and_overrides(args)
    output = check_writable(args.output if args.output else default_output(Path(path)))  # before the trials
    v = validate(path, overrides)
    replacing = _check_output(output, v.loaded)
    run_notes(v)
    if v.config.data.loader != "dali" or "train" not in v.graphs:
        raise ConfigError("runner tune tunes the DALI train pipeline; this experiment's data.loader is "
                          f"'{v.config.data.loader}'.", file=v.loaded.path, where="data.loader")
    ensure_data(v)
    ks = knobs(v, v.processes)
    start = baseline_settings(v, ks, v.processes)
    out_dir = Path("bench-out") / f"tune-{Path(path).stem}-{time.strftime('%Y%m%d-%H%M%S')}"
    out_dir.mkdir(parents=True, exist_ok=True)
    spec = {"mode": "e2e", "experiment": path, "warmup": args.warmup, "steps": args.steps,
            "window": args.window, "parent_run_id": None}

    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console.out, disable=not console.interactive()) as bar:
        task = bar.add_task("tuning", total=args.max_trials + 2)  # + the winner and the baseline again

        def evaluate(settings: dict) -> Trial:
            label = ", ".join(f"{k.rsplit('.', 1)[-1]}={val}" for k, val in settings.items())
            bar.update(task, description=f"trial: {label}")
            if not console.interactive():
                console.out.print(f"trial {int(bar.tasks[0].completed) + 1}: {label}")
            trial = Trial(settings)
            try:
                validate(path, [*overrides, *as_overrides(settings)])
                trial.result = measure({**spec, "name": label, "overrides": [*overrides, *as_overrides(settings)]},
                                       out_dir / "tune.log")
            except RunnerError as e:
                trial.error = str(e)
            bar.advance(task)
            return trial

        result = search(ks, start, evaluate, max_trials=args.max_trials, min_gain=args.min_gain)

    rows = []
    for t in result.trials:
        r = t.result or {}
        role = ", ".join(name for name, is_it in (("best", t is result.best), ("as written", t is result.baseline))
                         if is_it)
        if t.repeats:
            role += f" (mean of {1 + len(t.repeats)}: {t.images_per_s:,.0f})"
        rows.append([*(str(t.settings[k.key]) for k in ks), f"{r['images_per_s']:,.0f}" if r else "failed",
                     f"{100 * r['data_wait_share']:.1f}%" if r else "-",
                     f"{r['gpu_util_pct']:.0f}%" if r.get("gpu_util_pct") is not None else "-",
                     "again" if t.repeat else role])
    console.out.print(console.table(f"runner tune {path}: {len(result.trials)} trials, {args.steps} steps each",
                                    [k.label for k in ks] + ["train img/s", "data wait", "GPU util", ""], rows,
                                    justify_numbers=False))
    for t in result.trials:
        if t.error:
            console.note(f"trial {t.settings} failed: {t.error}")
    train_dir = split_dir(v.config.data, "train")
    limit = decode_limit(result.best, data_root(v.config.data), (find_manifest(train_dir) or (None, None))[1],
                         median_longer_side(train_dir))
    if limit:
        console.note(limit)
    machine = gpu_info().get("gpu.model") or "CPU"
    means = " (means of two runs each)" if result.best.repeats else ""
    measured = (f"{machine}, {time.strftime('%Y-%m-%d')}: {result.best.images_per_s:,.0f} img/s training, "
                f"{100 * result.gain:+.1f}% over the experiment as written ({result.baseline.images_per_s:,.0f}){means}.")
    command = write_tuned(output, Path(path), overrides, result, measured)
    tuned = " ".join(as_overrides(result.best.settings))
    console.out.print(f"wrote {display_path(output)}{' (replacing the one an earlier runner tune wrote)' if replacing else ''}"
                      f": {tuned}\nrun the tuned setting: {command}")
    return 0


def _check_output(output: Path, loaded) -> bool:
    """Refuse, before any trial, a file tune must not write; True when it replaces an earlier tune's file."""
    from runner.bench.tune import written_by_tune
    from runner.errors import RunnerError

    merged = [f.resolve() for f in loaded.files]
    if output.resolve() in merged:
        how = "is the experiment" if output.resolve() == merged[-1] else "is included by the experiment"
        raise RunnerError(f"{display_path(output)} {how}; the tuned file includes the experiment, so it must be "
                          "another file: name one with -o/--output (or remove that include).",
                          file="command line", where="--output")
    if output.exists() and not written_by_tune(output):
        raise RunnerError(f"{display_path(output)} exists and was not written by runner tune, so it is not replaced; "
                          "name another file with -o/--output, or move that one away.",
                          file="command line", where="--output")
    return output.exists()


def write_tuned(output: Path, experiment: Path, overrides: list[str], result, measured: str) -> str:
    """Write the tuned experiment file; return the command that runs the tuned setting.

    The command repeats the tune's own overrides, except those a tuned key replaces: in the trials the
    tuned keys were applied after them.
    """
    from runner.bench.tune import as_overrides, expanded, tuned_yaml
    from runner.config.load import load_experiment
    from runner.errors import RunnerError
    from runner.files import write_text_atomic

    tuned_keys = list(expanded(result.best.settings))
    kept = [o for o in overrides if not any(_overlaps(_override_key(o), k) for k in tuned_keys)]
    command = shlex.join(["runner", "launch", display_path(output), *kept])
    include = os.path.relpath(os.path.abspath(experiment), os.path.abspath(output.parent))
    header = "\n".join([shlex.join(["runner", "tune", display_path(experiment), *overrides]), measured,
                        f"Run it: {command}",
                        f"It includes {include} and sets only the tuned keys, which win over that file's."])
    write_text_atomic(output, tuned_yaml(result, header, include))
    # the file must run what was measured: the experiment with the tune's overrides, then the tuned keys
    written = load_experiment(output, kept).resolved
    measured_config = load_experiment(experiment, [*overrides, *as_overrides(result.best.settings)]).resolved
    if written != measured_config:
        differ = sorted(k for k in {*written, *measured_config} if written.get(k) != measured_config.get(k))
        raise RunnerError(f"the written file does not resolve to the measured setting (sections {', '.join(differ)} "
                          f"differ); run the experiment with these overrides instead: "
                          f"{shlex.join([*overrides, *as_overrides(result.best.settings)])}.", file=output)
    return command


def _override_key(text: str) -> str:
    return text.lstrip("~").partition("=")[0].strip()


def _overlaps(a: str, b: str) -> bool:
    return a == b or a.startswith(b + ".") or b.startswith(a + ".")
