"""`runner launch`: prepare data, then run the worker here (one process) or under torchrun (several).

Several processes are always started by PyTorch's own launcher (torch.distributed.run), with its
rendezvous options passed through for multi-node runs; a worker that torchrun started (ours or
the user's own `torchrun -m runner launch ...`) is recognised by torchrun's environment.
"""
from __future__ import annotations

import json
import os
import re
import signal
import uuid
from dataclasses import asdict
from pathlib import Path

from runner import console
from runner.config.frozen import as_logged
from runner.data.paths import split_dir, synth_dir
from runner.errors import DataError, RunnerError
from runner.machine import cpu_cores

WORKER_ENV = "RUNNER_WORKER_OF"  # set by our torchrun parent: the worker need not repeat its notes
LABEL_MAP_ARTIFACT = "label_map.json"  # {class name: label} of the train split, logged with every run


def ensure_data(v, *, quiet: bool = False, train: bool = True) -> None:
    """Generate the synthetic set when data.root is unset; check the folders otherwise (train=False: the eval
    splits alone, for runner evaluate)."""
    cfg = v.config.data
    if cfg.loader == "synthetic":
        return
    if cfg.root is None:
        from runner.data.synth import generate_synthetic
        from runner.progress import progress_bar

        root, s = synth_dir(cfg.synth), cfg.synth
        if not quiet:
            console.note(f"data.root is unset: training on the synthetic ImageNet-like JPEG set in {root} "
                         f"({s.classes} classes x {s.per_class} images; set data.root to use real data).")
        with progress_bar("generating synthetic data") as progress:
            generate_synthetic(root, classes=s.classes, per_class=s.per_class, eval_per_class=s.eval_per_class,
                               min_side=s.min_side, max_side=s.max_side, quality=s.quality,
                               progress=None if quiet else progress)
        check_extra_eval_splits(v, quiet=quiet)
        return
    from runner.data.splits import check_split_sizes, scan_split
    from runner.loaders.dali_plan import reader_suffixes

    suffixes = {}
    for role in ("train", "eval") if train else ("eval",):
        if role == "eval" and v.config.pipelines.eval is None and cfg.loader == "dali":
            continue
        suffixes[role] = reader_suffixes(v.graphs.get(role))
        scan_split(v.loaded, role, suffixes[role])  # DataError at data.root, naming folder and layout
    if train:
        check_split_sizes(v.loaded, v.target.world, suffixes, accumulation=v.accumulation)  # once, not per process
    check_extra_eval_splits(v, quiet=quiet)


def check_extra_eval_splits(v, *, quiet: bool) -> None:
    """data.eval_splits checked as the eval split is; the classes a split has no folder for, said once."""
    from runner.data.eval_splits import check_eval_splits
    from runner.loaders.dali_plan import reader_suffixes

    for text in check_eval_splits(v.loaded, v.target.world, reader_suffixes(v.graphs.get("eval"))):
        if not quiet:
            console.note(text)


def checked_with_data(v, *, quiet: bool = False):
    """validate.with_data, saying its notes when it made them (the data was generated after validation)."""
    from runner.run.validate import with_data

    checked = with_data(v)
    if checked is not v and not quiet:
        for text in checked.label_notes:
            console.note(text)
    return checked


def torchrun_args(v, experiment: str, overrides: list[str], extra: list[str],
                  command: tuple[str, ...] = ("launch",)) -> list[str]:
    """torchrun's own command line: our node layout and rendezvous, then `-m runner launch ...` (or `command`)."""
    tc = v.config.trainer
    args = [f"--nproc-per-node={v.processes}", f"--nnodes={tc.nnodes}", f"--max-restarts={tc.max_restarts}"]
    if tc.nnodes > 1:  # config.load checked that rdzv_endpoint is set
        args += [f"--node-rank={tc.node_rank}", f"--rdzv-backend={tc.rdzv_backend}",
                 f"--rdzv-endpoint={tc.rdzv_endpoint}", f"--rdzv-id={tc.rdzv_id}"]
    else:
        args += ["--standalone"]
    return args + ["-m", "runner", *command, experiment, *overrides, *extra]


