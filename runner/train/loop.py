"""The training loop of one process: set up, loop over epochs and steps, tear down.

Every rank runs this; rank 0 alone talks to the tracker and draws progress (the tracker and
progress objects of other ranks do nothing). The step body never reads a device value: losses
and accuracies accumulate on the device and are read once per logging interval, in the one
small all-reduce that also carries throughput and the stop request.
"""
from __future__ import annotations

import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from runner.augment.mix import Mixer
from runner.dist import Dist, all_gather_objects
from runner.evaluate.score import create_eval_loaders, evaluate_nets
from runner.evaluate.sums import Evaluation, class_names, log_evaluation
from runner.loaders.epochs import resolution_at
from runner.loaders.loader import create_train_loader
from runner.loaders.slots import check_accumulation, global_batch
from runner.models.device import build_model
from runner.preview.batches import BatchPreview
from runner.run.processes import configure_torch
from runner.train.budgets import Budgets
from runner.train.progress import NoProgress, TrainProgress
from runner.train.step import Step, build_step, train_step, training_stream
from runner.train.window import Telemetry, Window, end_epoch, log_window
from runner.weights import checkpoint
from runner.weights.init import InitPlan, apply_init
from runner.weights.kept import CheckpointLog

STOPPED_AT_TAG = "runner.stopped_at"  # why trainer.stop_at ended the run early
TRAIN_RESOLUTION = "epoch/train_resolution"  # the side the epoch trained at (pipelines.train.resolution)


@dataclass
class RunResult:
    run_id: str
    status: str                              # FINISHED | KILLED
    epochs: int = 0
    steps: int = 0
    metrics: dict[str, float] = field(default_factory=dict)
    checkpoint: Path | None = None
    seconds: float = 0.0
    signal: int | None = None


class StopRequest:
    """SIGTERM/SIGINT set a flag; the loop stops at a step boundary that every rank agrees on."""

    received: int | None = None  # the last stop signal this process got, kept after the loop has ended

    def __init__(self):
        self.signal: int | None = None
        self._previous = {}

    def __enter__(self) -> StopRequest:
        for sig in (signal.SIGTERM, signal.SIGINT):
            self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum, frame) -> None:
        self.signal = StopRequest.received = signum

    def __exit__(self, *exc) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)


def save_checkpoint(d: Dist, s: Step, train_loader, ckpt_dir: Path, *, about: dict[str, Any], run_id: str, step: int,
                    epoch: int, batch: int, kept: CheckpointLog | None = None, metrics: dict[str, float] | None = None,
                    budgets: dict[str, Any] | None = None) -> Path | None:
    """Every rank's reader position and RNG, gathered; rank 0 writes them with the model and optimizer states and
    `about` (the resolved experiment, the settings a resume must match, the label map: a checkpoint says what it is),
    then `kept` logs it."""
    if s.ema is not None:
        s.ema.sync(d)
    state = {"loader": train_loader.state(), "rng": torch.get_rng_state()}
    gathered = all_gather_objects(state, d)  # each rank's reader position and RNG
    if not d.main:
        return None
    path = checkpoint.save({
        "model": s.model.state_dict(), "optimizer": s.optimizer.state_dict(),
        "scheduler": s.scheduler.state_dict(), "scaler": s.scaler.state_dict(),
        "ema": s.ema.state_dict() if s.ema is not None else None,
        "step": step, "epoch": epoch, "batch": batch, "run_id": run_id, "world": d.world,
        "loader_states": [g["loader"] for g in gathered], "rng": [g["rng"] for g in gathered],
        **about, "metrics": dict(metrics or {}), "budgets": budgets}, ckpt_dir)
    if kept is not None:
        kept.saved(path, step=step, epoch=epoch, metrics=metrics)
    return path


def train(v, d: Dist, tracker, *, run_id: str, resume: dict[str, Any] | None = None,
          init: InitPlan | None = None) -> RunResult:
    """Train the experiment on this rank: set up, loop over epochs and steps, tear down. `init` (model.init)
    loads before DDP and the optimizer see the model; a resume's checkpoint replaces it. All of it runs on the
    CUDA stream trainer.stream_priority asks for, the loaders' copies of their batches too."""
    with training_stream(v.config.trainer, d.device):
        return _train(v, d, tracker, run_id=run_id, resume=resume, init=init)


