"""runner average: the float64 mean of known state dicts, and the command against a real MLflow store holding real
(tiny) runs: the last K and the best K kept checkpoints averaged, evaluated and logged as a run linked to the
source, and the refusals when a run kept too few."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from mlflow import MlflowClient

from tests.helpers import run_cli

# random batches on the CPU (no data to read): three epochs of two steps, a checkpoint each, all three kept; an
# EMA beside the weights; the best by eval/loss
KEPT = """\
name: tiny
seed: 1
model: {name: mobilenet_v3_small, num_classes: 2}
optimizer: {lr: 0.05}
trainer: {epochs: 3, log_every_n_steps: 2, checkpoint_keep: 3, ema: {decay: 0.5},
          checkpoint_best: {metric: eval/loss, mode: min}}
data: {loader: synthetic, image_size: 32, batch_size: 4, synth: {classes: 2, per_class: 4, eval_per_class: 4}}
tracking: {experiment: tiny}
"""


# one epoch, trainer.checkpoint_keep at its default: one checkpoint kept; and one that logs none to its store
FEW = """\
name: {name}
seed: 1
model: {{name: mobilenet_v3_small, num_classes: 2}}
trainer: {{epochs: 1, log_every_n_steps: 2, checkpoint_log: {log}}}
data: {{loader: synthetic, image_size: 32, batch_size: 4, synth: {{classes: 2, per_class: 4, eval_per_class: 4}}}}
tracking: {{experiment: {name}}}
"""


@dataclass(frozen=True)
class Runs:
    root: Path
    uri: str
    kept: str       # kept three checkpoints
    few: str        # kept one
    unlogged: str   # logged no checkpoint to its store


@pytest.fixture(scope="module")
def runs(module_tmp) -> Runs:
    from runner.cli import main

    root = module_tmp
    (root / "experiments").mkdir()
    (root / "experiments" / "tiny.yaml").write_text(KEPT)
    (root / "experiments" / "few.yaml").write_text(FEW.format(name="few", log="true"))
    (root / "experiments" / "unlogged.yaml").write_text(FEW.format(name="unlogged", log="false"))
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(root)
        for name in ("tiny", "few", "unlogged"):
            assert main(["launch", f"experiments/{name}.yaml"]) == 0
    uri = f"sqlite:///{root}/mlflow.db"
    client = MlflowClient(uri)
    ids = {name: client.search_runs([client.get_experiment_by_name(name).experiment_id])[0].info.run_id
           for name in ("tiny", "few", "unlogged")}
    return Runs(root=root, uri=uri, kept=ids["tiny"], few=ids["few"], unlogged=ids["unlogged"])


@pytest.fixture
def at_runs(runs, monkeypatch) -> Runs:
    monkeypatch.chdir(runs.root)
    return runs


def averages_of(runs: Runs, source: str) -> list:
    client = MlflowClient(runs.uri)
    return list(client.search_runs([client.get_run(source).info.experiment_id], f"tags.`runner.averages` = '{source}'",
                                   order_by=["attributes.start_time"]))


def stored_checkpoints(runs: Runs) -> list[dict]:
    """The three checkpoints the run kept in its store, oldest first, as files."""
    client = MlflowClient(runs.uri)
    folder = runs.root / "downloaded" / runs.kept
    index = json.loads(Path(client.download_artifacts(runs.kept, "checkpoints/index.json", str(folder))).read_text())
    assert len(index["recent"]) == 3
    return [torch.load(client.download_artifacts(runs.kept, name, str(folder)), map_location="cpu", weights_only=False)
            for name in index["recent"]]


def assert_mean(averaged: dict, states: list[dict]) -> None:
    """Floating tensors: the float64 mean cast back; integer ones: the newest state's."""
    assert list(averaged) == list(states[-1])
    for key, value in averaged.items():
        expected = states[-1][key]
        if expected.is_floating_point():
            total = states[0][key].double()
            for s in states[1:]:
                total = total + s[key].double()
            expected = (total / len(states)).to(expected.dtype)
        assert value.dtype == expected.dtype and torch.equal(value, expected), key


