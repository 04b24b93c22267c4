"""`runner bench` and `runner tune` on the CPU with tiny settings: files, MLflow runs, errors."""
import json
import os
import subprocess
import sys

import pytest
import yaml
from mlflow import MlflowClient

from runner.config.load import load_experiment
from tests.fixtures.bench import SUITE
from tests.helpers import REPO, run_cli


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


def test_a_variant_that_fails_in_its_process_reports_why(tiny, project, capsys):
    # validation passes (cores are counted where the loader is built), the measuring process refuses
    code, out, err = run_cli(["bench", tiny, "--loaders", "dali", "--modes", "loader", "--warmup", "2", "--steps", "2",
                              "--window", "2", "--out", project / "b", "data.reserved_cores=4096"], capsys)
    assert code == 1, err + out  # the table and files are still written
    assert "error: dali (loader): command line 'data.reserved_cores=4096': data.reserved_cores: 4096 reserved " \
           "core(s) leave DALI's threads none: this process has " in err
    row = json.loads((project / "b" / "bench.json").read_text())["rows"][0]
    assert row["loader"] is None and row["errors"]["loader"].startswith("dali (loader): command line")


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
