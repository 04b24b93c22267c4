"""One evaluation's sums, summed over ranks: loss, top-1/top-5 hits, samples and the confusion matrix
(rows: true label, columns: predicted label), and what is read from them (metrics, per-class accuracy,
the most confused pairs, the JSON and CSV artifacts).

The sums are made on the device by runner.evaluate.score.evaluate_split and all-reduced once at the end.
"""
from __future__ import annotations

import csv
import io
import json
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch

from runner.evaluate.confusion import draw_confusion

# MLflow metric names take letters, digits, _ - . / and spaces
_UNSAFE = re.compile(r"[^\w\-./ ]")


@dataclass(frozen=True)
class Evaluation:
    loss_sum: float
    top1: int
    top5: int
    samples: int
    confusion: torch.Tensor                  # int64 [num_classes, num_classes]: [true, predicted]

    def metrics(self, prefix: str = "eval") -> dict[str, float]:
        """`PREFIX/loss`, `PREFIX/top1`, `PREFIX/top5`, `PREFIX/samples`."""
        n = max(self.samples, 1)
        return {f"{prefix}/loss": self.loss_sum / n, f"{prefix}/top1": self.top1 / n,
                f"{prefix}/top5": self.top5 / n, f"{prefix}/samples": float(self.samples)}

    def per_class(self, classes: list[str]) -> list[tuple[str, int, float | None]]:
        """(class, samples, top-1) for every label that is a target; top-1 is None for a class with no sample."""
        n = self.confusion.sum(dim=1).tolist()
        hits = self.confusion.diagonal().tolist()
        return [(classes[i], n[i], hits[i] / n[i] if n[i] else None) for i in range(len(classes))]

    def confused_pairs(self, classes: list[str], limit: int = 10) -> list[tuple[str, str, int, float]]:
        """The off-diagonal cells with the most samples: (true class, predicted class, count, share of the true
        class's samples), most first."""
        off = self.confusion.clone()
        off.fill_diagonal_(0)
        rows = self.confusion.sum(dim=1)
        values, flat = off.flatten().topk(min(limit, off.numel()))
        size = off.shape[1]
        return [(classes[i // size], classes[i % size], v, v / max(int(rows[i // size]), 1))
                for v, i in zip(values.tolist(), flat.tolist()) if v > 0]

    def class_metrics(self, prefix: str, classes: list[str]) -> dict[str, float]:
        """`PREFIX/class_top1/NAME` and `PREFIX/class_samples/NAME` of every class with samples."""
        out = {}
        for name, n, top1 in self.per_class(classes):
            if top1 is not None:
                key = metric_name(name)
                out[f"{prefix}/class_top1/{key}"] = top1
                out[f"{prefix}/class_samples/{key}"] = float(n)
        return out

    def to_json(self, prefix: str, classes: list[str]) -> str:
        return json.dumps({
            "metrics": self.metrics(prefix), "classes": classes,
            "per_class": [{"class": c, "samples": n, "top1": t} for c, n, t in self.per_class(classes)],
            "confusion": {"rows": "true label", "columns": "predicted label", "matrix": self.confusion.tolist()},
        }, indent=1, ensure_ascii=False) + "\n"

    def per_class_csv(self, classes: list[str]) -> str:
        return _csv([["class", "samples", "top1"]]
                    + [[c, n, "" if t is None else f"{t:.6f}"] for c, n, t in self.per_class(classes)])

    def confusion_csv(self, classes: list[str]) -> str:
        """The matrix with class names: rows true, columns predicted."""
        return _csv([["true \\ predicted", *classes]]
                    + [[c, *row] for c, row in zip(classes, self.confusion.tolist())])


def class_names(labels, num_classes: int) -> list[str]:
    """The name of every model output: the label map's class names, then `output K` for outputs no class has."""
    names = list(labels.classes) if labels is not None else []
    return names[:num_classes] + [f"output {k}" for k in range(len(names), num_classes)]


def metric_name(name: str) -> str:
    return _UNSAFE.sub("_", name)


def _csv(rows: list[list]) -> str:
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows(rows)
    return buf.getvalue()


def log_evaluation(tracker, ev: Evaluation, prefix: str, classes: list[str]) -> None:
    """evaluation/PREFIX.json (metrics, per class, matrix), PREFIX_per_class.csv, PREFIX_confusion.csv and the
    heat map PREFIX_confusion.png, as artifacts of the tracker's run."""
    tracker.log_text(ev.to_json(prefix, classes), f"evaluation/{prefix}.json")
    tracker.log_text(ev.per_class_csv(classes), f"evaluation/{prefix}_per_class.csv")
    tracker.log_text(ev.confusion_csv(classes), f"evaluation/{prefix}_confusion.csv")
    with tempfile.TemporaryDirectory(prefix="runner-confusion-") as tmp:
        png = Path(tmp) / f"{prefix}_confusion.png"
        draw_confusion(ev.confusion, classes, png, title=f"{prefix}: top-1 {100 * ev.metrics(prefix)[prefix + '/top1']:.1f}% "
                                                f"of {ev.samples} images")
        tracker.log_artifact(png, "evaluation")  # copied now: the folder may go
