"""The training loop of one process: set up, loop over epochs and steps, tear down.

Every rank runs this; rank 0 alone talks to the tracker and draws progress (the tracker and
progress objects of other ranks do nothing). The step body never reads a device value: losses
and accuracies accumulate on the device and are read once per logging interval, in the one
small all-reduce that also carries throughput and the stop request.
"""
from __future__ import annotations

import contextlib
import signal
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import torch
from torch import nn

from runner.augment.mix import Mixer
from runner.dist import Dist, all_gather_objects, all_sum
from runner.evaluate.sums import Evaluation, class_names, log_evaluation
from runner.loaders import create_loader
from runner.loaders.epochs import resolution_at
from runner.loaders.slots import MicroBatch, check_accumulation, create_train_loader, global_batch
from runner.models.zoo import create_model
from runner.optim.optimizers import create_optimizer, create_scheduler
from runner.preview.batches import BatchPreview
from runner.progress import NoProgress, TrainProgress
from runner.train.budgets import Budgets
from runner.train.ema import ModelEma, ema_split_prefix
from runner.train.losses import create_losses
from runner.train.telemetry import (
    PART_WAIT,
    STREAM_WAIT,
    CpuSampler,
    GpuSampler,
    LaunchThreadsSampler,
    LoaderMeter,
    StreamWaitMeter,
)
from runner.weights import checkpoint
from runner.weights.init import InitPlan, apply_init
from runner.weights.kept import CheckpointLog

AMP_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
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


@contextlib.contextmanager
def training_stream(tc, device: torch.device):
    """trainer.stream_priority: `high` runs what is inside on a new high-priority CUDA stream, ordered after the
    work already queued on the current one, which in turn waits for it at the end."""
    if tc.stream_priority == "default" or device.type != "cuda":
        yield
        return
    outer = torch.cuda.current_stream(device)
    stream = torch.cuda.Stream(device, priority=-1)  # lower is higher; DALI's streams have priority 0
    stream.wait_stream(outer)
    try:
        with torch.cuda.stream(stream):
            yield
    finally:
        outer.wait_stream(stream)


def step_begin(tc) -> None:
    """Before each training forward: CUDA-graph modes reuse output buffers, so tell them a new step starts."""
    if tc.compile and tc.compile_mode in CUDA_GRAPH_MODES:
        torch.compiler.cudagraph_mark_step_begin()


def model_input(images: torch.Tensor, channels_last: bool, amp: dict) -> torch.Tensor:
    """A loader's images as the model takes them: in the memory format trainer.channels_last asks for (a no-op for
    a pipeline that already makes channels-last images), and in fp32 when autocast is off, since a pipeline may make
    fp16 or bf16 images."""
    images = images.contiguous(memory_format=torch.channels_last if channels_last else torch.contiguous_format)
    return images if amp["enabled"] else images.float()


def predict(net, images: torch.Tensor, tta: str = "none") -> torch.Tensor:
    """The logits of `images`; with tta "flip" the mean of theirs and their mirror images' (trainer.eval_tta)."""
    logits = net(images)
    if tta == "flip":
        logits = (logits + net(images.flip(3))) / 2
    return logits


def evaluate_split(net, loader, criterion, d: Dist, amp: dict, channels_last: bool,
                   num_classes: int, preview: BatchPreview | None = None, tta: str = "none") -> Evaluation:
    """Loss, top-1/top-5 hits and the confusion matrix (num_classes x num_classes; 0: none) over this rank's
    shard, summed over ranks: every sample counted once. All of it accumulates on the device and crosses to the
    host in one all-reduce. `preview` draws the first batch (once per run); `tta`: trainer.eval_tta."""
    net.eval()
    sums = torch.zeros(4, dtype=torch.float64, device=d.device)  # loss*n, top1, top5, n
    confusion = torch.zeros(num_classes * num_classes, dtype=torch.int64, device=d.device)  # [true, predicted]
    with torch.no_grad():
        for images, labels in loader.epoch():
            if preview is not None:
                preview.take("eval", images, labels)
            images = model_input(images, channels_last, amp)
            with torch.autocast(**amp):
                logits = predict(net, images, tta)
                loss = criterion(logits.float(), labels)
            top5 = logits.topk(min(5, logits.shape[1]), dim=1).indices
            hits = top5 == labels[:, None]
            sums += torch.stack([loss.double() * len(labels), hits[:, 0].sum().double(),
                                 hits.any(dim=1).sum().double(), torch.tensor(len(labels), device=d.device,
                                                                              dtype=torch.float64)])
            if num_classes:
                confusion += torch.bincount(labels * num_classes + top5[:, 0], minlength=num_classes * num_classes)
    total = all_sum(torch.cat([sums, confusion.double()]), d)  # counts stay exact in float64 below 2**53
    net.train()
    loss_n, top1, top5, n = total[:4].tolist()
    return Evaluation(loss_sum=loss_n, top1=int(top1), top5=int(top5), samples=int(n),
                      confusion=total[4:].round().long().reshape(num_classes, num_classes))


