"""runner export / reproduce / compare / sweep against a real MLflow store holding a real (tiny) run."""
from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from mlflow import MlflowClient

from tests.conftest import REPO, run_cli, write_image_folder

TINY = """\
name: tiny
seed: 3
model: {{name: resnet18, num_classes: 3}}
optimizer: {{lr: 0.02}}
trainer: {{epochs: 1, log_every_n_steps: 1, deterministic: true}}
data: {{root: {root}, batch_size: 4}}
pipelines:
  train: {{use: imagenet_train, params: {{size: 32}}}}
  eval: {{use: imagenet_eval, params: {{size: 32, resize_shorter: 36}}}}
tracking: {{experiment: tiny}}
"""
IDENTITY = ("tracking.run_name", "tracking.uri", "tracking.tags")  # which run it is and where it was logged


@dataclass(frozen=True)
class Origin:
    root: Path
    uri: str
    run_id: str


def training_params(params: dict[str, str], *, pipelines: bool = True) -> dict[str, str]:
    return {k: v for k, v in params.items() if not k.startswith(IDENTITY)
            and (pipelines or not k.startswith("pipelines."))}


def loss_curve(uri: str, run_id: str, key: str = "train/loss") -> list[tuple[int, float]]:
    return sorted((m.step, m.value) for m in MlflowClient(uri).get_metric_history(run_id, key))


def runs_tagged(uri: str, tag: str, value: str) -> list:
    client = MlflowClient(uri)
    ids = [e.experiment_id for e in client.search_experiments()]
    return list(client.search_runs(ids, f"tags.`{tag}` = '{value}'"))


def compiled_body(uri: str, run_id: str, role: str) -> str:
    """The compiled pipeline's DALI calls (the header names the experiment file, which differs)."""
    from runner.tracking.store import read_artifact

    text = read_artifact(uri, run_id, f"pipelines/{role}_pipeline.py")
    assert text is not None, f"run {run_id} logged no pipelines/{role}_pipeline.py"
    return text[text.index("@pipeline_def"):]


@pytest.fixture(scope="module")
def origin(module_tmp, image_dataset) -> Origin:
    """One tiny deterministic run, logged in its own project folder's ./mlflow.db."""
    import torch

    from runner.cli import main

    root = module_tmp
    shutil.copytree(REPO / "pipelines", root / "pipelines")
    (root / "experiments").mkdir()
    (root / "experiments" / "tiny.yaml").write_text(TINY.format(root=image_dataset))
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(root)
        try:
            assert main(["launch", "experiments/tiny.yaml"]) == 0
        finally:
            torch.use_deterministic_algorithms(False)  # train.configure_torch sets it for the whole process
    uri = f"sqlite:///{root}/mlflow.db"
    client = MlflowClient(uri)
    (run,) = client.search_runs([client.get_experiment_by_name("tiny").experiment_id])
    return Origin(root=root, uri=uri, run_id=run.info.run_id)


@pytest.fixture
def elsewhere(tmp_path, monkeypatch) -> Path:
    """Another working directory: no pipelines/, no store."""
    import torch

    monkeypatch.chdir(tmp_path)
    yield tmp_path
    torch.use_deterministic_algorithms(False)


# ---- export -----------------------------------------------------------------------------------

