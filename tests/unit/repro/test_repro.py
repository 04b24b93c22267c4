"""runner export / reproduce / sweep without training: missing stores and runs named, the sweep's grid and its
mistakes, the snapshot a reproduction pins, drift's advice. tests/e2e/test_repro.py works on a finished run."""
from __future__ import annotations

import shutil

import pytest
import yaml
from mlflow import MlflowClient

from tests.helpers import REPO, TINY_DETERMINISTIC, run_cli


def test_reproduce_names_missing_stores_and_runs(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    code, _, err = run_cli(["reproduce", "abc123", "--uri", tmp_path / "none.db"], capsys)
    assert code == 2 and "no tracking store at" in err and "none.db" in err
    assert not (tmp_path / "none.db").exists()  # reading never creates an empty store


def test_sweep_dry_run_prints_the_grid(tiny_epoch, project, capsys):
    code, out, err = run_cli(["sweep", tiny_epoch, "optimizer.lr=0.1,0.05", "data.batch_size=4,8", "trainer.epochs=3",
                              "--dry-run"], capsys)
    assert code == 0, err
    assert "tiny.yaml: 4 runs, each with trainer.epochs=3" in out
    rows = [line.split("│")[1:4] for line in out.splitlines() if line.startswith("│")]
    assert [[c.strip() for c in r] for r in rows] == [["1", "0.1", "4"], ["2", "0.1", "8"], ["3", "0.05", "4"],
                                                      ["4", "0.05", "8"]]
    assert not (project / "mlflow.db").exists()


@pytest.mark.parametrize("items, message", [
    (["optimizer.lrr=0.1,0.2"], "command line 'optimizer.lrr=0.1,0.2': optimizer.lrr: unknown key. Did you mean 'lr'?"),
    (["optimizer.lr=0.1,abc"], "command line 'optimizer.lr=0.1,abc': optimizer.lr: 'abc' is not valid; expected a number."),
    (["optimizer.lr=0.1,"], "command line 'optimizer.lr=0.1,': optimizer.lr: value 2 of this sweep list is empty"),
    (["optimizer.lr=,"], "command line 'optimizer.lr=,': optimizer.lr: value 1 of this sweep list is empty"),
    (["optimizer.lr=0.1,0.1"], "command line 'optimizer.lr=0.1,0.1': optimizer.lr: the sweep list names 0.1 more than once"),
    (["optimizer.lr=0.1,0.2", "optimizer.lr=0.3"], "command line 'optimizer.lr=0.3': optimizer.lr: given twice (also by "
                                                   "'optimizer.lr=0.1,0.2')"),
    (["optimizer.lr=0.1"], "command line: nothing to sweep: no override has a comma-separated list"),
    (["model.name=resnet18,resnet99"], "command line 'model.name=resnet18,resnet99': model.name: unknown model "
                                       "'resnet99'."),
])
def test_sweep_mistakes_are_one_paragraph_naming_the_item(tiny_epoch, capsys, items, message):
    code, _, err = run_cli(["sweep", tiny_epoch, *items, "--dry-run"], capsys)
    assert code == 2
    assert err.startswith(f"error: {message}") and err.count("\n") == 1, err


@pytest.mark.parametrize("text, parts", [
    ("0.1,0.2", ["0.1", "0.2"]),
    ("[0.9,0.99],[0.8,0.9]", ["[0.9,0.99]", "[0.8,0.9]"]),
    ("{a: 1, b: 2},{a: 3}", ["{a: 1, b: 2}", "{a: 3}"]),
    ("'x, y',z", ["'x, y'", "z"]),
    ("resnet18", ["resnet18"]),
])
def test_sweep_lists_split_at_top_level_commas(text, parts):
    from runner.sweep.grid import split_list

    assert split_list(text) == parts


def test_sweep_grid_varies_the_last_axis_fastest():
    from runner.sweep.grid import grid, parse_sweep

    axes, plain = parse_sweep(["a.x=1,2", "b=3", "c.y=p,q,r"])
    assert plain == ["b=3"]
    assert [c.overrides for c in grid(axes)][:4] == [["a.x=1", "c.y=p"], ["a.x=1", "c.y=q"], ["a.x=1", "c.y=r"],
                                                     ["a.x=2", "c.y=p"]]


def test_snapshot_pins_the_logged_pipeline_and_drops_identity_tags(project, image_dataset, tmp_path):
    """A run that logged pipelines/train.yaml (see docs/reproducibility.md, the logging hook) is pinned from
    it; identity tags (parent, origin) are not inherited; other tags are."""
    from omegaconf import OmegaConf

    from runner.config.load import load_experiment
    from runner.run.snapshot import inline_pipelines, write_snapshot
    from runner.tracking.store import get_run

    exp = project / "experiments" / "tiny.yaml"
    exp.write_text(TINY_DETERMINISTIC.format(root=image_dataset).replace(
        "tracking: {experiment: tiny}",
        "tracking: {experiment: tiny, tags: {team: vision, mlflow.parentRunId: abc, runner.reproduces: def}}"))
    resolved = load_experiment(exp).resolved
    uri = f"sqlite:///{tmp_path}/store.db"
    client = MlflowClient(uri)
    run_id = client.create_run(client.create_experiment("tiny"), run_name="logged").info.run_id
    client.log_text(run_id, OmegaConf.to_yaml(resolved), "experiment.yaml")
    logged = (REPO / "pipelines" / "imagenet_train.yaml").read_text().replace(
        "description: >-", "description: >-\n  As the run logged it.")
    client.log_text(run_id, logged, "pipelines/train.yaml")
    client.set_tag(run_id, "runner.experiment_file", "experiments/tiny.yaml")

    snap = write_snapshot(get_run(uri, run_id), tmp_path / "snap")
    assert (tmp_path / "snap" / "pipelines" / "imagenet_train.yaml").read_text() == logged
    assert list(snap.from_checkout) == ["eval"]
    config = yaml.safe_load(snap.experiment.read_text())
    assert config["tracking"]["tags"] == {"team": "vision"}
    inlined = inline_pipelines(load_experiment(snap.experiment))
    assert inlined["pipelines"]["train"]["description"].startswith("As the run logged it.")


def test_documented_commands_parse():
    """Every `runner ...` line in docs/reproducibility.md's code blocks is a valid command line."""
    from runner.cli import build_parser

    text = (REPO / "docs" / "reproducibility.md").read_text()
    blocks = text.split("```")[1::2]
    lines = [line.strip() for block in blocks for line in block.splitlines() if line.strip().startswith("runner ")]
    assert len(lines) >= 2
    parser = build_parser()
    for line in lines:
        args, extra = parser.parse_known_args(line.split()[1:])
        assert all("=" in e for e in extra), line


def test_drift_names_the_cache_a_run_read_and_how_to_make_it_here(project, image_dataset, tmp_path):
    """A run on a JPEG cache logs its settings, encoder and source; reproduce compares them with the cache data.root
    names here: none for a copy of it elsewhere, a row per split for another size or the original images, and a
    note with the command that makes the run's cache."""
    from runner.commands.reproduce import cache_advice
    from runner.data.jpeg_cache import build_jpeg_cache
    from runner.data.manifest import run_params
    from runner.data.scan import fingerprint
    from runner.repro.drift import cache_differences
    from runner.run.validate import validate
    from runner.tracking.store import RunRecord

    for side in (48, 32):
        build_jpeg_cache(image_dataset, tmp_path / f"c{side}", max_side=side, quality=90, workers=1)
    shutil.copytree(tmp_path / "c48", tmp_path / "moved" / "c48")
    (project / "experiments" / "t.yaml").write_text(TINY_DETERMINISTIC.format(root=tmp_path / "c48"))
    params = {**run_params("train", tmp_path / "c48" / "train"), **run_params("eval", tmp_path / "c48" / "val")}
    record = RunRecord(run_id="ab" * 16, name="r", experiment="tiny", status="FINISHED", start_ms=0, end_ms=1,
                       params=params, tags={}, metric_keys=(), uri="sqlite:///x.db")

    def here(root) -> list[tuple[str, str, str]]:
        v = validate("experiments/t.yaml", [f"data.root={root}"])
        return [(d.what, d.run, d.here) for d in cache_differences(record, v.config.data)]

    assert here(tmp_path / "c48") == [] and here(tmp_path / "moved" / "c48") == []
    settings = {k: params[f"data.cache.train.{k}"] for k in ("pillow", "libjpeg")}
    source = {role: fingerprint(image_dataset / split) for role, split in (("train", "train"), ("eval", "val"))}

    def cache(side: int, role: str) -> str:
        return (f"JPEG cache, longer side <= {side} px, quality 90 (Pillow {settings['pillow']}, {settings['libjpeg']})"
                f", of a source of {source[role]['files']} files, sha256 {source[role]['sha256'][:12]}")

    assert here(tmp_path / "c32") == [("cache (train)", cache(48, "train"), cache(32, "train")),
                                      ("cache (eval)", cache(48, "eval"), cache(32, "eval"))]
    assert here(image_dataset) == [("cache (train)", cache(48, "train"), "-"), ("cache (eval)", cache(48, "eval"), "-")]
    assert cache_advice(record) == (
        f"run abababab trained on a {cache(48, 'train')}. To reproduce it, make that cache here from the same source "
        f"(`runner data fingerprint SRC/train` gives sha256 {source['train']['sha256'][:12]}...): `runner data cache "
        "SRC DST --format jpeg --max-side 48 --quality 90`, then pass data.root=DST; the same Pillow and libjpeg-turbo "
        "write the same files.")
    original = RunRecord(run_id="cd" * 16, name="r", experiment="tiny", status="FINISHED", start_ms=0, end_ms=1,
                         params={}, tags={}, metric_keys=(), uri="sqlite:///x.db")
    v = validate("experiments/t.yaml")
    assert [(d.run, d.here) for d in cache_differences(original, v.config.data)] == [("-", cache(48, "train")),
                                                                         ("-", cache(48, "eval"))]
    assert cache_advice(original) == ("run cdcdcdcd read its train split from the original images, not a cache: "
                                      "point data.root=... at them to reproduce it.")
