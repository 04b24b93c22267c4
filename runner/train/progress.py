"""A training run's progress: a rich bar per epoch on a terminal, plain periodic lines in a log."""
from __future__ import annotations

from typing import Any

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from runner import console
from runner.train.telemetry import STREAM_WAIT


def _fmt(metrics: dict[str, float]) -> str:
    parts = []
    if "loader/images_per_s" in metrics:
        parts.append(f"{metrics['loader/images_per_s']:,.0f} img/s")
    if "loader/data_wait_share" in metrics:
        stream = metrics.get(STREAM_WAIT)
        parts.append(f"wait {100 * metrics['loader/data_wait_share']:.0f}%"
                     + (f" (stream {100 * stream:.0f}%)" if stream is not None else ""))
    if "gpu/util_pct" in metrics:
        parts.append(f"GPU {metrics['gpu/util_pct']:.0f}%")
    if "train/loss" in metrics:
        parts.append(f"loss {metrics['train/loss']:.3f}")
    if "train/lr" in metrics:
        parts.append(f"lr {metrics['train/lr']:.3g}")
    return "  ".join(parts)


class TrainProgress:
    """Epoch and step bars with img/s, data-wait %, GPU %, loss and ETA."""

    def __init__(self, epochs: int, steps_per_epoch: int, *, live: bool | None = None):
        self.live = console.interactive() if live is None else live
        self.epochs, self.steps = epochs, steps_per_epoch
        self.bar: Progress | None = None
        if self.live:
            self.bar = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                                TextColumn("{task.fields[info]}"), TimeElapsedColumn(), TextColumn("eta"),
                                TimeRemainingColumn(), console=console.out, transient=False)
            self.epoch_task = self.bar.add_task("epochs", total=epochs, info="")
            self.step_task = self.bar.add_task("steps", total=steps_per_epoch, info="")
            self.bar.start()

    def start_epoch(self, epoch: int, start_batch: int = 0) -> None:
        if self.bar:
            self.bar.update(self.epoch_task, completed=epoch - 1)
            self.bar.reset(self.step_task, total=self.steps, completed=start_batch,
                           description=f"epoch {epoch}/{self.epochs}", info="")

    def step(self, batch: int, metrics: dict[str, float] | None = None, *, epoch: int, global_step: int) -> None:
        if self.bar:
            fields: dict[str, Any] = {"completed": batch}
            if metrics:
                fields["info"] = _fmt(metrics)
            self.bar.update(self.step_task, **fields)
        elif metrics:
            console.out.print(f"epoch {epoch}/{self.epochs} step {batch}/{self.steps} (global {global_step})  "
                              f"{_fmt(metrics)}", highlight=False)

    def end_epoch(self, epoch: int, metrics: dict[str, float]) -> None:
        text = "  ".join(f"{k.split('/', 1)[1]} {v:.4g}" for k, v in metrics.items() if k.startswith("eval/"))
        ema = "  ".join(f"{k.split('/', 1)[1]} {v:.4g}" for k, v in metrics.items() if k.startswith("eval_ema/"))
        text += f"  ema: {ema}" if ema else ""
        if self.bar:
            self.bar.update(self.epoch_task, completed=epoch, info=text)
        console.out.print(f"epoch {epoch}/{self.epochs} done  {_fmt(metrics)}  {text}".rstrip(), highlight=False)

    def note(self, text: str) -> None:
        console.out.print(text, highlight=False, markup=False)

    def close(self) -> None:
        if self.bar:
            self.bar.stop()
            self.bar = None


class NoProgress:
    """Ranks other than 0 draw nothing."""

    def start_epoch(self, *a, **k) -> None: ...
    def step(self, *a, **k) -> None: ...
    def end_epoch(self, *a, **k) -> None: ...
    def note(self, *a, **k) -> None: ...
    def close(self) -> None: ...