def test_last_2_averages_the_two_latest_checkpoints_into_a_run_linked_to_the_source(at_runs, capsys):
    from runner.run.validate import validate
    from runner.weights.init import plan_init
    from runner.weights.store import fetch_run_weights

    before = len(averages_of(at_runs, at_runs.kept))
    code, out, err = run_cli(["average", at_runs.kept, "--last", "2"], capsys)
    assert code == 0, err
    runs = averages_of(at_runs, at_runs.kept)
    assert len(runs) == before + 1
    run = runs[-1]
    assert run.data.tags["runner.evaluates"] == at_runs.kept
    source = MlflowClient(at_runs.uri).get_run(at_runs.kept)
    assert run.info.experiment_id == source.info.experiment_id and run.info.status == "FINISHED"
    assert run.info.run_name == f"avg-last2-{at_runs.kept[:8]}"
    stored = stored_checkpoints(at_runs)
    assert {k: v for k, v in run.data.params.items() if k.startswith("average.")} == {
        "average.rule": "last", "average.count": "2", "average.weights": "ema",
        "average.steps": f"{stored[1]['step']},{stored[2]['step']}", "average.epochs": "2,3",
        "average.checkpoints": f"checkpoints/step-{stored[1]['step']:07d}.pt,checkpoints/step-{stored[2]['step']:07d}.pt"}
    note = run.data.tags["mlflow.note.content"]
    assert note.startswith("Average of the last 2 kept checkpoints (epochs 2, 3; steps 4, 6; their EMA weights), in "
                           "float64 as timm's avg_checkpoints.py averages them. ")
    assert f"[{at_runs.kept}](#/experiments/{source.info.experiment_id}/runs/{at_runs.kept})" in note
    assert {"eval/top1", "eval/top5", "eval/loss"} <= set(run.data.metrics)
    # the run's checkpoint: the mean of the two checkpoints' EMA weights (the default when they hold them)
    weights = fetch_run_weights(run.info.run_id, at_runs.uri, dest=at_runs.root / "fetched")
    averaged = torch.load(weights, map_location="cpu", weights_only=False)
    assert averaged["run_id"] == run.info.run_id and averaged["averaged"]["run_id"] == at_runs.kept
    assert averaged["step"] == stored[2]["step"] and averaged["ema"] is None
    assert_mean(averaged["model"], [stored[1]["ema"], stored[2]["ema"]])
    assert "run " + at_runs.kept[:8] + ": average of the last 2 kept checkpoints (EMA weights)" in out
    assert f"checkpoints/step-{stored[1]['step']:07d}.pt" in out and "averaged" in out
    # runner evaluate and model.init take the averaged run as they take a trained one
    code, _, err = run_cli(["evaluate", run.info.run_id], capsys)
    assert code == 0, err
    client = MlflowClient(at_runs.uri)
    (evaluation,) = client.search_runs([run.info.experiment_id], f"tags.`runner.evaluates` = '{run.info.run_id}'")
    assert evaluation.data.metrics["eval/top1"] == run.data.metrics["eval/top1"]
    assert len(averages_of(at_runs, at_runs.kept)) == before + 1  # an evaluation of the average is no average
    v = validate("experiments/tiny.yaml", [f"model.init.source=run:{run.info.run_id}"])
    plan = plan_init(v.config.model, v.weights_place)
    assert len(plan.loaded) == plan.total


@pytest.mark.parametrize("args, mode, key", [([], "min", "ema"), (["--mode", "max", "--no-ema"], "max", "model")])
def test_best_2_picks_by_the_runs_checkpoint_metric(at_runs, capsys, args, mode, key):
    before = len(averages_of(at_runs, at_runs.kept))
    code, out, err = run_cli(["average", at_runs.kept, "--best", "2", *args], capsys)
    assert code == 0, err
    runs = averages_of(at_runs, at_runs.kept)
    assert len(runs) == before + 1
    run = runs[-1]
    stored = stored_checkpoints(at_runs)
    losses = [s["metrics"]["eval/loss"] for s in stored]
    chosen = sorted(sorted(range(3), key=lambda i: losses[i], reverse=mode == "max")[:2])  # by the metric recorded
    p = run.data.params
    assert (p["average.rule"], p["average.metric"], p["average.mode"], p["average.weights"]) == \
        ("best", "eval/loss", mode, key)  # trainer.checkpoint_best's metric, its mode unless --mode
    assert p["average.epochs"] == ",".join(str(stored[i]["epoch"]) for i in chosen)
    weights = torch.load(MlflowClient(at_runs.uri).download_artifacts(
        run.info.run_id, f"checkpoints/step-{stored[chosen[-1]]['step']:07d}.pt", str(at_runs.root / f"best-{mode}")),
        map_location="cpu", weights_only=False)
    assert_mean(weights["model"], [stored[i][key] for i in chosen])
    assert f"average of the best 2 kept checkpoints by eval/loss ({mode})" in out


