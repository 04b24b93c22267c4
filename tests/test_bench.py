"""`runner bench` and `runner tune` on the CPU with tiny settings: files, MLflow runs, errors."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from mlflow import MlflowClient

from runner.bench.tune import Knob, Trial, search, tuned_yaml
from runner.config.load import load_experiment
from tests.conftest import run_cli
from tests.test_launch import TINY

pytestmark = pytest.mark.slow


@pytest.fixture
def tiny(project, image_dataset):
    path = project / "experiments" / "tiny.yaml"
    path.write_text(TINY.format(root=image_dataset))
    return path


def test_bench_writes_table_json_chart_and_mlflow_runs(tiny, project, capsys):
    code, out, err = run_cli(["bench", tiny, "--loaders", "synthetic,dali,cache", "--modes", "loader,e2e",
                              "--warmup", "2", "--steps", "4", "--window", "2", "--out", project / "b",
                              "pipelines.train.params.hw_decoder_load=0.9"], capsys)
    assert code == 0, err + out
    result = json.loads((project / "b" / "bench.json").read_text())
    rows = {r["variant"]: r for r in result["rows"]}
    assert rows["synthetic"]["loader"] is None  # nothing to load
    assert rows["synthetic"]["e2e"]["images_per_s"] == result["ceiling"] > 0
    assert rows["dali"]["loader"]["images_per_s"] > 0 and rows["dali"]["loader"]["shape"] == [4, 3, 32, 32]
    assert rows["dali"]["e2e"]["steps"] == 4 and 0 <= rows["dali"]["e2e"]["data_wait_share"] < 1
    # the cache variant swaps in the cache pipelines, dropping the JPEG pipeline's parameters
    assert rows["cache"]["loader"]["shape"] == [4, 3, 32, 32] and rows["cache"]["e2e"]["steps"] == 4
    assert (project / "b" / "bench.png").stat().st_size > 10_000
    md = (project / "b" / "bench.md").read_text()
    assert ("| loader | configuration | loader-only img/s | train img/s | of ceiling | data wait | host CPU busy | "
            "training thread busy / queued |") in md
    assert rows["dali"]["e2e"]["train_thread_busy_pct"] > 0 and rows["dali"]["e2e"]["train_thread_queued_pct"] >= 0
    assert 0 < rows["dali"]["e2e"]["cpu_busy_pct"] <= 100  # all cores of this machine, training and decoding
    assert "| synthetic | random tensors on the device (ceiling), 32x32 | - |" in md
    assert "tiny.yaml: 4 steps after 2 warm-up, batch 4" in out
    assert "loader-only" in out and "bare-loop" not in out  # no column for a mode that was not measured
    client = MlflowClient(f"sqlite:///{project}/mlflow.db")
    runs = client.search_runs([client.get_experiment_by_name("tiny").experiment_id])
    parent = next(r for r in runs if r.data.tags.get("runner.bench") == "parent")
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    assert sorted(r.data.tags["runner.bench.variant"] for r in children) == ["cache", "dali", "synthetic"]
    assert {a.path for a in client.list_artifacts(parent.info.run_id)} >= {"bench.json", "bench.png", "bench.md"}


def test_the_bare_loop_row_compares_runner_with_the_same_loader(tiny, project, capsys):
    code, out, err = run_cli(["bench", tiny, "--loaders", "synthetic,dali", "--modes", "e2e,bare", "--warmup", "2",
                              "--steps", "4", "--window", "2", "--out", project / "b", "tracking.enabled=false"], capsys)
    assert code == 0, err + out
    rows = {r["variant"]: r for r in json.loads((project / "b" / "bench.json").read_text())["rows"]}
    assert rows["synthetic"]["bare"] is None  # the ceiling has no loader to compare
    bare, e2e = rows["dali"]["bare"], rows["dali"]["e2e"]
    assert bare["steps"] == 4 and bare["images_per_s"] > 0 and 0 <= bare["data_wait_share"] < 1
    overhead = f"{100 * e2e['images_per_s'] / bare['images_per_s']:.1f}%"
    assert f" | {overhead} |" in (project / "b" / "bench.md").read_text()


def test_beside_the_loader_trains_the_ceilings_model_while_the_loader_runs(tiny, project, capsys):
    import csv

    from runner.console import percent

    code, out, err = run_cli(["bench", tiny, "--loaders", "synthetic,dali", "--modes", "e2e,beside", "--warmup", "2",
                              "--steps", "4", "--window", "2", "--out", project / "b", "tracking.enabled=false",
                              "pipelines.train.hybrid.share=0.5", "pipelines.train.hybrid.params.decode_device=cpu"],
                             capsys)
    assert code == 0, err + out
    result = json.loads((project / "b" / "bench.json").read_text())
    rows = {r["variant"]: r for r in result["rows"]}
    assert "beside" not in rows["synthetic"]["runs"]  # the ceiling is the model alone
    beside = rows["dali"]["beside"]
    # the model took 4 measured steps; the loader (both parts of the hybrid) drew batches beside it meanwhile
    assert beside["steps"] == 4 and beside["images_per_s"] > 0 and beside["loader_images_per_s"] > 0
    share = beside["images_per_s"] / rows["synthetic"]["e2e"]["images_per_s"]
    assert rows["dali"]["share_beside"]["median"] == pytest.approx(share)
    md = (project / "b" / "bench.md").read_text()
    assert md.splitlines()[-4].endswith("| beside the loader img/s | of ceiling beside |")
    assert md.splitlines()[-1].endswith(f"| {beside['images_per_s']:,.0f} | {percent(share)} |")
    lines = {r["mode"]: r for r in csv.DictReader((project / "b").glob("bench-*.csv").__next__().open())
             if r["loader"] == "dali"}
    assert float(lines["beside"]["ceiling_share_median"]) == pytest.approx(share, rel=1e-4)
    # the CSV keeps six decimals below 10 and one from 10 up
    loader_rate = beside["loader_images_per_s"]
    assert float(lines["beside"]["beside_loader_images_per_s_median"]) == \
        pytest.approx(loader_rate, abs=1e-6 if loader_rate < 10 else 0.05)


def test_a_hybrid_row_says_which_pipeline_the_loop_waited_for(tiny, project, capsys):
    import csv

    from runner.console import percent

    code, out, err = run_cli(["bench", tiny, "--loaders", "dali", "--modes", "e2e", "--warmup", "2", "--steps", "4",
                              "--window", "2", "--out", project / "b", "pipelines.train.hybrid.share=0.5",
                              "pipelines.train.hybrid.params.decode_device=cpu"], capsys)
    assert code == 0, err + out
    result = json.loads((project / "b" / "bench.json").read_text())
    e2e = result["rows"][0]["e2e"]
    train, copy = e2e["data_wait_share.train"], e2e["data_wait_share.train.hybrid"]
    assert 0 < train < 1 and 0 < copy < 1
    md = (project / "b" / "bench.md").read_text()
    assert f" | {percent(e2e['data_wait_share'])}: train {percent(train)}, train.hybrid {percent(copy)} | " in md
    line = next(csv.DictReader(next((project / "b").glob("bench-tiny-*.csv")).open()))
    assert (float(line["data_wait_share_train_median"]), float(line["data_wait_share_train.hybrid_max"])) == \
        (round(train, 6), round(copy, 6))
    client = MlflowClient(f"sqlite:///{project}/mlflow.db")
    child = next(r for r in client.search_runs([client.get_experiment_by_name("tiny").experiment_id])
                 if r.data.tags.get("runner.bench.variant") == "dali")
    history = client.get_metric_history(child.info.run_id, "loader/data_wait_share/train.hybrid")
    assert [m.step for m in history] == [2, 4, 6]  # one per window: the warm-up's and the measured two


def test_a_torchvision_row_on_other_images_than_the_ceiling_is_flagged(tiny, project, capsys):
    args = ["bench", tiny, "--loaders", "synthetic,torchvision", "--modes", "loader", "--warmup", "2", "--steps", "2",
            "--window", "2", "tracking.enabled=false", "data.torchvision.num_workers=0"]
    code, out, err = run_cli([*args, "--out", project / "b"], capsys)
    assert code == 0, err + out
    note = ("note: data.torchvision.train makes 224x224 images, the ceiling and the pipelines 32x32: the torchvision "
            "row trains on other images than the rest. Give data.torchvision.train the same crop to compare them.")
    assert note in " ".join((out + err).split())
    md = (project / "b" / "bench.md").read_text()
    assert "| random tensors on the device (ceiling), 32x32 |" in md
    assert "| torchvision DataLoader (PIL on CPU), 224x224 |" in md
    code, out, err = run_cli([*args, "--out", project / "c", 'data.torchvision.train=["RandomResizedCrop(32)", '
                                                          '"ToTensor()"]'], capsys)
    assert code == 0 and "data.torchvision.train makes" not in out + err
    assert "| torchvision DataLoader (PIL on CPU), 32x32 |" in (project / "c" / "bench.md").read_text()


HIDE_DALI = """\
import sys