@pytest.mark.slow
def test_export_round_trip(origin, elsewhere, capsys):
    code, _, err = run_cli(["export", origin.run_id[:10], "--uri", origin.uri, "-o", "shared.yaml"], capsys)
    assert code == 0, err
    config = yaml.safe_load((elsewhere / "shared.yaml").read_text())
    for role, size in (("train", 32), ("eval", 32)):
        spec = config["pipelines"][role]
        assert spec["use"] is None and spec["steps"][0].startswith("jpegs, labels = readers.file(")
        assert spec["params"]["size"] == size and spec["params"]["data_root"] is None  # bound to data.root at launch
    code, out, err = run_cli(["validate", "shared.yaml"], capsys)
    assert code == 0 and "inline" in out, err
    code, _, err = run_cli(["launch", "shared.yaml"], capsys)
    assert code == 0, err
    uri = f"sqlite:///{elsewhere}/mlflow.db"
    client = MlflowClient(uri)
    (new,) = client.search_runs([client.get_experiment_by_name("tiny").experiment_id])
    before, after = MlflowClient(origin.uri).get_run(origin.run_id).data.params, new.data.params
    # the same config: every param but the pipelines' (now inline) is the same, the data fingerprint too
    assert training_params(after, pipelines=False) == training_params(before, pipelines=False)
    assert after["data.fingerprint.train.sha256"] == before["data.fingerprint.train.sha256"]
    # the same pipelines: the same DALI calls with the same arguments
    for role in ("train", "eval"):
        assert compiled_body(uri, new.info.run_id, role) == compiled_body(origin.uri, origin.run_id, role)
    assert loss_curve(uri, new.info.run_id) == loss_curve(origin.uri, origin.run_id)


# ---- reproduce --------------------------------------------------------------------------------

@pytest.mark.slow
def test_reproduce_from_another_directory(origin, elsewhere, capsys):
    from runner.config.load import load_experiment

    code, out, err = run_cli(["reproduce", origin.run_id, "--uri", origin.uri], capsys)
    assert code == 0, err
    folder = elsewhere / "reproduced" / origin.run_id
    experiment = folder / "experiments" / "tiny.yaml"
    # `use:` finds the pinned copies first, not this checkout's pipelines/
    loaded = load_experiment(experiment)
    assert loaded.pipelines["train"].file.resolve() == (folder / "pipelines" / "imagenet_train.yaml").resolve()
    assert loaded.pipelines["eval"].file.resolve() == (folder / "pipelines" / "imagenet_eval.yaml").resolve()
    logged = {a.path for a in MlflowClient(origin.uri).list_artifacts(origin.run_id, "pipelines")}
    pinned_from_checkout = "did not log its train pipeline file; pinned this checkout's" in err
    assert pinned_from_checkout == ("pipelines/train.yaml" not in logged)  # the run's own copy wins when logged
    # logged to the store it came from, tagged with its origin; same params, same loss curve bit for bit
    assert not (elsewhere / "mlflow.db").exists()
    (new,) = runs_tagged(origin.uri, "runner.reproduces", origin.run_id)
    before = MlflowClient(origin.uri).get_run(origin.run_id).data.params
    assert training_params(new.data.params) == training_params(before)
    assert loss_curve(origin.uri, new.info.run_id) == loss_curve(origin.uri, origin.run_id)
    assert f"runner compare {origin.run_id} {new.info.run_id}" in out
    assert "data (" not in err


@pytest.mark.slow
def test_reproduce_warns_when_the_data_differs(origin, elsewhere, capsys):
    other = elsewhere / "other-data"
    write_image_folder(other / "train", classes=2, per_class=5, seed=7)
    write_image_folder(other / "val", classes=2, per_class=2, seed=8)
    before = len(runs_tagged(origin.uri, "runner.reproduces", origin.run_id))
    code, out, err = run_cli(["reproduce", origin.run_id, "--uri", origin.uri, f"data.root={other}", "--dry-run"],
                             capsys)
    assert code == 0, err
    assert "warning: this machine differs from the one run" in err
    train_row = next(line for line in err.splitlines() if "data (train)" in line)
    assert "24 files" in train_row and "3 classes" in train_row  # what the run read
    assert "10 files" in train_row and "2 classes" in train_row  # what it would read here
    assert "note: the data differs from what the run read (file names or sizes)" in err
    assert f"data.root={other}" in out and "to run it: runner launch reproduced/" in out
    assert len(runs_tagged(origin.uri, "runner.reproduces", origin.run_id)) == before  # a dry run trains nothing
    code, _, err = run_cli(["reproduce", origin.run_id, "--uri", origin.uri, "data.root=/nowhere", "--dry-run"],
                           capsys)
    assert code == 0 and "not found: /nowhere/train" in err