def _train(v, d: Dist, tracker, *, run_id: str, resume: dict[str, Any] | None, init: InitPlan | None) -> RunResult:
    cfg, tc = v.config, v.config.trainer
    started = time.perf_counter()

    # ---- set up ------------------------------------------------------------------------------
    configure_torch(cfg, d)
    model = build_model(cfg, d)
    if init is not None and resume is None:
        apply_init(model, init)  # every rank, before DDP wraps it: an EMA copy made from it starts the same
    loader_state = resume["loader_states"][d.rank] if resume else None
    accumulation = check_accumulation(v.loaded, d.world)  # d.world: a user's own torchrun may differ from v's
    train_loader = create_train_loader(v.loaders, d, accumulation, state=loader_state, checkpointing=True)
    eval_loaders = create_eval_loaders(v.loaders, d) if tc.eval_every_n_epochs else {}
    evaluations: dict[str, Evaluation] = {}  # prefix -> the latest evaluation of that split
    steps_per_epoch = train_loader.steps_per_epoch
    total_steps = tc.epochs * steps_per_epoch if tc.max_steps is None else min(tc.max_steps, tc.epochs * steps_per_epoch)
    mixer = Mixer.create(cfg.pipelines.train.mix, num_classes=cfg.model.num_classes, label_smoothing=tc.label_smoothing,
                         seed=cfg.seed)
    s = build_step(model, d, optimizer=cfg.optimizer, scheduler=cfg.scheduler, trainer=tc,
                   global_batch=global_batch(cfg, d.world), steps_per_epoch=steps_per_epoch, mixer=mixer, resume=resume)
    step, epoch, start_batch = (resume["step"], resume["epoch"], resume["batch"]) if resume else (0, 0, 0)
    ckpt_dir = checkpoint.run_dir(tc.checkpoint_dir, cfg.name, run_id)
    about = {"config": v.loaded.resolved, "fixed_settings": v.fixed_settings(d.world),
             "label_map": v.labels.index if v.labels is not None else None}  # what every checkpoint says it is
    kept = CheckpointLog(tc, ckpt_dir, tracker) if d.main else None
    progress = TrainProgress(tc.epochs, steps_per_epoch) if d.main else NoProgress()
    telemetry = Telemetry(d, train_loader.part_waits)
    previews = BatchPreview(v.grids, tracker, d, enabled=resume is None)  # what the run trained on, as grids
    budgets = Budgets(tc, resume.get("budgets") if resume else None)
    result = RunResult(run_id=run_id, status="FINISHED")

    # ---- loop --------------------------------------------------------------------------------
    with StopRequest() as stop:
        while epoch < tc.epochs and step < total_steps:
            progress.start_epoch(epoch + 1, start_batch)
            batch, window = start_batch, Window(d.device)
            telemetry.start_epoch()
            train_loader.set_epoch(epoch)
            batches = train_loader.epoch(start_batch)
            while step < total_steps:
                t0 = time.perf_counter()
                telemetry.stream.before()
                try:
                    micro = next(batches)
                except StopIteration:
                    break
                telemetry.stream.after()
                telemetry.meter.wait(time.perf_counter() - t0)
                out = train_step(s, micro, step=step)
                previews.take("train", out[0].images, out[0].targets)  # the first batch only, as fed
                for r in out:
                    window.add(r.loss, r.logits, r.labels)
                step += 1
                batch += 1
                telemetry.meter.step(sum(mb.labels.shape[0] for mb in micro), time.perf_counter())

                stopping = stop.signal is not None and not d.enabled  # alone: stop at once
                last_of_epoch = batch == steps_per_epoch or step == total_steps
                if step % tc.log_every_n_steps == 0 or last_of_epoch or stopping:
                    metrics, stopping = log_window(window, telemetry, d, lr=s.scheduler.get_last_lr()[0],
                                                   stop_requested=stop.signal is not None,
                                                   epoch=epoch + batch / steps_per_epoch)
                    tracker.log_metrics(metrics, step)
                    progress.step(batch, metrics, epoch=epoch + 1, global_step=step)
                else:
                    progress.step(batch, epoch=epoch + 1, global_step=step)
                if stopping:
                    result.status, result.signal = "KILLED", stop.signal or signal.SIGTERM
                    result.checkpoint = save_checkpoint(d, s, train_loader, ckpt_dir, about=about, run_id=run_id, step=step,
                                                        epoch=epoch, batch=batch, kept=kept,
                                                        budgets=budgets.state(time.perf_counter() - started))
                    break
            if result.status == "KILLED":
                break

            epoch_metrics = end_epoch(telemetry, d)
            if cfg.pipelines.train.resolution is not None:
                epoch_metrics[TRAIN_RESOLUTION] = float(resolution_at(cfg.pipelines.train.resolution, epoch))
            epoch += 1
            start_batch = 0
            last = epoch == tc.epochs or step >= total_steps
            if eval_loaders and (epoch % tc.eval_every_n_epochs == 0 or last):  # none when every_n is 0
                if s.ema is not None:
                    s.ema.sync(d)
                nets = {"model": s.net} | ({"ema": s.ema.module} if s.ema is not None else {})
                evaluations.update(evaluate_nets(nets, eval_loaders, s.eval_criterion, d, s.amp, tc.channels_last,
                                                 cfg.model.num_classes, previews, tc.eval_tta))
                for prefix, ev in evaluations.items():
                    epoch_metrics.update(ev.metrics(prefix))
                reached, stop_reason = budgets.after_evaluation(epoch_metrics, epoch=epoch,
                                                                seconds=time.perf_counter() - started)
                epoch_metrics.update(reached)
                if stop_reason is not None:
                    last = True
                    tracker.set_tags({STOPPED_AT_TAG: stop_reason})
                    progress.note(f"stopped: {stop_reason}")
            tracker.log_metrics(epoch_metrics, epoch)
            progress.end_epoch(epoch, epoch_metrics)
            result.metrics.update(epoch_metrics)
            if last or (tc.checkpoint_every_n_epochs and epoch % tc.checkpoint_every_n_epochs == 0):
                result.checkpoint = save_checkpoint(d, s, train_loader, ckpt_dir, about=about, run_id=run_id, step=step,
                                                    epoch=epoch, batch=0, kept=kept, metrics=epoch_metrics,
                                                    budgets=budgets.state(time.perf_counter() - started))
            if last:
                break

    # ---- tear down ---------------------------------------------------------------------------
    progress.close()
    telemetry.stop()
    previews.close()
    if d.main:
        names = class_names(v.labels, cfg.model.num_classes)
        for prefix, ev in evaluations.items():  # the last evaluation of each split, as files and a heat map
            log_evaluation(tracker, ev, prefix, names)
    result.epochs, result.steps = epoch, step
    result.seconds = time.perf_counter() - started
    train_loader.close()
    return result
