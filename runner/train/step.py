"""One training step: the optimizer, schedule, loss scaler and wrapped net it uses (built once), and the step itself."""
from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch
from torch import nn

from runner.augment.mix import Mixer
from runner.config.sections import OptimizerConfig, SchedulerConfig, TrainerConfig
from runner.dist import Dist
from runner.loaders.slots import MicroBatch
from runner.models.device import autocast_args, model_input
from runner.optim.optimizers import create_optimizer
from runner.optim.schedules import create_scheduler
from runner.train.ema import ModelEma
from runner.train.losses import create_losses

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


def build_step(model: nn.Module, d: Dist, *, optimizer: OptimizerConfig, scheduler: SchedulerConfig,
               trainer: TrainerConfig, global_batch: int, steps_per_epoch: int, mixer: Mixer | None = None,
               resume: dict[str, Any] | None = None) -> Step:
    """Optimizer, schedule, loss scaler and the wrapped net around `model`; their states from `resume` when given.
    `global_batch`: the images of an optimizer step over all processes (the lr scales with it); `mixer`: the
    mix of each training batch (pipelines.train.mix)."""
    tc = trainer
    optim = create_optimizer(model, optimizer, global_batch)
    # the schedule spans the planned epochs; max_steps only stops early, on the same curve
    schedule = create_scheduler(optim, scheduler, steps_per_epoch, tc.epochs * steps_per_epoch)
    # fp16 gradients underflow without loss scaling; bf16 and fp32 need none (the scaler passes through)
    scaler = torch.amp.GradScaler(d.device.type, enabled=tc.precision == "fp16")
    if resume:
        model.load_state_dict(resume["model"])
        optim.load_state_dict(resume["optimizer"])
        schedule.load_state_dict(resume["scheduler"])
        scaler.load_state_dict(resume["scaler"])
        torch.set_rng_state(resume["rng"][d.rank])
    ema = ModelEma(model, tc.ema) if tc.ema else None
    if ema and resume and resume.get("ema") is not None:  # without one, the average starts from the weights
        ema.load_state_dict(resume["ema"])
    net = ddp = None
    if d.enabled:  # after loading: DDP broadcasts rank 0's weights when it wraps the model
        net = ddp = nn.parallel.DistributedDataParallel(model, device_ids=[d.local_rank] if d.device.type == "cuda"
                                                        else None)
    losses = create_losses(tc.loss, tc.label_smoothing)
    return Step(model=model, net=compiled(net or model, tc), criterion=losses.hard, optimizer=optim,
                scheduler=schedule, scaler=scaler, amp=autocast_args(tc.precision, d.device), tc=tc, ddp=ddp,
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