def evaluate(net, loader, criterion, d: Dist, amp: dict, channels_last: bool, *,
             prefix: str = "eval") -> dict[str, float]:
    """`PREFIX/top1`, `/top5`, `/loss` and `/samples` of evaluate_split (e.g. prefix eval_ema, eval_val_320)."""
    return evaluate_split(net, loader, criterion, d, amp, channels_last, 0).metrics(prefix)


def evaluate_nets(nets: dict[str, nn.Module], loaders: dict[str, Any], criterion, d: Dist, amp: dict,
                  channels_last: bool, num_classes: int, preview: BatchPreview | None = None,
                  tta: str = "none") -> dict[str, Evaluation]:
    """Each set of weights ("model", and "ema" for the averaged ones) on each eval split (`loaders`, by metric
    prefix): metric prefix -> Evaluation, eval/ and eval_NAME/ for the model, eval_ema/ and eval_ema_NAME/ for
    the EMA. `preview` draws the model's first batch of the main split."""
    out = {}
    for key, net in nets.items():
        for prefix, loader in loaders.items():
            draw = preview if key == "model" and prefix == "eval" else None
            out[prefix if key == "model" else ema_split_prefix(prefix)] = evaluate_split(
                net, loader, criterion, d, amp, channels_last, num_classes, draw, tta)
    return out


def create_eval_loaders(v, d: Dist) -> dict[str, Any]:
    """metric prefix -> eval loader: `eval` for data.eval_split, `eval_NAME` for each of data.eval_splits."""
    import dataclasses

    from runner.data.eval_splits import extra_splits, split_prefix, split_view

    views = {"eval": v} | {split_prefix(name): dataclasses.replace(v, loaded=split_view(v.loaded, name))
                           for name in extra_splits(v.config.data)}
    loaders = {prefix: create_loader(view, "eval", d) for prefix, view in views.items()}
    return {prefix: loader for prefix, loader in loaders.items() if loader is not None}  # None: no eval pipeline


def build_model(cfg, d: Dist) -> nn.Module:
    """The experiment's model on this rank's device, in the memory format trainer.channels_last asks for."""
    model = create_model(cfg.model).to(d.device)
    if cfg.trainer.channels_last:
        model = model.to(memory_format=torch.channels_last)  # NHWC: the layout tensor-core convolutions want
    return model


@dataclass
class Step:
    """What one training step uses: built once by build_step, called by train() and by runner bench's bare loop."""
    model: nn.Module                         # the parameters: clipped, checkpointed
    net: nn.Module                           # what runs forward: the model inside DDP and/or torch.compile
    criterion: nn.Module                     # the training loss on class-index targets (trainer.loss)
    optimizer: torch.optim.Optimizer
    scheduler: Any
    scaler: torch.amp.GradScaler
    amp: dict[str, Any]
    tc: Any                                  # the trainer section
    ddp: nn.Module | None = None             # the DDP wrapper, whose all-reduce accumulation micro-steps skip
    mix: Mixer | None = None                 # pipelines.train.mix: mixup / cutmix of each batch
    soft_criterion: nn.Module | None = None  # the loss on mixed (probability) targets, smoothed already
    eval_criterion: nn.Module | None = None  # eval/loss: cross entropy under either training loss
    ema: ModelEma | None = None              # trainer.ema: the averaged weights