def launch(v, experiment: str, overrides: list[str], *, resume: str | None = None) -> int:
    """Run the experiment to its end; returns the process exit code."""
    from runner.dist import under_torchrun

    if v.config.trainer.deterministic:  # cuBLAS reproducibility; torch before ~2.10 raises without it
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    if resume == AUTO_RESUME:
        resume = auto_resume(v)
    if under_torchrun():
        return run_worker(v, resume=resume)
    init = None
    if v.config.model.init is not None and not resume:
        from runner.weights.init import plan_init

        init = plan_init(v)  # weights that do not fit fail here, before any work; workers find a fetch cached
    ensure_data(v)
    v = checked_with_data(v)
    if v.target.world == 1:
        return run_worker(v, resume=resume, init=init)
    if resume:  # refused here once, rather than by every process torchrun would start
        load_resume(v, resume, v.target.world)
    return run_torchrun(torchrun_args(v, experiment, overrides, ["--resume", resume] if resume else []),
                        v.processes)


def run_torchrun(args: list[str], processes: int) -> int:
    """PyTorch's launcher (torch.distributed.run), in this process so that its failure report is ours."""
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import get_args_parser, run

    os.environ[WORKER_ENV] = str(os.getpid())
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, cpu_cores() // processes)))
    console.note(f"starting {processes} processes per node with torchrun: torchrun {' '.join(args)}")
    try:
        run(get_args_parser().parse_args(args))
    except ChildFailedError as e:
        rank, failure = e.get_first_failure()
        code = failure.exitcode
        how = f"was killed by {signal.Signals(-code).name}" if code < 0 else f"exited with code {code}"
        console.error(f"rank {rank} (pid {failure.pid}) {how} first; its own message, if any, is above. torchrun "
                      "stopped the other processes. A run that was checkpointed can continue with --resume.")
        return code if code > 0 else 128 - code
    except SignalException as e:  # SIGTERM/SIGINT to this process: torchrun passed it on to the workers
        console.error(f"stopped by {e.sigval.name}; the workers saved a checkpoint if they could (--resume).")
        return 128 + int(e.sigval)
    return 0


def split_fingerprints(v) -> dict[str, tuple[Path, dict]]:
    """role -> (split folder, fingerprint) of the folders the run's readers read (none when synthetic)."""
    from runner.data.scan import fingerprint
    from runner.loaders.dali_plan import reader_suffixes

    if v.config.data.loader == "synthetic":
        return {}
    found = {}
    for role in ("train", "eval"):
        folder = split_dir(v.config.data, role)
        if folder.is_dir():
            found[role] = (folder, fingerprint(folder, reader_suffixes(v.graphs.get(role))))
    return found


def stale_cache_notes(fingerprints: dict[str, tuple[Path, dict]]) -> None:
    """Say when a split the run reads is a cache whose source, on this machine, has changed since it was built."""
    from runner.data.manifest import stale_source_note

    for folder, _ in fingerprints.values():
        note = stale_source_note(folder)
        if note:
            console.note(note)


def run_params(v, world: int, fingerprints: dict[str, tuple[Path, dict]] | None = None) -> dict[str, str]:
    """The flattened resolved config, plus seeds and the dataset fingerprint: the run's params."""
    from runner.data import manifest
    from runner.loaders.slots import check_accumulation
    from runner.run import runinfo
    from runner.tracking import flatten

    accumulation = check_accumulation(v.loaded, world)
    extra = {"trainer.accumulation": accumulation, **runinfo.seeds(v.config, world * accumulation)}  # seeds per slot
    if v.labels is not None:
        extra["data.num_classes"] = len(v.labels)
    for role, (folder, fp) in (split_fingerprints(v) if fingerprints is None else fingerprints).items():
        extra.update({f"data.fingerprint.{role}.{k}": val for k, val in fp.items()})
        extra.update(manifest.run_params(role, folder))  # a cache says what it was made from, and how
    return {**flatten(as_logged(v.loaded.resolved)), **flatten(extra)}


def split_inputs(v, fingerprints: dict[str, tuple[Path, dict]]) -> list:
    """The splits the run reads as MLflow dataset inputs: "training", and "eval" when it evaluates."""
    from runner.tracking import data_input

    evaluates = v.config.trainer.eval_every_n_epochs and not (
        v.config.pipelines.eval is None and v.config.data.loader == "dali")
    inputs = []
    for role, (folder, fp) in fingerprints.items():
        if role == "eval" and not evaluates:
            continue
        folder = folder.resolve()
        inputs.append(data_input(name=f"{folder.parent.name}/{folder.name}", sha256=fp["sha256"], source=str(folder),
                                 context="training" if role == "train" else "eval",
                                 profile=dict(fp)))
    return inputs


