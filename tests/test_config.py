"""Experiment files: typed sections, overrides, interpolation, includes, pipelines by name; errors pinned."""
import textwrap

import pytest

from runner.config import load_experiment
from runner.errors import ConfigError
from tests.conftest import run_cli


def write(project, text, name="exp.yaml"):
    path = project / "experiments" / name
    path.write_text(textwrap.dedent(text))
    return path


def error_of(path, overrides=()):
    with pytest.raises(ConfigError) as e:
        load_experiment(path, overrides)
    return str(e.value)


def test_defaults_and_types(project):
    loaded = load_experiment(write(project, "optimizer: {lr: 0.05}\ntrainer: {epochs: 3, devices: 2}\n"
                                            "pipelines: {train: {use: imagenet_train}}\n"))
    cfg = loaded.config
    assert cfg.optimizer.lr == 0.05 and isinstance(cfg.optimizer.lr, float)
    assert cfg.trainer.epochs == 3 and cfg.trainer.devices == 2
    assert cfg.optimizer.betas == (0.9, 0.999)
    assert loaded.pipelines["train"].name == "imagenet_train"


def test_unknown_key_has_file_line_and_suggestion(project):
    path = write(project, """\
        model:
          name: resnet18
        optimizer:
          lr_shedule: 3
        """)
    assert error_of(path) == (
        "experiments/exp.yaml:4: optimizer.lr_shedule: unknown key. Valid keys in optimizer: name, lr, "
        "lr_reference_batch, momentum, nesterov, weight_decay, betas, eps, no_decay_on_norm_and_bias.")


def test_unknown_top_level_key(project):
    assert error_of(write(project, "optimiser: {lr: 1}\n")).startswith(
        "experiments/exp.yaml:1: optimiser: unknown key. Did you mean 'optimizer'? Valid keys: name, description, "
        "seed, model, optimizer, scheduler, trainer, data, pipelines, tracking.")


@pytest.mark.parametrize("override,message", [
    ("optimizer.lr=-0.1", "command line 'optimizer.lr=-0.1': optimizer.lr: -0.1 is out of range; it must be "
                          "greater than 0."),
    ("data.batch_size=0", "command line 'data.batch_size=0': data.batch_size: 0 is out of range; it must be "
                          "at least 1."),
    ("trainer.epochs=two", "command line 'trainer.epochs=two': trainer.epochs: 'two' is not valid; expected an "
                           "integer."),
    ("trainer.devices=many", "trainer.devices: 'many' is not valid; expected an integer or one of: auto."),
    ("trainer.precision=fp8", "trainer.precision: 'fp8' is not valid; expected one of: fp32, bf16, fp16."),
    ("optimizer.betas=[0.9]", "optimizer.betas: [0.9] is not valid; expected a list of 2 values."),
    ("trainer.channels_last=maybe", "trainer.channels_last: 'maybe' is not valid; expected true or false."),
    ("optimizer", "'optimizer' is not an override; write key.path=value, for example optimizer.lr=0.05 or "
                  "trainer.max_steps=100."),
    ("optimizer..lr=1", "'optimizer..lr=1' is not an override; write key.path=value"),
])
def test_override_errors(project, override, message):
    path = write(project, "pipelines: {train: {use: imagenet_train}}\n")
    assert message in error_of(path, [override])


def test_overrides_win_and_parse_yaml_values(project):
    path = write(project, "optimizer: {lr: 0.1}\npipelines: {train: {use: imagenet_train}}\n")
    cfg = load_experiment(path, ["optimizer.lr=0.01", "optimizer.betas=[0.8,0.9]", "trainer.max_steps=7",
                                 "pipelines.train.params.size=160"])
    assert cfg.config.optimizer.lr == 0.01 and cfg.config.optimizer.betas == (0.8, 0.9)
    assert cfg.config.trainer.max_steps == 7
    assert cfg.pipelines["train"].params["size"] == 160
    assert cfg.resolved["optimizer"]["lr"] == 0.01


def test_interpolation_and_env(project, monkeypatch):
    monkeypatch.setenv("RUNNER_TEST_ROOT", "/datasets/imagenet")
    path = write(project, """\
        data:
          root: ${oc.env:RUNNER_TEST_ROOT}
          batch_size: 64
          eval_batch_size: ${data.batch_size}
        tracking: {experiment: "run-${model.name}"}
        pipelines: {train: {use: imagenet_train}}
        """)
    cfg = load_experiment(path).config
    assert cfg.data.root == "/datasets/imagenet" and cfg.data.eval_batch_size == 64
    assert cfg.tracking.experiment == "run-resnet50"


def test_bad_interpolation(project):
    path = write(project, "data:\n  root: ${data.rooot}\n")
    assert error_of(path).startswith("experiments/exp.yaml:2: data.root: cannot resolve interpolation:")


def test_yaml_syntax_error_has_line(project):
    path = write(project, "model:\n  name: resnet18\n optimizer: {lr: 1}\n")
    assert error_of(path).startswith("experiments/exp.yaml:3: YAML syntax error:")