def build_step(v, d: Dist, model: nn.Module, steps_per_epoch: int, resume: dict[str, Any] | None = None) -> Step:
    """Optimizer, schedule, loss scaler and the wrapped net around `model`; their states from `resume` when given."""
    cfg, tc = v.config, v.config.trainer
    optimizer = create_optimizer(model, cfg.optimizer, global_batch(cfg, d.world))  # the lr scales with it
    # the schedule spans the planned epochs; max_steps only stops early, on the same curve
    scheduler = create_scheduler(optimizer, cfg.scheduler, steps_per_epoch, tc.epochs * steps_per_epoch)
    # fp16 gradients underflow without loss scaling; bf16 and fp32 need none (the scaler passes through)
    scaler = torch.amp.GradScaler(d.device.type, enabled=tc.precision == "fp16")
    if resume:
        model.load_state_dict(resume["model"])
        optimizer.load_state_dict(resume["optimizer"])
        scheduler.load_state_dict(resume["scheduler"])
        scaler.load_state_dict(resume["scaler"])
        torch.set_rng_state(resume["rng"][d.rank])
    ema = ModelEma(model, tc.ema) if tc.ema else None
    if ema and resume and resume.get("ema") is not None:  # without one, the average starts from the weights
        ema.load_state_dict(resume["ema"])
    mixer = Mixer.for_experiment(cfg)
    net = ddp = None
    if d.enabled:  # after loading: DDP broadcasts rank 0's weights when it wraps the model
        net = ddp = nn.parallel.DistributedDataParallel(model, device_ids=[d.local_rank] if d.device.type == "cuda"
                                                        else None)
    losses = create_losses(tc.loss, tc.label_smoothing)
    return Step(model=model, net=compiled(net or model, tc), criterion=losses.hard, optimizer=optimizer,
                scheduler=scheduler, scaler=scaler, amp=autocast_args(tc.precision, d.device), tc=tc, ddp=ddp,
                ema=ema, mix=mixer, soft_criterion=losses.soft if mixer else None, eval_criterion=losses.eval)


