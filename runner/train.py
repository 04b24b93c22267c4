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
from torch import nn

from runner import checkpoint
from runner.dist import Dist, all_gather_objects, all_sum
from runner.loaders import create_loader
from runner.models import create_model
from runner.optim import create_optimizer, create_scheduler
from runner.progress import NoProgress, TrainProgress
from runner.telemetry import CpuSampler, GpuSampler, LaunchThreadsSampler, LoaderMeter

AMP_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


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

    def __init__(self):
        self.signal: int | None = None
        self._previous = {}

    def __enter__(self) -> "StopRequest":
        for sig in (signal.SIGTERM, signal.SIGINT):
            self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum, frame) -> None:
        self.signal = signum

    def __exit__(self, *exc) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)


def autocast_args(precision: str, device: torch.device) -> dict[str, Any]:
    """torch.autocast's arguments for trainer.precision (fp32: autocast off)."""
    return {"device_type": device.type, "dtype": AMP_DTYPES.get(precision, torch.float32),
            "enabled": precision in AMP_DTYPES}


def configure_torch(cfg, d: Dist) -> None:
    """Seeds and numerics: deterministic when asked, fast (cuDNN autotune, TF32) otherwise."""
    torch.manual_seed(cfg.seed)  # identical initial weights on every rank
    torch.use_deterministic_algorithms(cfg.trainer.deterministic)  # both ways: in-process re-runs inherit it
    if cfg.trainer.deterministic:
        torch.backends.cudnn.benchmark = False
        torch.backends.cuda.matmul.allow_tf32 = False  # numbers comparable across GPU generations
        torch.backends.cudnn.allow_tf32 = False
    elif d.device.type == "cuda":
        torch.backends.cudnn.benchmark = True
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True


CUDA_GRAPH_MODES = ("reduce-overhead", "max-autotune")


def compiled(net: nn.Module, tc) -> nn.Module:
    """torch.compile in the experiment's mode (trainer.compile, trainer.compile_mode), or the module as is."""
    if not tc.compile:
        return net
    return torch.compile(net, mode=None if tc.compile_mode == "default" else tc.compile_mode)


def step_begin(tc) -> None:
    """Before each training forward: CUDA-graph modes reuse output buffers, so tell them a new step starts."""
    if tc.compile and tc.compile_mode in CUDA_GRAPH_MODES:
        torch.compiler.cudagraph_mark_step_begin()


def evaluate(net, loader, criterion, d: Dist, amp: dict, channels_last: bool) -> dict[str, float]:
    """Top-1/top-5 and loss over this rank's shard, summed over ranks: every sample counted once."""
    net.eval()
    sums = torch.zeros(4, dtype=torch.float64, device=d.device)  # loss*n, top1, top5, n
    with torch.no_grad():
        for images, labels in loader.epoch():
            if channels_last:
                images = images.contiguous(memory_format=torch.channels_last)
            with torch.autocast(**amp):
                logits = net(images)
                loss = criterion(logits.float(), labels)
            top5 = logits.topk(min(5, logits.shape[1]), dim=1).indices
            hits = top5 == labels[:, None]
            sums += torch.stack([loss.double() * len(labels), hits[:, 0].sum().double(),
                                 hits.any(dim=1).sum().double(), torch.tensor(len(labels), device=d.device,
                                                                              dtype=torch.float64)])
    loss_n, top1, top5, n = all_sum(sums, d).tolist()
    net.train()
    return {"eval/loss": loss_n / max(n, 1), "eval/top1": top1 / max(n, 1), "eval/top5": top5 / max(n, 1),
            "eval/samples": n}


