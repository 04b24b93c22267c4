"""Scoring weights on the eval splits: every sample once over the ranks, the sums made on the device."""
from __future__ import annotations

from typing import Any

import torch
from torch import nn

from runner.data.eval_splits import extra_splits, split_prefix
from runner.dist import Dist, all_sum
from runner.evaluate.sums import Evaluation
from runner.loaders.config import LoaderConfig
from runner.loaders.loader import create_loader
from runner.models.device import model_input, predict
from runner.preview.batches import BatchPreview


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


def create_eval_loaders(cfg: LoaderConfig, d: Dist) -> dict[str, Any]:
    """metric prefix -> eval loader: `eval` for data.eval_split, `eval_NAME` for each of data.eval_splits."""
    views = {"eval": cfg} | {split_prefix(name): cfg.for_eval_split(name) for name in extra_splits(cfg.data)}
    loaders = {prefix: create_loader(view, "eval", d) for prefix, view in views.items()}
    return {prefix: loader for prefix, loader in loaders.items() if loader is not None}  # None: no eval pipeline


def ema_split_prefix(prefix: str) -> str:
    """The averaged weights' metric prefix for an eval split's: eval -> eval_ema, eval_NAME -> eval_ema_NAME."""
    return "eval_ema" + prefix[len("eval"):]
