"""The table rank 0 prints when a run ends."""
from __future__ import annotations

from runner import console


def print_summary(title: str, result, finished) -> None:
    """The final table under `title` (the experiment's name): what was trained, how fast, how well, and where it was
    recorded."""
    m = result.metrics
    rows = [
        ["status", result.status],
        ["run id", result.run_id],
        ["epochs / steps", f"{result.epochs} / {result.steps}"],
        ["wall time", f"{result.seconds:.1f} s"],
        ["images/s (last epoch)", f"{m.get('epoch/images_per_s', 0):,.0f}"],
        ["data wait (last epoch)", console.percent(m.get("epoch/data_wait_share"), missing="")],
    ]
    if "epoch/stream_wait_share" in m:  # on a GPU: the training stream's stall for batches, host wait included
        rows.append(["training stream's wait (last epoch)", console.percent(m["epoch/stream_wait_share"])])
    if "epoch/gpu_util_pct" in m:
        rows.append(["GPU utilization (last epoch)", f"{m['epoch/gpu_util_pct']:.0f}%"])
    if "eval/top1" in m:
        rows += [["eval top-1", console.percent(m["eval/top1"], missing="")],
                 ["eval top-5", console.percent(m["eval/top5"], missing="")], ["eval loss", f"{m['eval/loss']:.4f}"]]
    if "eval_ema/top1" in m:  # trainer.ema: the averaged weights on the same images
        rows += [["eval top-1 (EMA)", console.percent(m["eval_ema/top1"], missing="")],
                 ["eval top-5 (EMA)", console.percent(m["eval_ema/top5"], missing="")],
                 ["eval loss (EMA)", f"{m['eval_ema/loss']:.4f}"]]
    if result.checkpoint:
        rows.append(["checkpoint", str(result.checkpoint)])
    if finished.message:  # empty when tracking is off
        rows.append(["tracking", finished.message])
    console.out.print(console.table(f"{title}: summary", ["", ""], rows,
                                    justify_numbers=False))
