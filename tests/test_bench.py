"""`runner bench` and `runner tune` on the CPU with tiny settings: files, MLflow runs, errors."""
import json
import os
import subprocess
import sys

import pytest
import yaml
from mlflow import MlflowClient

from runner.bench.tune import Knob, Trial, search, tuned_yaml
from runner.config import load_experiment
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
    assert "| loader | configuration | loader-only img/s | train img/s | of ceiling | data wait | training thread busy / queued |" in md
    assert rows["dali"]["e2e"]["train_thread_busy_pct"] > 0 and rows["dali"]["e2e"]["train_thread_queued_pct"] >= 0
    assert "| synthetic | random tensors on the device (ceiling), 32x32 | - |" in md
    assert "tiny.yaml: 4 steps after 2 warm-up, batch 4" in out
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
    (["--modes", "e2e,fast"], "error: command line: --modes: unknown mode(s) fast; modes: loader, e2e, bare."),
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
    from runner.validate import validate

    v = validate(tiny, accelerator="gpu")
    ks = knobs(v)
    assert next(k for k in ks if k.key == CPU_SHARE).values == (0.0, 1.0, 0.6, 0.7, 0.8)
    start = baseline_settings(v, ks)
    assert start[CPU_SHARE] == 0.0  # imagenet_train decodes on the GPU as written
    expected = {0.0: {"pipelines.train.params.decode_device=mixed", "pipelines.train.hybrid=null"},
                1.0: {"pipelines.train.params.decode_device=cpu", "pipelines.train.hybrid=null"},
                0.7: {"pipelines.train.params.decode_device=mixed", "pipelines.train.hybrid.share=0.7",
                      "pipelines.train.hybrid.params.decode_device=cpu", "pipelines.train.hybrid.deal=smallest"}}
    for share, overrides in expected.items():
        assert overrides <= set(as_overrides({**start, CPU_SHARE: share}))
    hybrid = validate(tiny, as_overrides({**start, CPU_SHARE: 0.7}), accelerator="gpu").loaded.pipelines["train"].hybrid
    assert (hybrid.share, hybrid.params, hybrid.deal) == (0.7, {"decode_device": "cpu"}, "smallest")
    written = yaml.safe_load(tuned_yaml(TuneResult(baseline=Trial(start), best=Trial({**start, CPU_SHARE: 0.7})), "h",
                                        "tiny.yaml"))
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