def test_missing_experiment_file(project):
    assert error_of(project / "experiments" / "nope.yaml") == "experiments/nope.yaml: experiment file not found."


def test_includes_are_overrides(project):
    write(project, "data: {num_threads: 3}\npipelines: {train: {params: {hw_decoder_load: 0.99}}}\n", "tuned.yaml")
    path = write(project, """\
        include: [tuned.yaml]
        data: {num_threads: 8, batch_size: 32}
        pipelines: {train: {use: imagenet_train_fused}}
        """)
    loaded = load_experiment(path)
    assert loaded.config.data.num_threads == 3 and loaded.config.data.batch_size == 32
    assert loaded.pipelines["train"].params["hw_decoder_load"] == 0.99


def test_missing_include(project):
    path = write(project, "include: [nope.yaml]\n")
    assert error_of(path) == "experiments/nope.yaml: included file (from exp.yaml) not found."


def test_unknown_pipeline_and_param(project):
    path = write(project, "pipelines: {train: {use: imagenet_trian}}\n")
    assert "pipelines.train.use: pipeline 'imagenet_trian' not found (looked in" in error_of(path)
    assert "Did you mean 'imagenet_train'? Available pipelines: imagenet_eval, " in error_of(path)
    path = write(project, "pipelines: {train: {use: imagenet_train, params: {sise: 3}}}\n")
    assert error_of(path) == ("experiments/exp.yaml:1: pipelines.train.params.sise: pipeline 'imagenet_train' has no "
                              "parameter 'sise'. Did you mean 'size'? Its parameters: data_root, size, decode_device, "
                              "hw_decoder_load.")


def test_no_pipeline(project):
    path = write(project, "model: {name: resnet18}\n")
    assert error_of(path).startswith("experiments/exp.yaml: pipelines.train: no pipeline: set 'pipelines.train.use' "
                                     "to one of imagenet_eval, ")


def test_pipeline_not_needed_for_other_loaders(project):
    assert load_experiment(write(project, "data: {loader: synthetic}\n")).pipelines == {}


def test_registry_names_are_checked_with_lines(project, capsys):
    path = write(project, "model:\n  name: resnet_50\npipelines: {train: {use: imagenet_train}}\n")
    code, _, err = run_cli(["validate", path], capsys)
    assert code == 2
    assert err.startswith("error: experiments/exp.yaml:2: model.name: unknown model 'resnet_50'. Did you mean "
                          "'resnet50'? Valid models: convnext_tiny,")
    code, _, err = run_cli(["validate", path, "model.name=resnet18", "optimizer.name=adam"], capsys)
    assert err.startswith("error: command line 'optimizer.name=adam': optimizer.name: unknown optimizer 'adam'. "
                          "Did you mean 'adamw'? Valid optimizers: adamw, sgd.")


def test_gpu_demanded_on_cpu_machine(project, capsys):
    from runner.machine import visible_gpus

    if visible_gpus():
        pytest.skip("this machine has a GPU")
    path = write(project, "trainer:\n  accelerator: gpu\npipelines: {train: {use: imagenet_train}}\n")
    code, _, err = run_cli(["validate", path], capsys)
    assert code == 2
    assert err == ("error: experiments/exp.yaml:2: trainer.accelerator: the experiment asks for a GPU "
                   "(trainer.accelerator: gpu) but this machine has none that CUDA can use (NVML found no device, or "
                   "CUDA_VISIBLE_DEVICES hides them). Set trainer.accelerator=auto to fall back to the CPU, or run on "
                   "a GPU machine.\n")


def test_removal_overrides(project):
    path = write(project, "pipelines: {train: {use: imagenet_train_fused, params: {hw_decoder_load: 0.9}}}\n")
    loaded = load_experiment(path, ["~pipelines.train.params", "pipelines.train.use=imagenet_train_cache",
                                    "pipelines.train.params.size=160"])
    assert loaded.pipelines["train"].name == "imagenet_train_cache"
    assert loaded.pipelines["train"].params["size"] == 160
    assert error_of(path, ["~optimizer.nothing"]) == ("command line '~optimizer.nothing': optimizer.nothing: nothing "
                                                      "to remove: the key is not set.")


def test_mapping_values_are_typed(project):
    path = write(project, "pipelines: {train: {use: imagenet_train}}\ntracking: {tags: {team: 7}}\n")
    assert load_experiment(path).config.tracking.tags == {"team": "7"}
    assert load_experiment(path, ["tracking.tags[mlflow.parentRunId]=abc"]).config.tracking.tags[
        "mlflow.parentRunId"] == "abc"
    assert error_of(path, ["tracking.tags.mlflow.parentRunId=abc"]) == (
        "command line 'tracking.tags.mlflow.parentRunId=abc': tracking.tags.mlflow: {'parentRunId': 'abc'} is not "
        "valid; expected a string. A key with dots is written in brackets: tracking.tags[mlflow.parentRunId]=VALUE.")