def log_run_inputs(v, tracker, world: int, fingerprints: dict[str, tuple[Path, dict]]) -> None:
    """Tags, the data splits, the resolved YAML and the compiled pipelines: what a re-run on another machine
    needs."""
    from omegaconf import OmegaConf

    from runner.loaders.dali_plan import compiled_source
    from runner.run import runinfo

    tracker.set_tags(runinfo.run_tags(v, world))
    for data in split_inputs(v, fingerprints):
        tracker.log_input(data)
    tracker.log_text(OmegaConf.to_yaml(as_logged(v.loaded.resolved)), "experiment.yaml")
    if v.labels is not None:
        tracker.log_text(v.labels.to_json(), LABEL_MAP_ARTIFACT)
    for role in v.graphs:
        tracker.log_text(compiled_source(v, role), f"pipelines/{role}_pipeline.py")
    from runner.run.snapshot import pipeline_files

    for name, text in pipeline_files(v.loaded).items():  # the `use:` files, so a re-run needs no checkout
        tracker.log_text(text, name)


def run_worker(v, *, resume: str | None = None, init=None) -> int:
    """One training process: join the group, train, record, tear down."""
    from runner import dist
    from runner.sweep.child import on_end, on_fresh_start, sweep_parent
    from runner.train.loop import train
    from runner.train.summary import print_summary

    d = dist.setup(v.target.accelerator)
    torch_threads(d)
    tracker = None
    try:
        if dist.under_torchrun() and d.local_rank == 0 and WORKER_ENV not in os.environ:
            ensure_data(v, quiet=d.rank != 0)  # started by the user's own torchrun: nobody did it yet
        dist.barrier(d)
        v = checked_with_data(v, quiet=d.rank != 0)
        state = load_resume(v, resume, d.world) if resume else None
        init = prepare_init(v, d, resumed=state is not None, plan=init)
        run_id = state["run_id"] if state else None
        from runner.tracking import create_tracker

        tracker = create_tracker(v.config.tracking, rank=d.rank, resume_run_id=run_id,
                                 at=v.loaded.at("tracking.uri"))
        if d.main:
            fingerprints = split_fingerprints(v)
            stale_cache_notes(fingerprints)
            params = {**run_params(v, d.world, fingerprints), **(init.params if init else {})}
            run_id = tracker.start(params) or run_id or uuid.uuid4().hex
            if not state:
                log_run_inputs(v, tracker, d.world, fingerprints)
                if sweep_parent(v.config.tracking.tags):
                    on_fresh_start(tracker.uri, run_id, v.config.tracking.tags)
        run_id = dist.broadcast_object(run_id, d)
        result = train(v, d, tracker, run_id=run_id, resume=state, init=init)
        if d.main:
            summary = {**asdict(result), "checkpoint": str(result.checkpoint) if result.checkpoint else None}
            tracker.log_text(json.dumps(summary, indent=2, default=str), "summary.json")
            tracker.set_tags({"runner.checkpoint": str(result.checkpoint or "")})
            finished = tracker.finish(result.status)
            if result.status == "FINISHED" and finished.delivered and finished.run_id and v.config.trainer.checkpoint_log:
                log_model(v, finished.uri, finished.run_id, result.checkpoint)
            if finished.delivered and sweep_parent(v.config.tracking.tags):
                on_end(finished.uri, v.config.tracking.tags)  # the parent run shows the sweep's result so far
            print_summary(v, result, finished)
        return 0 if result.status == "FINISHED" else 128 + int(result.signal or 15)
    except BaseException as e:
        if tracker is not None:
            tracker.finish("FAILED")
        if d.enabled and dist.peer_failed(e):  # not this rank's fault: the first failure is reported above
            console.err.print(f"rank {d.rank}: stopping: another process of this run failed "
                              f"({str(e).splitlines()[0][:160]}).", markup=False)
            from runner.train.loop import StopRequest

            if StopRequest.received is None:  # else torchrun's stop came already: end now
                dist.await_stop()
            return 1
        raise
    finally:
        dist.teardown()


def prepare_init(v, d, *, resumed: bool, plan=None):
    """model.init planned on every rank (a fetched file is cached: one download); said and logged by rank 0.
    A resume ignores it: the checkpoint holds the weights the run had reached."""
    init = v.config.model.init
    if init is None:
        return None
    if resumed:
        if d.main:
            console.note(f"model.init ({init.source}) is ignored: --resume continues from the checkpoint's weights.")
        return None
    from runner.weights.init import init_note, label_note, plan_init

    plan = plan or plan_init(v)
    if d.main:
        for text in (init_note(plan, v.config.model.name), label_note(plan, v.labels)):
            if text:
                console.note(text)
    return plan