class HideDali:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[:2] == ["nvidia", "dali"]:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)


sys.meta_path.insert(0, HideDali())
"""


def test_a_ceiling_bench_runs_without_dali_at_the_pipelines_image_size(tiny, project, tmp_path):
    (tmp_path / "hide").mkdir()
    (tmp_path / "hide" / "sitecustomize.py").write_text(HIDE_DALI)
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "hide")}
    args = ["--modes", "e2e", "--warmup", "2", "--steps", "4", "--window", "2", "tracking.enabled=false"]
    hidden = subprocess.run([sys.executable, "-m", "runner", "bench", tiny, "--loaders", "dali", *args], env=env,
                            capture_output=True, text=True)
    assert hidden.returncode == 2 and "NVIDIA DALI is not installed" in hidden.stderr  # DALI is hidden indeed
    proc = subprocess.run([sys.executable, "-m", "runner", "bench", tiny, "--loaders", "synthetic", "--out",
                           project / "b", *args], env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr + proc.stdout
    row = json.loads((project / "b" / "bench.json").read_text())["rows"][0]
    assert (row["variant"], row["e2e"]["steps"]) == ("synthetic", 4)
    assert "==== synthetic e2e tracking.enabled=false data.loader=synthetic data.image_size=32\n" in \
        (project / "b" / "bench.log").read_text()


@pytest.mark.parametrize("args,message", [
    (["--loaders", "dali,tf"], "error: command line: --loaders: unknown loader 'tf'. Loaders: synthetic, dali, "
                               "dali-cpu, cache, torchvision."),
    (["--warmup", "3", "--window", "2"], "error: command line: --window: --warmup (3) and --steps (300) must be "
                                         "multiples of --window (2)."),
    (["--modes", "e2e,fast"], "error: command line: --modes: unknown mode(s) fast; modes: loader, e2e, bare, beside."),
])
def test_bench_argument_errors(tiny, capsys, args, message):
    code, _, err = run_cli(["bench", tiny, *args], capsys)
    assert code == 2 and err.strip() == message


def test_search_keeps_only_clear_gains():
    speed = {("a", 1): 100, ("b", 1): 100.5, ("a", 2): 120, ("b", 2): 150}
    ks = [Knob("x", ("a", "b"), "x"), Knob("y", (1, 2), "y")]

    def evaluate(settings):
        return Trial(settings, {"images_per_s": speed[(settings["x"], settings["y"])]})

    result = search(ks, {"x": "a", "y": 1}, evaluate, max_trials=10, min_gain=0.01)
    # b (+0.5%) is noise, so y is searched from a: (a, 2) wins; (b, 2) is never tried; then the winner and the
    # baseline are measured again
    assert result.best.settings == {"x": "a", "y": 2}
    assert [t.settings for t in result.trials] == [{"x": "a", "y": 1}, {"x": "b", "y": 1}, {"x": "a", "y": 2},
                                                   {"x": "a", "y": 2}, {"x": "a", "y": 1}]
    assert [t.repeat for t in result.trials] == [False, False, False, True, True]
    assert result.gain == pytest.approx(0.2)
    text = tuned_yaml(result, "header line", "exp.yaml")
    assert text.startswith("# header line\n") and yaml.safe_load(text) == {"include": ["exp.yaml"], "x": "a", "y": 2}


def test_a_win_that_does_not_repeat_is_not_kept():
    runs = {"a": [100, 100], "b": [110, 92]}  # b's first run was a lucky one

    def evaluate(settings):
        return Trial(settings, {"images_per_s": runs[settings["x"]].pop(0)})

    result = search([Knob("x", ("a", "b"), "x")], {"x": "a"}, evaluate, max_trials=10, min_gain=0.01)
    assert result.best is result.baseline and result.gain == 0
    assert [t.images_per_s for t in result.trials[:2]] == [100, 101]  # means over both runs


def test_tune_writes_an_experiment_that_runs_the_tuned_setting(tiny, project, capsys):
    args = ["--max-trials", "2", "--warmup", "2", "--steps", "2", "--window", "2"]
    code, out, err = run_cli(["tune", tiny, *args, "data.prefetch=3", "trainer.max_steps=9"], capsys)
    assert code == 0, err + out
    tuned = project / "experiments" / "tiny.tuned.yaml"
    written = yaml.safe_load(tuned.read_text())
    assert written["include"] == ["tiny.yaml"] and set(written) == {"include", "pipelines", "data"}
    assert set(written["data"]) == {"num_threads", "prefetch"}
    header = tuned.read_text().splitlines()
    assert header[0] == "# runner tune experiments/tiny.yaml data.prefetch=3 trainer.max_steps=9"
    # data.prefetch is a tuned key (it replaces the tune's own override); trainer.max_steps is not
    command = "runner launch experiments/tiny.tuned.yaml trainer.max_steps=9"
    assert f"# Run it: {command}" in header and f"run the tuned setting: {command}" in out
    # the tuned keys resolve to the tuned values, the experiment's own keys are kept
    original = load_experiment(tiny)
    loaded = load_experiment(tuned)
    assert loaded.config.data.num_threads == written["data"]["num_threads"]
    assert loaded.config.data.prefetch == written["data"]["prefetch"]
    assert loaded.pipelines["train"].name == written["pipelines"]["train"]["use"]
    assert (loaded.config.name, loaded.config.data.batch_size, loaded.config.data.root, loaded.config.model) == \
        (original.config.name, original.config.data.batch_size, original.config.data.root, original.config.model)
    code, _, err = run_cli(["validate", tuned], capsys)
    assert code == 0, err

    # a second run replaces its own file and says so; a file someone else wrote is never replaced
    code, out, err = run_cli(["tune", tiny, *args], capsys)
    assert code == 0 and "(replacing the one an earlier runner tune wrote)" in out, err + out
    mine = project / "experiments" / "mine.yaml"
    mine.write_text("seed: 1\n")
    code, out, err = run_cli(["tune", tiny, *args, "-o", mine], capsys)
    assert code == 2 and err == ("error: command line: --output: experiments/mine.yaml exists and was not written by "
                                 "runner tune, so it is not replaced; name another file with -o/--output, or move "
                                 "that one away.\n")
    assert mine.read_text() == "seed: 1\n"
    code, out, err = run_cli(["tune", tiny, *args, "-o", tiny], capsys)
    assert code == 2 and "experiments/tiny.yaml is the experiment; the tuned file includes the experiment" in err
    # an experiment that includes a tuned file (as files tune wrote were once used) would include itself
    old_style = project / "experiments" / "old.yaml"
    old_style.write_text(tiny.read_text() + "include: [old.tuned.yaml]\n")
    (project / "experiments" / "old.tuned.yaml").write_text("# runner tune experiments/old.yaml\ndata: {prefetch: 2}\n")
    code, out, err = run_cli(["tune", old_style, *args], capsys)
    assert code == 2 and err == ("error: command line: --output: experiments/old.tuned.yaml is included by the "
                                 "experiment; the tuned file includes the experiment, so it must be another file: "
                                 "name one with -o/--output (or remove that include).\n")


def test_tune_output_elsewhere_includes_the_experiment_by_a_relative_path(tiny, project, capsys):
    (project / "out").mkdir()
    code, out, err = run_cli(["tune", tiny, "--max-trials", "1", "--warmup", "2", "--steps", "2", "--window", "2",
                              "-o", project / "out" / "t.yaml"], capsys)
    assert code == 0, err + out
    assert yaml.safe_load((project / "out" / "t.yaml").read_text())["include"] == ["../experiments/tiny.yaml"]
    assert load_experiment(project / "out" / "t.yaml").config.data.batch_size == load_experiment(tiny).config.data.batch_size


def test_tune_on_a_gpu_searches_the_share_decoded_on_cpu(tiny):
    from runner.bench.tune import CPU_SHARE, TuneResult, _applies, as_overrides, baseline_settings, knobs
    from runner.run.validate import validate

    v = validate(tiny, accelerator="gpu")
    ks = knobs(v)
    assert next(k for k in ks if k.key == CPU_SHARE).values == (0.0, 1.0, 0.6, 0.7, 0.8)
    # the stream's priority first: the share is searched on the better stream
    assert (ks[0].key, ks[0].values) == ("trainer.stream_priority", ("default", "high"))
    start = baseline_settings(v, ks)
    assert start["trainer.stream_priority"] == "default"
    assert "trainer.stream_priority=high" in as_overrides({**start, "trainer.stream_priority": "high"})
    assert start[CPU_SHARE] == 0.0  # imagenet_train decodes on the GPU as written
    expected = {0.0: {"pipelines.train.params.decode_device=mixed", "pipelines.train.hybrid=null"},
                1.0: {"pipelines.train.params.decode_device=cpu", "pipelines.train.hybrid=null"},
                0.7: {"pipelines.train.params.decode_device=mixed", "pipelines.train.hybrid.share=0.7",
                      "pipelines.train.hybrid.params.decode_device=cpu", "pipelines.train.hybrid.deal=smallest"}}
    for share, overrides in expected.items():
        assert overrides <= set(as_overrides({**start, CPU_SHARE: share}))
    hybrid = validate(tiny, as_overrides({**start, CPU_SHARE: 0.7}), accelerator="gpu").loaded.pipelines["train"].hybrid
    assert (hybrid.share, hybrid.params, hybrid.deal) == (0.7, {"decode_device": "cpu"}, "smallest")
    written = yaml.safe_load(tuned_yaml(TuneResult(baseline=Trial(start), best=Trial(
        {**start, CPU_SHARE: 0.7, "trainer.stream_priority": "high"})), "h", "tiny.yaml"))
    assert written["trainer"] == {"stream_priority": "high"}
    assert written["pipelines"]["train"]["hybrid"] == {"share": 0.7, "params": {"decode_device": "cpu"},
                                                       "deal": "smallest"}
    # the experiment as written, when it already splits the batch
    assert baseline_settings(validate(tiny, ["pipelines.train.hybrid.share=0.6",
                                             "pipelines.train.hybrid.params.decode_device=cpu"], accelerator="gpu"),
                             ks)[CPU_SHARE] == 0.6
    # hw_decoder_load is not searched when the CPU decodes everything
    assert not _applies({CPU_SHARE: 1.0, "pipelines.train.params.hw_decoder_load": 0.99})
    assert _applies({CPU_SHARE: 0.7, "pipelines.train.params.hw_decoder_load": 0.99})
    assert [k.key for k in knobs(validate(tiny, accelerator="cpu"))] == ["pipelines.train.use", "data.num_threads",
                                                                         "data.prefetch"]


def test_a_variant_that_fails_in_its_process_reports_why(tiny, project, capsys):
    # validation passes (cores are counted where the loader is built), the measuring process refuses
    code, out, err = run_cli(["bench", tiny, "--loaders", "dali", "--modes", "loader", "--warmup", "2", "--steps", "2",
                              "--window", "2", "--out", project / "b", "data.reserved_cores=4096"], capsys)
    assert code == 1, err + out  # the table and files are still written
    assert "error: dali (loader): command line 'data.reserved_cores=4096': data.reserved_cores: 4096 reserved " \
           "core(s) leave DALI's threads none: this process has " in err
    row = json.loads((project / "b" / "bench.json").read_text())["rows"][0]
    assert row["loader"] is None and row["errors"]["loader"].startswith("dali (loader): command line")


def test_a_chart_title_names_the_machine_and_the_overrides_wrapped():
    from runner.bench.report import chart_title
    from runner.bench.suite import BenchResult

    result = BenchResult(experiment="experiments/rn50.yaml", machine={"gpu.model": "NVIDIA H200"}, settings={},
                         rows=[], started="2026-12-03 07:43:56",
                         overrides=["trainer.compile=true", "pipelines.train.hybrid.share=0.8", "data.prefetch=3"])
    assert chart_title(result, width=40).splitlines() == [
        "rn50.yaml on NVIDIA H200 (2026-12-03 07:43:56)",
        "trainer.compile=true",
        "pipelines.train.hybrid.share=0.8",
        "data.prefetch=3"]
    assert chart_title(BenchResult(**{**result.__dict__, "overrides": [], "machine": {}})) == \
        "rn50.yaml on CPU (2026-12-03 07:43:56)"


# ---- --repeat and --suite


def test_the_median_and_range_of_repeated_runs_and_the_per_round_shares():
    from runner.bench.stats import Spread, median_result, ratios, spread

    assert spread([4700.0, 4650.0, None, 4720.0]) == Spread(4700.0, 4650.0, 4720.0, 3)
    assert spread([2.0, 4.0]) == Spread(3.0, 2.0, 4.0, 2)
    assert spread([None]) is None
    # each round's row over the same round's ceiling: 90/100, 99/110, and round 3's ceiling failed
    shares = ratios([{"images_per_s": 90.0}, {"images_per_s": 99.0}, {"images_per_s": 95.0}],
                    [{"images_per_s": 100.0}, {"images_per_s": 110.0}, None])
    assert shares == [0.9, 0.9, None]
    assert median_result([{"images_per_s": 3.0, "steps": 4, "shape": [4, 3]}, None,
                          {"images_per_s": 1.0, "steps": 4, "shape": [4, 3]},
                          {"images_per_s": 8.0, "steps": 4, "shape": [4, 3]}]) == \
        {"images_per_s": 3.0, "steps": 4, "shape": [4, 3], "runs": 3}


def _result(rows, repeat):
    from runner.bench.suite import BenchResult

    return BenchResult(experiment="s.yaml", overrides=[], machine={"gpu.model": "NVIDIA H200", "gpu.count": "1"},
                       settings={"warmup": 50, "steps": 200, "window": 25}, rows=rows, started="2026-12-04 10:00:00",
                       suite="gpu", software={"version.torch": "2.14.1+cu130", "version.dali": "2.4.0 (nvidia-dali-cuda130)"},
                       repeat=repeat, command="runner bench --suite s.yaml")


def test_each_row_is_divided_by_the_ceiling_of_its_own_trainer_settings(tiny):
    from runner.bench.report import markdown
    from runner.bench.suite import plan, rows_of
    from runner.bench.suitefile import Entry, Suite
    from runner.run.validate import validate

    entries = [Entry(name="eager", experiment=str(tiny), overrides=(), loaders=("dali", "dali-cpu")),
               Entry(name="compiled", experiment=str(tiny), overrides=("trainer.compile=true",), loaders=("dali",)),
               Entry(name="eager-again", experiment=str(tiny), overrides=("data.prefetch=3",), loaders=("dali",))]
    suite = Suite(name="t", entries=tuple(entries), repeat=2)
    jobs = plan(suite, [validate(e.experiment, list(e.overrides)) for e in entries])
    rows = {r.name: r for r in rows_of(jobs)}
    assert list(rows) == ["ceiling (eager)", "eager/dali", "eager/dali-cpu", "ceiling (compiled)", "compiled/dali",
                          "eager-again/dali"]
    assert {n: r.ceiling for n, r in rows.items() if not r.is_ceiling} == {
        "eager/dali": "ceiling (eager)", "eager/dali-cpu": "ceiling (eager)",
        "compiled/dali": "ceiling (compiled)", "eager-again/dali": "ceiling (eager)"}
    # each ceiling is measured once a round, with its entry's overrides
    assert [(j.row.name, j.overrides) for j in jobs if j.row.is_ceiling] == [
        ("ceiling (eager)", ("data.loader=synthetic", "data.image_size=32")),
        ("ceiling (compiled)", ("trainer.compile=true", "data.loader=synthetic", "data.image_size=32"))]
    runs = {"ceiling (eager)": [100, 120], "ceiling (compiled)": [200, 180], "compiled/dali": [190, 171],
            "eager/dali": [95, 108]}
    for name, values in runs.items():
        rows[name].runs = {"e2e": [{"images_per_s": float(x)} for x in values]}
    result = _result(list(rows.values()), repeat=2)
    assert result.shares(rows["compiled/dali"]) == [0.95, 0.95]
    assert result.shares(rows["eager/dali"]) == [0.95, 0.9]
    md = markdown(result)
    assert "| row | configuration | ceiling | train img/s | of ceiling (median of per-round ratios) |" in md
    assert "| compiled/dali | DALI, imagenet_train as configured | ceiling (compiled) | 180 (171-190) | " \
           "95.0% (95.0-95.0) |" in md
    assert "| eager/dali | DALI, imagenet_train as configured | ceiling (eager) | 102 (95-108) | " \
           "92.5% (90.0-95.0) |" in md


def test_the_csv_names_what_was_measured_and_holds_median_min_max(tmp_path):
    import csv

    from runner.bench.results import write_results
    from runner.bench.suite import Row

    settings = {"model": "resnet50", "batch": 256, "image": 224, "precision": "bf16", "channels_last": True,
                "compile": True, "compile_mode": "default", "accelerator": "gpu"}
    ceiling = Row("synthetic", "random tensors", entry="ceiling (compiled)", experiment="e.yaml", settings=settings,
                  is_ceiling=True, runs={"e2e": [{"images_per_s": 6700.0}, {"images_per_s": 6600.0},
                                                 {"images_per_s": 6800.0}]})
    ceiling.ceiling = ceiling.name
    row = Row("dali", "DALI", entry="compiled", experiment="e.yaml", overrides=["tracking.enabled=false"],
              settings=settings, ceiling=ceiling.name,
              runs={"e2e": [{"images_per_s": 6030.0, "data_wait_share": 0.02, "stream_wait_share": 0.12,
                             "gpu_util_pct": 90.0, "cpu_busy_pct": 97.0},
                            {"images_per_s": 6270.0, "data_wait_share": 0.01, "stream_wait_share": 0.05,
                             "gpu_util_pct": 93.0, "cpu_busy_pct": 88.0},
                            {"images_per_s": 6460.0, "data_wait_share": 0.03, "stream_wait_share": 0.08,
                             "gpu_util_pct": 95.0, "cpu_busy_pct": 91.0}]})
    csv_path, md_path = write_results(_result([ceiling, row], repeat=3), tmp_path, cores=16)
    assert csv_path.name == "bench-gpu-h200-torch2.14.1-dali2.4.0.csv"
    lines = list(csv.DictReader(csv_path.open()))
    assert lines[0]["entry"] == "ceiling (compiled)" and lines[0]["ceiling_share_median"] == ""
    got = lines[1]
    assert list(got)[:19] == ["suite", "entry", "loader", "experiment", "overrides", "ceiling", "model", "batch_size",
                              "image_size", "precision", "channels_last", "compile", "compile_mode", "accelerator",
                              "warmup", "steps", "mode", "n", "rounds"]
    assert {k: got[k] for k in ("entry", "loader", "ceiling", "mode", "n", "compile", "images_per_s_median",
                                "images_per_s_min", "images_per_s_max", "ceiling_share_median", "ceiling_share_min",
                                "ceiling_share_max", "gpu_util_pct_median", "data_wait_share_max",
                                "stream_wait_share_median", "stream_wait_share_min", "stream_wait_share_max",
                                "cpu_busy_pct_median", "cpu_busy_pct_min", "cpu_busy_pct_max")} == {
        "entry": "compiled", "loader": "dali", "ceiling": "ceiling (compiled)", "mode": "e2e", "n": "3",
        "compile": "True", "images_per_s_median": "6270.0", "images_per_s_min": "6030.0",
        "images_per_s_max": "6460.0", "ceiling_share_median": "0.95", "ceiling_share_min": "0.9",
        "ceiling_share_max": "0.95", "gpu_util_pct_median": "93.0", "data_wait_share_max": "0.03",
        "stream_wait_share_median": "0.08", "stream_wait_share_min": "0.05", "stream_wait_share_max": "0.12",
        "cpu_busy_pct_median": "91.0", "cpu_busy_pct_min": "88.0", "cpu_busy_pct_max": "97.0"}
    md = md_path.read_text()
    assert md.startswith("### bench: suite gpu on NVIDIA H200\n\n- machine: 1 x NVIDIA H200")
    assert "- software: torch 2.14.1+cu130, DALI 2.4.0 (nvidia-dali-cuda130)" in md
    assert "- command: `runner bench --suite s.yaml`" in md
    assert ("| compiled/dali | DALI | ceiling (compiled) | 6,270 (6,030-6,460) | 95.0% (90.0-95.0) | 93% (90-95) | "
            "2.0% (1.0-3.0) | 8.0% (5.0-12.0) | 91% (88-97) |") in md
    assert "| data wait | stream wait | host CPU busy |" in md


SUITE = """\
name: t
repeat: 2
warmup: 2
steps: 2
window: 2
overrides: [tracking.enabled=false]
entries:
  - name: eager
    experiment: {experiment}
    loaders: [dali]
    {extra}
