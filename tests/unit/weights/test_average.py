"""runner average's arithmetic and choices: the float64 mean of known state dicts cast back, states that do not fit
refused, the best K picked by the run's recorded metric. tests/e2e/test_average.py runs the command on real runs."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from runner.errors import DataError
from runner.weights.average import Kept, Rule, average_state_dicts, choose, read_kept, with_defaults


def test_the_average_is_the_float64_mean_cast_back_and_the_newest_integers():
    g = torch.Generator().manual_seed(0)
    states = [{"w": torch.randn(4, 3, generator=g), "half": torch.randn(5, generator=g).half(),
               "bf": torch.randn(5, generator=g).bfloat16(), "big": torch.tensor([2.0 ** 24, 1.0]),
               "bn.num_batches_tracked": torch.tensor(n), "mask": torch.tensor([n % 2 == 0])}
              for n in (5, 10, 15)]
    states[1]["big"] = torch.tensor([1.0, 1.0])
    states[2]["big"] = torch.tensor([1.0, 2.0])
    out = average_state_dicts((f"s{i}", s) for i, s in enumerate(states))
    assert list(out) == list(states[0])
    for key in ("w", "half", "bf"):
        expected = ((states[0][key].double() + states[1][key].double() + states[2][key].double()) / 3)
        assert out[key].dtype == states[0][key].dtype
        assert torch.equal(out[key], expected.to(states[0][key].dtype)), key
    # summed in float32, 2**24 + 1 + 1 stays 2**24 (each 1 rounds away); in float64 the mean is exact
    assert out["big"][0].item() == 5592406.0
    assert out["big"][1] == torch.tensor(4 / 3, dtype=torch.float64).float()
    assert out["bn.num_batches_tracked"].dtype == torch.int64 and out["bn.num_batches_tracked"].item() == 15
    assert out["mask"].tolist() == [False]  # the newest's: 15 is odd
    assert out["w"] is not states[2]["w"] and out["bn.num_batches_tracked"] is not states[2]["bn.num_batches_tracked"]


def test_states_that_do_not_fit_are_refused():
    a = {"fc.weight": torch.zeros(3, 8), "fc.bias": torch.zeros(3)}
    with pytest.raises(DataError) as e:
        average_state_dicts([("step-2.pt", a), ("step-4.pt", {"fc.weight": torch.zeros(5, 8), "fc.bias": torch.zeros(5)})])
    assert e.value.message == ("step-4.pt does not fit step-2.pt: fc.weight is [5, 8] float32 there, [3, 8] float32 in "
                               "step-2.pt. Checkpoints of different models are never averaged.")
    with pytest.raises(DataError) as e:
        average_state_dicts([("step-2.pt", a), ("step-4.pt", {"fc.weight": torch.zeros(3, 8), "head.bias": torch.zeros(3)})])
    assert e.value.message == ("step-4.pt holds other weights than step-2.pt: 1 not in step-2.pt (head.bias), 1 missing "
                               "(fc.bias). Checkpoints of different models are never averaged.")
    with pytest.raises(DataError, match=r"^step-4.pt does not fit step-2.pt: fc.bias is \[3\] float16 there"):
        average_state_dicts([("step-2.pt", a), ("step-4.pt", {**a, "fc.bias": torch.zeros(3).half()})])


BEST_LOSS = {"trainer": {"checkpoint_best": {"metric": "eval/loss", "mode": "min"}}}


@pytest.mark.parametrize("config, metric, mode, expected", [
    ({}, None, None, ("eval/top1", "max")),                    # no trainer.checkpoint_best
    (BEST_LOSS, None, None, ("eval/loss", "min")),             # the run's metric and mode
    (BEST_LOSS, None, "max", ("eval/loss", "max")),            # --mode wins
    (BEST_LOSS, "eval_ema/loss", None, ("eval_ema/loss", "min")),  # another metric: a loss is lower-better
    (BEST_LOSS, "eval/top5", None, ("eval/top5", "max")),
])
def test_best_defaults_to_the_runs_checkpoint_metric(config, metric, mode, expected):
    rule = with_defaults(Rule("best", 2, metric, mode), config)
    assert (rule.metric, rule.mode) == expected


@pytest.mark.parametrize("values, count, mode, steps", [
    ([0.5, 0.7, 0.7, 0.6], 2, "max", [2, 3]),
    ([0.5, 0.7, 0.7, 0.6], 3, "max", [2, 3, 4]),
    ([0.5, 0.7, 0.7, 0.6], 1, "min", [1]),
    ([0.7, 0.5, 0.7], 1, "max", [3]),                          # a tie goes to the newer
    ([float("nan"), 0.5, 0.6], 2, "min", [2, 3]),              # a NaN is never the best
])
def test_best_picks_by_the_recorded_metric_oldest_first(values, count, mode, steps):
    kept = [Kept(name=f"step-{i}", path=Path(f"step-{i}.pt"), step=i, epoch=i, metrics={"eval/top1": v},
                 has_ema=False, config={}) for i, v in enumerate(values, 1)]
    chosen = choose(kept, Rule("best", count, "eval/top1", mode), "a" * 32, None)
    assert [k.step for k in chosen] == steps


def test_a_checkpoint_of_another_run_is_refused(tmp_path):
    torch.save({"run_id": "b" * 32, "step": 4, "model": {}}, tmp_path / "step-4.pt")
    with pytest.raises(DataError) as e:
        read_kept("checkpoints/step-0000004.pt", tmp_path / "step-4.pt", "a" * 32)
    assert str(e.value) == (f"RUN_ID: checkpoints/step-0000004.pt ({tmp_path}/step-4.pt) is a checkpoint of run "
                            f"{'b' * 32}, not of run {'a' * 32}: checkpoints of different runs are never averaged.")