def log_model(v, uri: str, run_id: str, checkpoint: Path | None) -> None:
    """The run's LoggedModel, pointing at its best (else last) checkpoint in the store: MLflow's Models column."""
    from omegaconf import OmegaConf

    from runner.weights.kept import INDEX
    from runner.weights.store import log_logged_model

    index_file = checkpoint.parent / INDEX if checkpoint else None
    if index_file is None or not index_file.is_file():
        return
    index = json.loads(index_file.read_text())
    files = {"experiment.yaml": OmegaConf.to_yaml(as_logged(v.loaded.resolved))}
    if v.labels is not None:
        files[LABEL_MAP_ARTIFACT] = v.labels.to_json()
    log_logged_model(uri, run_id, v.config.name or v.config.model.name, index, files)


def torch_threads(d) -> None:
    import torch

    if d.device.type == "cpu":
        torch.set_num_threads(max(1, cpu_cores() // max(1, d.local_world)))


def load_resume(v, resume: str, world: int) -> dict:
    """The checkpoint --resume names, refused if the experiment's settings do not fit it."""
    from runner.weights import checkpoint

    path = resolve_resume(v, resume)
    state = checkpoint.load(path)
    checkpoint.check_resumable(state, path, checkpoint.fixed_settings(v, world))
    return state


AUTO_RESUME = "auto"  # --resume auto: the latest checkpoint if there is one, else a fresh start (a requeued job)


def auto_resume(v) -> str | None:
    """The experiment's latest checkpoint under trainer.checkpoint_dir, said; None (a fresh start) when it has none."""
    from runner.weights import checkpoint

    found = checkpoint.find_latest(v.config.trainer.checkpoint_dir, v.config.name)
    if found is None:
        return None
    if "RANK" not in os.environ or os.environ.get("RANK") == "0":
        console.note(f"--resume auto: continuing from {found}")
    return str(found)


def resolve_resume(v, resume: str) -> Path:
    """--resume PATH | RUN_ID | last -> a checkpoint file."""
    from runner.weights import checkpoint

    tc = v.config.trainer
    path = Path(resume)
    if path.is_file():
        return path
    if path.is_dir() and (path / checkpoint.LAST).is_file():
        return path / checkpoint.LAST
    if resume == "last":
        found = checkpoint.find_latest(tc.checkpoint_dir, v.config.name)
        if found is None:
            raise DataError(f"--resume: no checkpoint of experiment '{v.config.name}' under {tc.checkpoint_dir}/.")
        return found
    candidate = checkpoint.run_dir(tc.checkpoint_dir, v.config.name, resume) / checkpoint.LAST
    if candidate.is_file():
        return candidate
    uri = logged_to(v)
    found = fetch_checkpoint(v, resume, uri, missing_ok=True) if uri and RUN_ID.fullmatch(resume) else None
    if found is not None:
        return found
    stored = f", or logged to {uri}" if uri is not None else ""
    raise DataError(f"--resume {resume}: not a checkpoint file, a run folder, a run id with a checkpoint under "
                    f"{tc.checkpoint_dir}/{v.config.name}/{stored}, or 'last'.")


RUN_ID = re.compile(r"[0-9a-f]{6,32}")  # an MLflow run id, or the start of one


def logged_to(v) -> str | None:
    """The tracking store this experiment's runs log to; None with tracking off."""
    from runner.tracking import resolve_tracking_uri

    tracking = v.config.tracking
    return resolve_tracking_uri(tracking.uri, v.loaded.at("tracking.uri")) if tracking.enabled else None


def fetch_checkpoint(v, run_id: str, uri: str, *, missing_ok: bool = False) -> Path | None:
    """Run `run_id`'s last checkpoint in the store at `uri`, downloaded to where this experiment keeps the run's
    checkpoints (with the store's checkpoint index), for a resume on a machine that does not have it. Where the
    store lacks the run or the run logged no checkpoint: None with `missing_ok`, else RunnerError / DataError. A
    download that fails raises either way."""
    from runner.tracking.store import get_run
    from runner.weights import checkpoint
    from runner.weights.store import restore_last_checkpoint

    try:
        run_id = get_run(uri, run_id).run_id
    except RunnerError:
        if missing_ok:
            return None
        raise
    folder = checkpoint.run_dir(v.config.trainer.checkpoint_dir, v.config.name, run_id)
    if (folder / checkpoint.LAST).is_file():  # fetched already (each process of a launch resolves --resume)
        return folder / checkpoint.LAST
    try:
        path, step = restore_last_checkpoint(uri, run_id, folder)
    except DataError:
        if missing_ok:
            return None
        raise
    console.note(f"run {run_id}'s checkpoint is not on this machine: fetched its last logged one (step {step}) "
                 f"from {uri} into {folder}.")
    return path
