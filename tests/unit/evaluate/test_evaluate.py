"""The evaluation report's numbers: per-class accuracy and the most confused pairs, read from known confusion
matrices. tests/e2e/test_evaluate.py runs runner evaluate on a finished run."""
from __future__ import annotations

import torch

from runner.evaluate.sums import Evaluation, class_names


def test_per_class_numbers_and_confused_pairs_come_from_the_matrix():
    confusion = torch.tensor([[5, 1, 0], [3, 2, 0], [0, 0, 0]])
    ev = Evaluation(loss_sum=5.5, top1=7, top5=11, samples=11, confusion=confusion)
    names = class_names(None, 3)
    assert names == ["output 0", "output 1", "output 2"]
    assert ev.per_class(names) == [("output 0", 6, 5 / 6), ("output 1", 5, 2 / 5), ("output 2", 0, None)]
    assert ev.confused_pairs(names) == [("output 1", "output 0", 3, 3 / 5), ("output 0", "output 1", 1, 1 / 6)]
    assert ev.metrics("eval_x") == {"eval_x/loss": 0.5, "eval_x/top1": 7 / 11, "eval_x/top5": 1.0,
                                    "eval_x/samples": 11.0}
    assert ev.confusion_csv(["a", "b", "c"]).splitlines() == ["true \\ predicted,a,b,c", "a,5,1,0", "b,3,2,0",
                                                             "c,0,0,0"]


def test_many_classes_print_the_most_confused_pairs_and_the_ends_of_the_per_class_table():
    from rich.console import Console

    from runner.evaluate.report import confusion_table, per_class_table

    k = 60
    confusion = torch.eye(k, dtype=torch.long) * 4
    confusion[7, 3] = 6  # class 7 is mostly taken for class 3
    confusion[7, 7] = 0
    confusion[1, 2] = 1
    ev = Evaluation(loss_sum=0.0, top1=int(confusion.diagonal().sum()), top5=0, samples=int(confusion.sum()),
                    confusion=confusion)
    names = [f"k{i}" for i in range(k)]
    console = Console(width=200, record=True)
    console.print(confusion_table("eval", ev, names))
    console.print(per_class_table("eval", ev, names))
    text = console.export_text()
    assert "eval: most confused pairs" in text
    rows = [line.split("│")[1:-1] for line in text.splitlines() if line.startswith("│")]
    assert [c.strip() for c in rows[0]] == ["k7", "k3", "6", "100.0%"]
    assert [c.strip() for c in rows[1]] == ["k1", "k2", "1", "20.0%"]
    assert "eval: top-1 per class, lowest and highest 25 of 60" in text
    assert [c.strip() for c in rows[2]] == ["k7", "6", "0.0%"]  # the lowest first
    assert len(rows) == 2 + 50