"""


@pytest.mark.parametrize("extra,words,message", [
    ("loaderz: [cache]", [], "error: s.yaml:11: entries[0].loaderz: unknown key. Did you mean 'loaders'? An entry "
                             "takes: name, experiment, overrides, loaders, modes."),
    ("modes: [e2e, fast]", [], "error: s.yaml:11: entries[0].modes: unknown mode 'fast'. Modes: loader, e2e, bare, beside."),
    ("overrides: [optimizer.lr_shedule=1]", [], "error: s.yaml:8: entry 'eager': command line "
                                                "'optimizer.lr_shedule=1': optimizer.lr_shedule: unknown key."),
    ("overrides: ['data.root=${vars.root}']", [], "error: s.yaml:11: entries[0].overrides: '${vars.root}' names "
                                                    "no variable of this suite. Its variables: none."),
    ("", ["--loaders", "dali"], "error: command line: --loaders: the suite's entries name their loaders; --loaders "
                                "goes with one experiment."),
    ("", ["--entries", "eagr"], "error: command line: --entries: the suite has no entry 'eagr'. Did you mean "
                                "'eager'? Its entries: eager."),
    ("", ["--entries", ","], "error: command line: --entries: --entries names no entry; the suite's entries: eager."),
])
def test_a_bad_suite_file_is_one_paragraph_naming_its_line(tiny, project, capsys, extra, words, message):
    (project / "s.yaml").write_text(SUITE.format(experiment=tiny, extra=extra))
    code, out, err = run_cli(["bench", "--suite", "s.yaml", *words], capsys)
    assert code == 2, out
    assert err.strip().startswith(message) and "\n" not in err.strip() and "Traceback" not in err


def test_entries_go_with_a_suite(tiny, capsys):
    code, _, err = run_cli(["bench", tiny, "--entries", "eager"], capsys)
    assert code == 2
    assert err.strip() == "error: command line: --entries: --entries picks entries of a suite; it goes with --suite " \
                          "FILE.yaml."


def test_entries_measure_only_the_named_entries_with_their_ceiling(tiny, project, capsys):
    suite = SUITE.format(experiment=tiny, extra="") + (f"  - name: deeper\n    experiment: {tiny}\n"
                                                       "    overrides: [data.prefetch=3]\n    loaders: [dali]\n")
    (project / "s.yaml").write_text(suite.replace("repeat: 2", "repeat: 1"))
    code, out, err = run_cli(["bench", "--suite", "s.yaml", "--entries", "deeper", "--out", project / "b"], capsys)
    assert code == 0, err + out
    log = [ln.split(" tracking")[0] for ln in (project / "b" / "bench.log").read_text().splitlines()
           if ln.startswith("====")]
    assert log == ["==== ceiling (eager) e2e", "==== deeper/dali e2e"]
    result = json.loads((project / "b" / "bench.json").read_text())
    assert [r["name"] for r in result["rows"]] == ["ceiling (eager)", "deeper/dali"]
    assert "data.prefetch=3" in result["rows"][1]["overrides"]
    md = next((project / "b").glob("bench-t-*.md")).read_text()
    assert "- command: `runner bench --suite s.yaml --entries=deeper`" in md


def test_a_suite_variable_left_unset_says_how_to_give_it(project, capsys):
    from tests.conftest import REPO

    path = REPO / "bench" / "suites" / "compact-cache.yaml"
    line = next(i for i, ln in enumerate(path.read_text().splitlines(), 1) if ln.startswith("vars:"))
    code, _, err = run_cli(["bench", "--suite", path], capsys)
    assert code == 2
    assert err.strip().endswith(f"compact-cache.yaml:{line}: vars.cache_root: '${{vars.cache_root}}' is not set: give it on "
                                "the command line, e.g. `runner bench --suite "
                                f"{REPO / 'bench' / 'suites' / 'compact-cache.yaml'} vars.cache_root=DIR`.")


SHIPPED_SUITES = sorted(p.stem for p in (Path(__file__).resolve().parents[1] / "bench" / "suites").glob("*.yaml"))


def test_the_shipped_suites_are_the_ones_checked_below():
    assert SHIPPED_SUITES == ["compact-cache", "cpu", "gpu", "gpu-loaders", "gpu-overhead", "jpeg-compiled",
                              "recipe-cost", "recipe-parts", "shards", "shards-cpu", "stream-priority-eager"]


@pytest.mark.parametrize("name", SHIPPED_SUITES)
def test_every_shipped_suite_checks(name):
    from runner.bench.suitefile import load_suite
    from runner.run.validate import validate
    from tests.conftest import REPO

    words = {"compact-cache": ["vars.cache_root=/data/compact"], "jpeg-compiled": ["vars.data_root=/data/jpegs"],
             "stream-priority-eager": ["vars.data_root=/data/jpegs"]}
    suite = load_suite(REPO / "bench" / "suites" / f"{name}.yaml", [*words.get(name, []), "data.root=/d"])
    assert suite.warmup % suite.window == 0 and suite.steps % suite.window == 0
    for e in suite.entries:
        assert e.overrides[-1] == "data.root=/d"  # the command line's override comes last: it wins
        validate(REPO / e.experiment, list(e.overrides), accelerator="gpu", check_pipelines=False)
    if name == "compact-cache":
        assert "data.root=/data/compact" in suite.entries[0].overrides


def test_stream_priority_is_not_a_step_setting_so_every_placement_shares_one_ceiling():
    from runner.bench.suite import plan
    from runner.bench.suitefile import load_suite
    from runner.run.validate import validate
    from tests.conftest import REPO

    suite = load_suite(REPO / "bench" / "suites" / "jpeg-compiled.yaml", ["vars.data_root=/data/jpegs"])
    jobs = plan(suite, [validate(REPO / e.experiment, list(e.overrides), accelerator="gpu", check_pipelines=False)
                        for e in suite.entries])
    assert [j.row.name for j in jobs] == ["ceiling (compiled)", "shipped/dali", "share-0.5/dali", "share-0.4/dali",
                                          "share-0.25/dali", "gpu-decode/dali", "share-0.7/dali", "share-0.8/dali",
                                          "share-0.8-nice/dali", "share-0.8-default-priority/dali", "threads-16/dali",
                                          "share-0.7-threads-16/dali", "prefetch-5/dali", "threads-16-prefetch-5/dali",
                                          "deal-random/dali", "deal-largest/dali", "cpu-resize/dali",
                                          "cpu-resize-share-0.7/dali", "cpu-resize-normalize/dali",
                                          "no-antialias/dali", "hw-load-0.8/dali", "hw-load-0.6/dali",
                                          "deal-largest-share-0.5/dali", "hwc-fp16/dali", "hw-prealloc/dali"]
    assert [j.row.ceiling for j in jobs[1:]] == ["ceiling (compiled)"] * 24


def test_mix_and_ema_are_step_settings_so_each_recipe_is_measured_as_its_own_ceiling():
    from runner.bench.suite import plan
    from runner.bench.suitefile import load_suite
    from runner.run.validate import validate
    from tests.conftest import REPO

    suite = load_suite(REPO / "bench" / "suites" / "recipe-cost.yaml", [])
    jobs = plan(suite, [validate(REPO / e.experiment, list(e.overrides), accelerator="gpu", check_pipelines=False)
                        for e in suite.entries])
    synth = ("data.synth.classes=100", "data.synth.per_class=1280")
    assert [(j.row.name, j.row.is_ceiling, j.overrides[1:]) for j in jobs] == [
        ("plain (ceiling: eager, sgd, cross_entropy, mix: off, ema: off)", True, (*synth, "data.loader=synthetic")),
        ("mix-ema (ceiling: eager, sgd, cross_entropy, mix: mixup_alpha 0.2, cutmix_alpha 1.0, ema: on)", True,
         (*synth, "pipelines.train.mix.mixup_alpha=0.2", "pipelines.train.mix.cutmix_alpha=1.0",
          "trainer.ema.decay=0.9998", "data.loader=synthetic")),
        ("bce (ceiling: eager, sgd, bce (target_threshold 0.2), mix: off, ema: off)", True,
         (*synth, "trainer.loss.name=bce", "trainer.loss.target_threshold=0.2", "data.loader=synthetic")),
        ("lamb (ceiling: eager, lamb, cross_entropy, mix: off, ema: off)", True,
         (*synth, "optimizer.name=lamb", "optimizer.lr=0.008", "optimizer.weight_decay=0.02",
          "~optimizer.lr_reference_batch", "data.loader=synthetic"))]


def test_repeat_alternates_the_variants_round_by_round(tiny, project, capsys):
    code, out, err = run_cli(["bench", tiny, "--loaders", "synthetic,dali", "--modes", "e2e", "--repeat", "2",
                              "--warmup", "2", "--steps", "2", "--window", "2", "--out", project / "b",
                              "tracking.enabled=false"], capsys)
    assert code == 0, err + out
    log = [ln.split(" tracking")[0] for ln in (project / "b" / "bench.log").read_text().splitlines()
           if ln.startswith(("====", "----"))]
    assert log == ["---- round 1/2", "==== synthetic e2e", "==== dali e2e",
                   "---- round 2/2", "==== synthetic e2e", "==== dali e2e"]
    result = json.loads((project / "b" / "bench.json").read_text())
    rows = {r["variant"]: r for r in result["rows"]}
    dali = [r["images_per_s"] for r in rows["dali"]["runs"]["e2e"]]
    ceiling = [r["images_per_s"] for r in rows["synthetic"]["runs"]["e2e"]]
    shares = sorted(a / b for a, b in zip(dali, ceiling))
    assert rows["dali"]["share_by_round"] == [a / b for a, b in zip(dali, ceiling)]
    cell = f"{50 * (shares[0] + shares[1]):.1f}% ({100 * shares[0]:.1f}-{100 * shares[1]:.1f})"
    md = (project / "b" / "bench.md").read_text()
    assert f"| dali | DALI, imagenet_train as configured | {sum(dali) / 2:,.0f} ({min(dali):,.0f}-{max(dali):,.0f}) " \
           f"| {cell} |" in md
    assert "- command: `runner bench " in md and " --repeat 2 tracking.enabled=false`" in md
    assert "tiny.yaml: 2 steps after 2 warm-up, batch 4, median (min-max) of 2 rounds" in out
    assert "round 2/2  dali e2e: " in out
    csv_file = next((project / "b").glob("bench-tiny-cpu*-torch*.csv"))
    line = next(ln for ln in csv_file.read_text().splitlines()[1:] if ",dali," in ln)
    assert f",e2e,2,2,{round(sorted(dali)[0] / 2 + sorted(dali)[1] / 2, 1 if sum(dali) / 2 >= 10 else 6)}," in line


def test_the_cpu_suite_runs_end_to_end(project, capsys):
    from tests.conftest import REPO

    shutil_copy = __import__("shutil").copytree
    shutil_copy(REPO / "experiments", project / "experiments", dirs_exist_ok=True)
    shutil_copy(REPO / "bench", project / "bench", dirs_exist_ok=True)
    code, out, err = run_cli(["bench", "--suite", "bench/suites/cpu.yaml", "--repeat", "1", "--warmup", "2",
                              "--steps", "2", "--window", "2", "--out", project / "b",
                              "data.torchvision.num_workers=0"], capsys)
    assert code == 0, err + out
    result = json.loads((project / "b" / "bench.json").read_text())
    assert [r["name"] for r in result["rows"]] == ["ceiling (eager)", "dali/dali", "torchvision/torchvision"]
    assert all(r["e2e"]["images_per_s"] > 0 for r in result["rows"])
    assert result["rows"][1]["bare"]["steps"] == 2
    md = next((project / "b").glob("bench-cpu-cpu*-torch*.md")).read_text()
    assert "- command: `runner bench --suite bench/suites/cpu.yaml --repeat=1 --warmup=2 --steps=2 --window=2 " \
           "data.torchvision.num_workers=0`" in md
