"""Everything we ship is valid: experiments, pipelines, registry entries, the DSL's operator table."""
import pytest

from runner.dsl.catalog import load_catalog
from runner.optim.optimizers import optimizer_names
from runner.optim.schedules import SCHEDULES, lr_factor
from tests.helpers import REPO, run_cli

EXPERIMENTS = sorted((REPO / "experiments").glob("*.yaml"))


PIPELINES = sorted((REPO / "pipelines").glob("*.yaml"))


@pytest.mark.parametrize("path", EXPERIMENTS, ids=lambda p: p.name)
def test_experiment_validates(path, capsys, monkeypatch):
    monkeypatch.chdir(REPO)
    code, out, err = run_cli(["validate", path.relative_to(REPO)], capsys)
    assert code == 0, err
    assert out.startswith(f"OK experiments/{path.name}")


def test_the_compiled_experiment_splits_each_batch_and_validate_says_how(capsys, monkeypatch):
    monkeypatch.chdir(REPO)
    code, out, err = run_cli(["validate", "experiments/resnet50_dali_compiled.yaml"], capsys)
    assert code == 0, err
    text = " ".join(out.replace("│", " ").split())  # the table's cells, unwrapped
    assert "torch.compile" in text
    assert "102 of each batch" in text
    assert "high-priority CUDA stream" in text
    assert "154 of each batch with decode_device=cpu, from the smallest files" in text


@pytest.mark.parametrize("path", PIPELINES, ids=lambda p: p.name)
@pytest.mark.parametrize("target", ["cpu", "gpu"])
def test_pipeline_checks_on_both_targets(path, target, project):
    from runner.dsl.check import check_graph
    from runner.run.validate import validate

    role = "eval" if "eval" in path.stem else "train"
    exp = project / "experiments" / "p.yaml"
    train = path.stem if role == "train" else "imagenet_train"
    exp.write_text(f"pipelines: {{train: {{use: {train}}}, eval: {{use: imagenet_eval}}}}\n".replace(
        "imagenet_eval", path.stem if role == "eval" else "imagenet_eval"))
    v = validate(exp, accelerator="cpu")
    graph = v.graphs[role]
    assert [o.name for o in graph.outputs] == ["images", "labels"]
    if target == "gpu":
        from runner.config.load import load_experiment
        from runner.dsl.parse import parse_pipeline

        gpu = check_graph(parse_pipeline(load_experiment(exp).pipelines[role]), target="gpu")
        assert gpu.outputs[1].gpu  # labels travel to the GPU with the images
        assert gpu.steps[-1].node.device == "gpu"


def test_every_operator_resolves_to_a_dali_function():
    catalog = load_catalog()
    assert len(catalog.ops) > 100
    for name, op in catalog.ops.items():
        assert callable(catalog.fn(op)), name
        assert op.backends, name


def test_optimizers_and_schedules_are_registered():
    assert {"sgd", "momentum", "adamw", "lamb", "lars"} <= set(optimizer_names())  # timm.optim's factory
    assert SCHEDULES.names() == ["constant", "cosine", "linear", "onecycle", "step"]


@pytest.mark.parametrize("name", ["constant", "step", "cosine", "linear", "onecycle"])
def test_schedules_warm_up_linearly_then_follow_their_shape(name):
    from runner.config.sections import SchedulerConfig

    cfg = SchedulerConfig(name=name, warmup_epochs=1, warmup_start_factor=0.1, step_epochs=2, gamma=0.5)
    f = lr_factor(cfg, steps_per_epoch=10, total_steps=50)
    end_of_warmup = f(10)
    assert f(0) == pytest.approx(0.1 * end_of_warmup)
    assert f(5) == pytest.approx(0.55 * end_of_warmup)
    if name == "cosine":
        assert f(50) == pytest.approx(0.0) and f(25) == pytest.approx(0.5)
    if name == "step":
        assert f(19) == 1.0 and f(20) == 0.5 and f(40) == 0.25
    if name == "onecycle":
        assert max(f(s) for s in range(50)) == pytest.approx(1.0, abs=0.05)
    if name == "constant":
        assert f(49) == 1.0