def forward_backward_step(s: Step, images: torch.Tensor, labels: torch.Tensor, *,
                          accumulation: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """Forward under autocast and backward of the (scaled) loss, added to the gradients; returns the loss and the
    logits. `labels` are class indices, or probabilities (B, classes) from the mix."""
    criterion = s.soft_criterion if labels.is_floating_point() else s.criterion
    images = model_input(images, s.tc.channels_last, s.amp)
    step_begin(s.tc)
    with torch.autocast(**s.amp):
        logits = s.net(images)
        loss = criterion(logits.float(), labels)  # the loss in fp32: a low-precision softmax loses small terms
    # / accumulation: the summed gradients are the mean over the micro-batches, as DDP's are over processes
    s.scaler.scale(loss / accumulation if accumulation > 1 else loss).backward()
    return loss, logits


class MicroResult(NamedTuple):
    """One micro-batch of a train step: what the loop counts, and what the model was fed (for the preview)."""
    loss: torch.Tensor
    logits: torch.Tensor
    labels: torch.Tensor    # what train/top1 counts as right: the label with the larger weight when mixed
    images: torch.Tensor    # as fed: mixed when pipelines.train.mix is set
    targets: torch.Tensor   # class indices, or the mix's probabilities (B, classes)


def train_step(s: Step, micro: Sequence[MicroBatch], *, step: int = 0) -> list[MicroResult]:
    """One optimizer step on this process's micro-batches, one per reader slot (gradient accumulation). `step`
    counts the optimizer steps before this one: the mix draws from (seed, slot, step) alone. Reads no device value
    (the loop reads the sums once per window)."""
    s.optimizer.zero_grad(set_to_none=True)  # None, not zeros: no memset, and the first backward writes fresh
    out = []
    for j, mb in enumerate(micro):
        images, targets, labels = mb.images, mb.labels, mb.labels
        if s.mix is not None:  # after the loader, on the device: DALI has no mixup
            mixed = s.mix(images, labels, slot=mb.slot, step=step)
            images, targets, labels = mixed.images, mixed.targets, mixed.labels
        last = j == len(micro) - 1
        # DDP all-reduces during the backward: only the last micro-step's, over the gradients summed by then
        with s.ddp.no_sync() if s.ddp is not None and not last else contextlib.nullcontext():
            loss, logits = forward_backward_step(s, images, targets, accumulation=len(micro))
        out.append(MicroResult(loss, logits, labels, images, targets))
    if s.tc.grad_clip_norm:
        s.scaler.unscale_(s.optimizer)  # clip the true gradients, not the fp16-scaled ones
        torch.nn.utils.clip_grad_norm_(s.model.parameters(), s.tc.grad_clip_norm)
    s.scaler.step(s.optimizer)  # skips the step when fp16 gradients overflowed
    s.scaler.update()
    s.scheduler.step()  # the schedule moves per optimizer step, not per epoch or micro-step
    if s.ema is not None:
        s.ema.update(step + 1)
    return out


class Window:
    """Training sums since the last log, kept on the device: read once per window, never per step."""

    def __init__(self, device: torch.device):
        self.loss = torch.zeros((), device=device)
        self.correct = torch.zeros((), device=device)
        self.batches = self.seen = 0

    def add(self, loss: torch.Tensor, logits: torch.Tensor, labels: torch.Tensor) -> None:
        self.loss += loss.detach()
        self.correct += (logits.detach().argmax(1) == labels).sum()
        self.batches += 1
        self.seen += labels.shape[0]

    def reset(self) -> None:
        self.loss.zero_()
        self.correct.zero_()
        self.batches = self.seen = 0


class Telemetry:
    """The loader and stream-wait meters and the CPU, launch-thread and GPU samplers, read at each window and epoch
    end."""

    def __init__(self, d: Dist, part_waits: Callable[[], dict[str, float]] = dict):
        self.meter, self.cpu, self.launch = LoaderMeter(), CpuSampler(), LaunchThreadsSampler()
        self.stream = StreamWaitMeter(enabled=d.device.type == "cuda")
        self.gpu = GpuSampler([d.local_rank]).start() if d.device.type == "cuda" else None
        self.gpu_utils: list[float] = []  # this epoch's window readings
        self.part_waits, self._waited = part_waits, part_waits()  # a hybrid loader's seconds per pipeline, in all

    def part_wait_shares(self, seconds: float) -> dict[str, float]:
        """Each pipeline's wait since the last call, as a share of `seconds` (the window's wall time)."""
        now = self.part_waits()
        shares = {name: (now[name] - self._waited.get(name, 0.0)) / seconds if seconds > 0 else 0.0 for name in now}
        self._waited = now
        return shares

    def start_epoch(self) -> None:
        self.gpu_utils = []
        self.meter.start_epoch(time.perf_counter())

    def stop(self) -> None:
        if self.gpu:
            self.gpu.stop()


def log_window(window: Window, t: Telemetry, s: Step, d: Dist, stop: StopRequest,
               epoch: float) -> tuple[dict[str, float], bool]:
    """The window's metrics summed over ranks, and whether any rank was asked to stop; resets the window."""
    loader = t.meter.window()
    parts = t.part_wait_shares(loader.seconds)  # the same pipelines, in the same order, on every rank
    loss_total, correct_total = torch.stack([window.loss.float(), window.correct.float()]).tolist()  # one sync
    stood = t.stream.window()  # after the sync: the window's events have completed
    stream_wait = stood / loader.seconds if stood is not None and loader.seconds > 0 else 0.0
    # one small all-reduce carries the sums, the throughput, the stop request and the waits
    totals = all_sum([loss_total, correct_total, window.batches, window.seen, loader.images_per_s,
                      loader.data_wait_share, 1.0 if stop.signal is not None else 0.0, stream_wait, *parts.values()],
                     d).tolist()
    metrics = {"train/loss": totals[0] / max(totals[2], 1), "train/top1": totals[1] / max(totals[3], 1),
               "train/lr": s.scheduler.get_last_lr()[0], "train/epoch": epoch,
               "loader/images_per_s": totals[4], "loader/images_per_s_per_device": totals[4] / d.world,
               "loader/data_wait_share": totals[5] / d.world,
               **({STREAM_WAIT: totals[7] / d.world} if t.stream.enabled else {}),
               **{PART_WAIT + name: x / d.world for name, x in zip(parts, totals[8:])},
               **t.cpu.window().metrics()}
    threads = t.launch.window()
    if threads:
        metrics.update(threads.metrics())
    g = t.gpu.window() if t.gpu else None
    if g:
        metrics.update(g.metrics())  # this node's rank-0 GPU
        t.gpu_utils.append(g.util_pct)
    window.reset()
    return metrics, totals[6] > 0  # any rank was asked to stop: all stop here


def end_epoch(t: Telemetry, d: Dist) -> dict[str, float]:
    """The epoch's throughput and data wait summed over ranks, and its mean GPU use."""
    loader = t.meter.epoch()
    stood = t.stream.epoch()
    stream_wait = stood / loader.seconds if loader.seconds > 0 else 0.0
    images_per_s, wait, stream_wait = all_sum([loader.images_per_s, loader.data_wait_share, stream_wait], d).tolist()
    metrics = {"epoch/images_per_s": images_per_s, "epoch/data_wait_share": wait / d.world}
    if t.stream.enabled:
        metrics["epoch/stream_wait_share"] = stream_wait / d.world
    if t.gpu_utils:
        metrics["epoch/gpu_util_pct"] = sum(t.gpu_utils) / len(t.gpu_utils)
    return metrics


def save_checkpoint(v, d: Dist, s: Step, train_loader, ckpt_dir: Path, *, run_id: str, step: int, epoch: int,
                    batch: int, kept: CheckpointLog | None = None, metrics: dict[str, float] | None = None,
                    budgets: dict[str, Any] | None = None) -> Path | None:
    """Every rank's reader position and RNG, gathered; rank 0 writes them with the model and optimizer states,
    the resolved experiment and the label map (a checkpoint says what it is), then `kept` logs it."""
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
        "config": v.loaded.resolved, "fixed_settings": checkpoint.fixed_settings(v, d.world),
        "label_map": v.labels.index if v.labels is not None else None, "metrics": dict(metrics or {}),
        "budgets": budgets}, ckpt_dir)
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
    train_loader = create_train_loader(v, d, accumulation, state=loader_state, checkpointing=True)
    eval_loaders = create_eval_loaders(v, d) if tc.eval_every_n_epochs else {}
    evaluations: dict[str, Evaluation] = {}  # prefix -> the latest evaluation of that split
    steps_per_epoch = train_loader.steps_per_epoch
    total_steps = tc.epochs * steps_per_epoch if tc.max_steps is None else min(tc.max_steps, tc.epochs * steps_per_epoch)
    s = build_step(v, d, model, steps_per_epoch, resume)
    step, epoch, start_batch = (resume["step"], resume["epoch"], resume["batch"]) if resume else (0, 0, 0)
    ckpt_dir = checkpoint.run_dir(tc.checkpoint_dir, cfg.name, run_id)
    kept = CheckpointLog(tc, ckpt_dir, tracker) if d.main else None
    progress = TrainProgress(tc.epochs, steps_per_epoch) if d.main else NoProgress()
    telemetry = Telemetry(d, train_loader.part_waits)
    previews = BatchPreview(v, tracker, d, enabled=resume is None)  # what the run trained on, as grids
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
                    metrics, stopping = log_window(window, telemetry, s, d, stop, epoch + batch / steps_per_epoch)
                    tracker.log_metrics(metrics, step)
                    progress.step(batch, metrics, epoch=epoch + 1, global_step=step)
                else:
                    progress.step(batch, epoch=epoch + 1, global_step=step)
                if stopping:
                    result.status, result.signal = "KILLED", stop.signal or signal.SIGTERM
                    result.checkpoint = save_checkpoint(v, d, s, train_loader, ckpt_dir, run_id=run_id, step=step,
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
                result.checkpoint = save_checkpoint(v, d, s, train_loader, ckpt_dir, run_id=run_id, step=step,
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