def train(v, d: Dist, tracker, *, run_id: str, resume: dict[str, Any] | None = None) -> RunResult:
    cfg, tc = v.config, v.config.trainer
    started = time.perf_counter()

    # ---- set up ------------------------------------------------------------------------------
    configure_torch(cfg, d)
    model = create_model(cfg.model).to(d.device)
    if tc.channels_last:
        model = model.to(memory_format=torch.channels_last)
    loader_state = resume["loader_states"][d.rank] if resume else None
    train_loader = create_loader(v, "train", d, state=loader_state, checkpointing=True)
    eval_loader = create_loader(v, "eval", d) if tc.eval_every_n_epochs else None
    steps_per_epoch = train_loader.steps_per_epoch
    total_steps = tc.epochs * steps_per_epoch if tc.max_steps is None else min(tc.max_steps, tc.epochs * steps_per_epoch)
    optimizer = create_optimizer(model, cfg.optimizer, cfg.data.batch_size * d.world)
    # the schedule spans the planned epochs; max_steps only stops early, on the same curve
    scheduler = create_scheduler(optimizer, cfg.scheduler, steps_per_epoch, tc.epochs * steps_per_epoch)
    scaler = torch.amp.GradScaler(d.device.type, enabled=tc.precision == "fp16")
    step, epoch, start_batch = 0, 0, 0
    if resume:
        model.load_state_dict(resume["model"])
        optimizer.load_state_dict(resume["optimizer"])
        scheduler.load_state_dict(resume["scheduler"])
        scaler.load_state_dict(resume["scaler"])
        step, epoch, start_batch = resume["step"], resume["epoch"], resume["batch"]
        torch.set_rng_state(resume["rng"][d.rank])
    net = model
    if d.enabled:
        net = nn.parallel.DistributedDataParallel(model, device_ids=[d.local_rank] if d.device.type == "cuda" else None)
    net = compiled(net, tc)
    criterion = nn.CrossEntropyLoss(label_smoothing=tc.label_smoothing)
    amp = autocast_args(tc.precision, d.device)
    ckpt_dir = checkpoint.run_dir(tc.checkpoint_dir, cfg.name, run_id)
    progress = TrainProgress(tc.epochs, steps_per_epoch) if d.main else NoProgress()
    meter, cpu, launch = LoaderMeter(), CpuSampler(), LaunchThreadsSampler()
    gpu = GpuSampler([d.local_rank]).start() if d.device.type == "cuda" else None
    result = RunResult(run_id=run_id, status="FINISHED")

    def save_checkpoint(batch: int) -> Path | None:
        state = {"loader": train_loader.state(), "rng": torch.get_rng_state()}
        gathered = all_gather_objects(state, d)  # each rank's reader position and RNG
        if not d.main:
            return None
        return checkpoint.save({
            "model": model.state_dict(), "optimizer": optimizer.state_dict(),
            "scheduler": scheduler.state_dict(), "scaler": scaler.state_dict(),
            "step": step, "epoch": epoch, "batch": batch, "run_id": run_id, "world": d.world,
            "loader_states": [g["loader"] for g in gathered], "rng": [g["rng"] for g in gathered],
            "config": v.loaded.resolved, "fixed_settings": checkpoint.fixed_settings(v, d.world)}, ckpt_dir)

    # ---- loop --------------------------------------------------------------------------------
    with StopRequest() as stop:
        while epoch < tc.epochs and step < total_steps:
            progress.start_epoch(epoch + 1, start_batch)
            batch = start_batch
            loss_sum = torch.zeros((), device=d.device)
            correct = torch.zeros((), device=d.device)
            batches_in_window = seen_in_window = 0
            gpu_utils: list[float] = []
            meter.start_epoch(time.perf_counter())
            batches = train_loader.epoch(start_batch)
            while step < total_steps:
                t0 = time.perf_counter()
                try:
                    images, labels = next(batches)
                except StopIteration:
                    break
                meter.wait(time.perf_counter() - t0)
                if tc.channels_last:
                    images = images.contiguous(memory_format=torch.channels_last)
                step_begin(tc)
                with torch.autocast(**amp):
                    logits = net(images)
                    loss = criterion(logits.float(), labels)
                optimizer.zero_grad(set_to_none=True)
                scaler.scale(loss).backward()
                if tc.grad_clip_norm:
                    scaler.unscale_(optimizer)  # clip the true gradients, not the fp16-scaled ones
                    torch.nn.utils.clip_grad_norm_(model.parameters(), tc.grad_clip_norm)
                scaler.step(optimizer)
                scaler.update()
                scheduler.step()
                loss_sum += loss.detach()
                correct += (logits.detach().argmax(1) == labels).sum()
                batches_in_window += 1
                seen_in_window += labels.shape[0]
                step += 1
                batch += 1
                meter.step(labels.shape[0], time.perf_counter())

                stopping = stop.signal is not None and not d.enabled  # alone: stop at once
                last_of_epoch = batch == steps_per_epoch or step == total_steps
                if step % tc.log_every_n_steps == 0 or last_of_epoch or stopping:
                    window = meter.window()
                    loss_total, correct_total = torch.stack([loss_sum.float(), correct.float()]).tolist()  # one sync
                    totals = all_sum([loss_total, correct_total, batches_in_window, seen_in_window,
                                      window.images_per_s, window.data_wait_share,
                                      1.0 if stop.signal is not None else 0.0], d).tolist()
                    metrics = {"train/loss": totals[0] / max(totals[2], 1), "train/top1": totals[1] / max(totals[3], 1),
                               "train/lr": scheduler.get_last_lr()[0], "train/epoch": epoch + batch / steps_per_epoch,
                               "loader/images_per_s": totals[4], "loader/images_per_s_per_device": totals[4] / d.world,
                               "loader/data_wait_share": totals[5] / d.world,
                               **cpu.window().metrics()}
                    threads = launch.window()
                    if threads:
                        metrics.update(threads.metrics())
                    g = gpu.window() if gpu else None
                    if g:
                        metrics.update(g.metrics())  # this node's rank-0 GPU
                        gpu_utils.append(g.util_pct)
                    tracker.log_metrics(metrics, step)
                    progress.step(batch, metrics, epoch=epoch + 1, global_step=step)
                    loss_sum.zero_()
                    correct.zero_()
                    batches_in_window = seen_in_window = 0
                    stopping = totals[6] > 0  # any rank was asked to stop: all stop here
                else:
                    progress.step(batch, epoch=epoch + 1, global_step=step)
                if stopping:
                    result.status, result.signal = "KILLED", stop.signal or signal.SIGTERM
                    result.checkpoint = save_checkpoint(batch)
                    break
            if result.status == "KILLED":
                break

            epoch_window = meter.epoch()
            epoch += 1
            start_batch = 0
            images_per_s, wait = all_sum([epoch_window.images_per_s, epoch_window.data_wait_share], d).tolist()
            epoch_metrics = {"epoch/images_per_s": images_per_s, "epoch/data_wait_share": wait / d.world}
            if gpu_utils:
                epoch_metrics["epoch/gpu_util_pct"] = sum(gpu_utils) / len(gpu_utils)
            last = epoch == tc.epochs or step >= total_steps
            if eval_loader is not None and (epoch % tc.eval_every_n_epochs == 0 or last):  # None when every_n is 0
                epoch_metrics.update(evaluate(net, eval_loader, criterion, d, amp, tc.channels_last))
            tracker.log_metrics(epoch_metrics, epoch)
            progress.end_epoch(epoch, epoch_metrics)
            result.metrics.update(epoch_metrics)
            if last or (tc.checkpoint_every_n_epochs and epoch % tc.checkpoint_every_n_epochs == 0):
                result.checkpoint = save_checkpoint(0)

    # ---- tear down ---------------------------------------------------------------------------
    progress.close()
    if gpu:
        gpu.stop()
    result.epochs, result.steps = epoch, step
    result.seconds = time.perf_counter() - started
    train_loader.close()
    return result
