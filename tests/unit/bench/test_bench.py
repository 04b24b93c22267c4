"""`runner bench` and `runner tune` on the CPU with tiny settings: files, MLflow runs, errors."""
import pytest
import yaml

from runner.bench.tune import Knob, Trial, search, tuned_yaml
from tests.fixtures.bench import SUITE
from tests.helpers import REPO, run_cli


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


def test_tune_on_a_gpu_searches_the_share_decoded_on_cpu(tiny):
    from runner.bench.tune import CPU_SHARE, TuneResult, _applies, as_overrides, baseline_settings, knobs
    from runner.run.validate import validate

    v = validate(tiny, accelerator="gpu")
    ks = knobs(v.loaded, v.target.accelerator)
    assert next(k for k in ks if k.key == CPU_SHARE).values == (0.0, 1.0, 0.6, 0.7, 0.8)
    # the stream's priority first: the share is searched on the better stream
    assert (ks[0].key, ks[0].values) == ("trainer.stream_priority", ("default", "high"))
    start = baseline_settings(v.loaded, v.target.accelerator, ks)
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
    hybrid = validate(tiny, ["pipelines.train.hybrid.share=0.6", "pipelines.train.hybrid.params.decode_device=cpu"],
                      accelerator="gpu")
    assert baseline_settings(hybrid.loaded, "gpu", ks)[CPU_SHARE] == 0.6
    # hw_decoder_load is not searched when the CPU decodes everything
    assert not _applies({CPU_SHARE: 1.0, "pipelines.train.params.hw_decoder_load": 0.99})
    assert _applies({CPU_SHARE: 0.7, "pipelines.train.params.hw_decoder_load": 0.99})
    assert [k.key for k in knobs(validate(tiny, accelerator="cpu").loaded, "cpu")] == [
        "pipelines.train.use", "data.num_threads", "data.prefetch"]


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


def test_a_suite_variable_left_unset_says_how_to_give_it(project, capsys):
    from tests.helpers import REPO

    path = REPO / "bench" / "suites" / "compact-cache.yaml"
    line = next(i for i, ln in enumerate(path.read_text().splitlines(), 1) if ln.startswith("vars:"))
    code, _, err = run_cli(["bench", "--suite", path], capsys)
    assert code == 2
    assert err.strip().endswith(f"compact-cache.yaml:{line}: vars.cache_root: '${{vars.cache_root}}' is not set: give it on "
                                "the command line, e.g. `runner bench --suite "
                                f"{REPO / 'bench' / 'suites' / 'compact-cache.yaml'} vars.cache_root=DIR`.")


SHIPPED_SUITES = sorted(p.stem for p in (REPO / "bench" / "suites").glob("*.yaml"))


def test_the_shipped_suites_are_the_ones_checked_below():
    assert SHIPPED_SUITES == ["compact-cache", "cpu", "gpu", "gpu-loaders", "gpu-overhead", "jpeg-compiled",
                              "recipe-cost", "recipe-parts", "shards", "shards-cpu", "stream-priority-eager"]


@pytest.mark.parametrize("name", SHIPPED_SUITES)
def test_every_shipped_suite_checks(name):
    from runner.bench.suitefile import load_suite
    from runner.run.validate import validate
    from tests.helpers import REPO

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
    from tests.helpers import REPO

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
    from tests.helpers import REPO

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