def test_too_few_kept_checkpoints_name_the_run_and_what_to_set(at_runs, capsys):
    refusals = {
        ("average", at_runs.few, "--last", "2"):
            f"--last: run {at_runs.few} kept 1 checkpoint (epoch 1), fewer than the 2 that --last 2 averages. A run "
            "keeps its latest trainer.checkpoint_keep checkpoints (1 unless set), and its best by "
            "trainer.checkpoint_best, in its artifact store: set trainer.checkpoint_keep: 2 in the experiment and "
            "train it again.",
        ("average", at_runs.kept, "--best", "4"):
            f"--best: run {at_runs.kept} kept 3 checkpoints (epochs 1, 2, 3), fewer than the 4 that --best 4 averages. "
            "A run keeps its latest trainer.checkpoint_keep checkpoints (1 unless set), and its best by "
            "trainer.checkpoint_best, in its artifact store: set trainer.checkpoint_keep: 4 in the experiment and "
            "train it again.",
        ("average", at_runs.unlogged, "--last", "2"):
            f"--last: run {at_runs.unlogged} kept 1 checkpoint (epoch 1), fewer than the 2 that --last 2 averages. It "
            "logged no checkpoint to its artifact store (trainer.checkpoint_log: false), so only its last.pt and "
            f"best.pt in checkpoints/unlogged/{at_runs.unlogged}/ are left: set trainer.checkpoint_log: true and "
            "trainer.checkpoint_keep: 2 in the experiment and train it again.",
        ("average", at_runs.kept, "--best", "2", "--metric", "eval/tpo1"):
            f"--metric: none of the 3 checkpoints run {at_runs.kept} kept (epochs 1, 2, 3) recorded eval/tpo1; they "
            "recorded: epoch/data_wait_share, epoch/images_per_s, eval/loss, eval/samples, eval/top1, eval/top5, "
            "eval_ema/loss, eval_ema/samples, eval_ema/top1, eval_ema/top5. Did you mean 'eval/top1'?",
        ("average", at_runs.kept, "--last", "2", "--metric", "eval/loss"):
            "command line: --metric and --mode choose among the checkpoints for --best; --last takes the latest.",
        ("average", at_runs.kept, "--last", "2", "tracking.experiment=other"):
            "command line: 'tracking.experiment=other': the average is logged beside the run it averages (its store "
            "and experiment); pick the store with --uri.",
    }
    before = {run_id: len(averages_of(at_runs, run_id)) for run_id in (at_runs.few, at_runs.kept, at_runs.unlogged)}
    for args, expected in refusals.items():
        code, out, err = run_cli(list(args), capsys)
        assert code == 2, (args, out, err)
        assert "Traceback" not in err and err.count("error: ") == 1, err
        assert err == f"error: {expected}\n", (args, err)
    # an override is checked before anything is averaged (the valid keys it lists grow with the schema)
    code, _, err = run_cli(["average", at_runs.kept, "--last", "1", "trainer.epohcs=3"], capsys)
    assert code == 2
    assert err.startswith("error: command line 'trainer.epohcs=3': trainer.epohcs: unknown key. Did you mean "
                          "'epochs'?"), err
    assert not (at_runs.root / "averaged" / at_runs.kept / "last-1-ema").exists()
    assert {run_id: len(averages_of(at_runs, run_id)) for run_id in before} == before  # nothing was logged