def test_reproduce_names_missing_stores_and_runs(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    code, _, err = run_cli(["reproduce", "abc123", "--uri", tmp_path / "none.db"], capsys)
    assert code == 2 and "no tracking store at" in err and "none.db" in err
    assert not (tmp_path / "none.db").exists()  # reading never creates an empty store


@pytest.mark.slow
def test_reproduce_an_unknown_run(origin, elsewhere, capsys):
    code, _, err = run_cli(["export", "ffff0000", "--uri", origin.uri], capsys)
    assert code == 2
    assert err.startswith(f"error: RUN_ID: run 'ffff0000' is not in {origin.uri} (its experiments: ")


# ---- compare ----------------------------------------------------------------------------------

@pytest.mark.slow
def test_compare_shows_exactly_the_changed_params_and_draws_curves(origin, elsewhere, capsys):
    from runner.repro.compare import differing_params
    from runner.tracking.store import get_run

    code, _, err = run_cli(["reproduce", origin.run_id, "--uri", origin.uri, "optimizer.lr=0.05",
                            "trainer.max_steps=3"], capsys)
    assert code == 0, err
    (changed,) = [r for r in runs_tagged(origin.uri, "runner.reproduces", origin.run_id)
                  if r.data.params["optimizer.lr"] == "0.05"]
    ids = [origin.run_id, changed.info.run_id]
    assert differing_params([get_run(origin.uri, i) for i in ids]) == ["optimizer.lr", "trainer.max_steps"]
    code, out, err = run_cli(["compare", *ids, "--uri", origin.uri, "--out", "cmp"], capsys)
    assert code == 0, err
    assert out.startswith("2 runs of tiny in 2 groups, by optimizer.lr, trainer.max_steps\n"
                          "  A = optimizer.lr=0.02 trainer.max_steps=None (1 run)\n"
                          "  B = optimizer.lr=0.05 trainer.max_steps=3 (1 run)\n"), out
    header = next(line for line in out.splitlines() if line.startswith("group "))
    assert header.split()[:5] == ["group", "id", "status", "time", "top-1"] and "img/s" in header
    row = next(line for line in out.splitlines() if changed.info.run_id[:8] in line)
    assert row.startswith("B ") and "FINISHED" in row
    assert "the spread over seeds is unknown with 1 run in" in out
    png = elsewhere / "cmp" / "compare.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 20_000
    assert changed.info.run_id[:8] in (elsewhere / "cmp" / "compare.md").read_text()


# ---- sweep ------------------------------------------------------------------------------------

@pytest.fixture
def tiny(project, image_dataset) -> Path:
    path = project / "experiments" / "tiny.yaml"
    path.write_text(TINY.format(root=image_dataset).replace("deterministic: true", "deterministic: false"))
    return path


@pytest.mark.slow
def test_sweep_runs_each_combination_under_one_parent(tiny, project, capsys):
    code, out, err = run_cli(["sweep", tiny, "optimizer.lr=0.01,0.02", "trainer.max_steps=2",
                              "trainer.eval_every_n_epochs=0"], capsys)
    assert code == 0, err
    uri = f"sqlite:///{project}/mlflow.db"
    (parent,) = runs_tagged(uri, "runner.sweep", "parent")
    assert parent.info.status == "FINISHED" and parent.data.params["sweep.runs"] == "2"
    children = sorted(runs_tagged(uri, "mlflow.parentRunId", parent.info.run_id), key=lambda r: r.info.run_name)
    assert [c.info.run_name for c in children] == ["lr=0.01", "lr=0.02"]
    assert [c.data.params["optimizer.lr"] for c in children] == ["0.01", "0.02"]
    assert all(c.data.params["trainer.max_steps"] == "2" and c.info.status == "FINISHED" for c in children)
    assert "2 runs of tiny in 2 groups, by optimizer.lr\n" in out  # the summary, compare's groups of the children
    code, out, err = run_cli(["compare", "--parent", parent.info.run_id, "--out", "cmp"], capsys)
    assert code == 0, err
    assert "2 runs of tiny in 2 groups, by optimizer.lr\n" in out and "lr=0.01" in out and "lr=0.02" in out
    code, out, err = run_cli(["compare", "--experiment", "tiny", "--out", "cmp"], capsys)
    assert code == 0 and "2 runs of tiny" in out  # the parent trains nothing: left out


def test_sweep_dry_run_prints_the_grid(tiny, project, capsys):
    code, out, err = run_cli(["sweep", tiny, "optimizer.lr=0.1,0.05", "data.batch_size=4,8", "trainer.epochs=3",
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
def test_sweep_mistakes_are_one_paragraph_naming_the_item(tiny, capsys, items, message):
    code, _, err = run_cli(["sweep", tiny, *items, "--dry-run"], capsys)
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


# ---- snapshots: what a run logged wins over this checkout -------------------------------------

def test_snapshot_pins_the_logged_pipeline_and_drops_identity_tags(project, image_dataset, tmp_path):
    """A run that logged pipelines/train.yaml (see docs/reproducibility.md, the logging hook) is pinned from
    it; identity tags (parent, origin) are not inherited; other tags are."""
    from omegaconf import OmegaConf

    from runner.config.load import load_experiment
    from runner.run.snapshot import inline_pipelines, write_snapshot
    from runner.tracking.store import get_run

    exp = project / "experiments" / "tiny.yaml"
    exp.write_text(TINY.format(root=image_dataset).replace(
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


def test_drift_lists_what_differs_from_the_runs_machine(tiny):
    """Versions, GPU, code and layout as the run's tags say, against this machine measured the same way."""
    import dataclasses

    from runner.machine import gpu_info
    from runner.repro.drift import machine_differences
    from runner.run import runinfo
    from runner.run.validate import validate
    from runner.tracking.store import RunRecord

    v = validate(tiny)
    here = {("runner.python" if k == "python" else k): val for k, val in runinfo.versions().items()}
    tags = {**here, **runinfo.git_state(), **gpu_info(), "runner.accelerator": v.target.accelerator,
            "runner.world_size": str(v.target.world)}
    same = RunRecord(run_id="0" * 32, name="r", experiment="tiny", status="FINISHED", start_ms=0, end_ms=1,
                     params={}, tags=tags, metric_keys=(), uri="sqlite:///x.db")
    assert machine_differences(same, v) == []
    other = dataclasses.replace(same, tags={**tags, "version.torch": "1.0.0", "gpu.model": "Some Other GPU",
                                            "runner.world_size": "64", "runner.torch_threads": "999"})
    diffs = {d.what: (d.run, d.here) for d in machine_differences(other, v)}
    assert diffs["torch"] == ("1.0.0", here["version.torch"])
    assert diffs["GPU model"] == ("Some Other GPU", gpu_info().get("gpu.model", "-"))
    assert diffs["processes"] == ("64", str(v.target.world))
    if v.target.accelerator == "cpu":  # the thread count decides CPU results only
        assert diffs["torch CPU threads"][0] == "999"


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
    (project / "experiments" / "t.yaml").write_text(TINY.format(root=tmp_path / "c48"))
    params = {**run_params("train", tmp_path / "c48" / "train"), **run_params("eval", tmp_path / "c48" / "val")}
    record = RunRecord(run_id="ab" * 16, name="r", experiment="tiny", status="FINISHED", start_ms=0, end_ms=1,
                       params=params, tags={}, metric_keys=(), uri="sqlite:///x.db")

    def here(root) -> list[tuple[str, str, str]]:
        v = validate("experiments/t.yaml", [f"data.root={root}"])
        return [(d.what, d.run, d.here) for d in cache_differences(record, v)]

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
    assert [(d.run, d.here) for d in cache_differences(original, v)] == [("-", cache(48, "train")),
                                                                         ("-", cache(48, "eval"))]
    assert cache_advice(original) == ("run cdcdcdcd read its train split from the original images, not a cache: "
                                      "point data.root=... at them to reproduce it.")
