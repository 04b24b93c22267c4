"""Experiment files: typed sections, overrides, interpolation, includes, pipelines by name; errors pinned."""
import pytest

from runner.config.load import load_experiment
from runner.errors import ConfigError
from tests.helpers import run_cli, write


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
    assert cfg.optimizer.betas is None and cfg.optimizer.eps is None  # the optimizer's own
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
        "lr_reference_batch, momentum, nesterov, weight_decay, betas, eps, no_decay_on_norm_and_bias, layer_decay, kwargs.")


def test_unknown_top_level_key(project):
    assert error_of(write(project, "optimiser: {lr: 1}\n")).startswith(
        "experiments/exp.yaml:1: optimiser: unknown key. Did you mean 'optimizer'? Valid keys: name, description, "
        "seed, model, optimizer, scheduler, trainer, data, pipelines, tracking, launcher.")


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


def test_precedence_defaults_includes_file_command_line(project):
    # lowest first: schema defaults < include A < include B < the experiment file < the command line,
    # for scalars, nested mappings and lists
    write(project, """\
        seed: 1
        data: {num_threads: 1, prefetch: 5, synth: {classes: 11, per_class: 12}}
        optimizer: {betas: [0.1, 0.2], weight_decay: 0.5}
        trainer: {epochs: 1, max_steps: 4}
        tracking: {tags: {a: from_a, shared: from_a}}
        """, "a.yaml")
    write(project, """\
        seed: 2
        data: {num_threads: 2, synth: {classes: 21}}
        optimizer: {betas: [0.3, 0.4]}
        trainer: {epochs: 2}
        tracking: {tags: {b: from_b, shared: from_b}}
        """, "b.yaml")
    path = write(project, """\
        include: [a.yaml, b.yaml]
        seed: 3
        data: {num_threads: 3}
        optimizer: {betas: [0.5, 0.6]}
        tracking: {tags: {shared: from_file}}
        pipelines: {train: {use: imagenet_train}}
        """)
    loaded = load_experiment(path, ["data.prefetch=7", "optimizer.betas=[0.7,0.8]"])
    cfg = loaded.config
    assert (cfg.seed, cfg.data.num_threads, cfg.data.prefetch) == (3, 3, 7)
    assert (cfg.trainer.epochs, cfg.trainer.max_steps) == (2, 4)       # B over A; A where only A sets it
    assert cfg.optimizer.weight_decay == 0.5 and cfg.optimizer.eps is None  # A; the schema default
    assert (cfg.data.synth.classes, cfg.data.synth.per_class) == (21, 12)  # nested mappings merge key by key
    assert cfg.tracking.tags == {"a": "from_a", "b": "from_b", "shared": "from_file"}
    assert cfg.optimizer.betas == (0.7, 0.8)
    assert load_experiment(path).config.optimizer.betas == (0.5, 0.6)
    assert "include" not in loaded.resolved and loaded.resolved["data"]["synth"]["per_class"] == 12
    # an error names the file whose value won
    assert error_of(path, ["trainer.max_steps=-1"]).startswith("command line 'trainer.max_steps=-1': ")
    (project / "experiments" / "a.yaml").write_text("trainer: {max_steps: -1}\n")
    assert error_of(path).startswith("experiments/a.yaml:1: trainer.max_steps: -1 is out of range")


def test_a_list_replaces_the_included_list(project):
    write(project, "trainer: {devices: 1}\npipelines: {train: {steps: ['a = fn.readers.file()', 'b = a'], "
                   "outputs: [a, b, c]}}\n", "base.yaml")
    path = write(project, "include: base.yaml\npipelines: {train: {outputs: [images, labels]}}\n")
    loaded = load_experiment(path)
    assert loaded.config.pipelines.train.outputs == ["images", "labels"]  # not merged item by item
    assert loaded.config.pipelines.train.steps == ["a = fn.readers.file()", "b = a"]
    assert loaded.locate("pipelines.train.outputs") == (project / "experiments" / "exp.yaml", 2)
    assert loaded.locate("pipelines.train.steps[1]") == (project / "experiments" / "base.yaml", 2)


def test_nested_includes_three_levels_relative_to_the_file_that_names_them(project):
    (project / "experiments" / "base").mkdir()
    (project / "shared").mkdir()
    (project / "shared" / "root.yaml").write_text("seed: 1\ntrainer: {epochs: 1, max_steps: 1}\n"
                                                  "data: {num_threads: 1, prefetch: 1}\n")
    write(project, "include: ../../shared/root.yaml\ntrainer: {epochs: 2, max_steps: 2}\ndata: {num_threads: 2}\n",
          "base/mid.yaml")
    write(project, "include: [base/mid.yaml]\ntrainer: {epochs: 3}\n", "top.yaml")
    path = write(project, "include: [top.yaml]\nseed: 4\npipelines: {train: {use: imagenet_train}}\n")
    loaded = load_experiment(path)
    cfg = loaded.config
    assert (cfg.seed, cfg.trainer.epochs, cfg.trainer.max_steps, cfg.data.num_threads, cfg.data.prefetch) == \
        (4, 3, 2, 2, 1)
    file, line = loaded.locate("data.prefetch")
    assert (file.resolve(), line) == (project / "shared" / "root.yaml", 3)
    assert loaded.locate("trainer.epochs") == (project / "experiments" / "top.yaml", 2)


def test_a_file_included_twice_is_merged_once_at_its_first_position(project):
    # exp includes left and right, both include base: base, left, right, exp. Merging base again before
    # right would undo left's change to it.
    write(project, "data: {num_threads: 1, prefetch: 1}\ntrainer: {epochs: 1}\n", "base.yaml")
    write(project, "include: base.yaml\ndata: {num_threads: 2}\n", "left.yaml")
    write(project, "include: base.yaml\ntrainer: {epochs: 3}\n", "right.yaml")
    path = write(project, "include: [left.yaml, right.yaml]\npipelines: {train: {use: imagenet_train}}\n")
    cfg = load_experiment(path).config
    assert (cfg.data.num_threads, cfg.data.prefetch, cfg.trainer.epochs) == (2, 1, 3)


def test_an_include_cycle_names_the_chain(project, capsys):
    write(project, "include: [b.yaml]\n", "a.yaml")
    write(project, "seed: 1\ninclude: [c.yaml]\n", "b.yaml")
    write(project, "include: [../experiments/a.yaml]\n", "c.yaml")
    path = write(project, "include: [a.yaml]\n")
    message = ("experiments/c.yaml:1: include[0]: includes ../experiments/a.yaml, which leads back to this file: "
               "experiments/a.yaml -> experiments/b.yaml -> experiments/c.yaml -> experiments/a.yaml. A file cannot "
               "include itself, directly or through the files it includes; remove one of these includes.")
    assert error_of(path) == message
    code, _, err = run_cli(["validate", path], capsys)
    assert code == 2 and err.strip() == "error: " + message
    assert error_of(write(project, "include: exp.yaml\n")).startswith(
        "experiments/exp.yaml:1: include: includes exp.yaml, which leads back to this file: experiments/exp.yaml -> "
        "experiments/exp.yaml.")


def test_missing_include(project):
    path = write(project, "seed: 1\ninclude:\n  - base.yaml\n  - nope.yaml\n")
    write(project, "seed: 2\n", "base.yaml")
    assert error_of(path) == ("experiments/exp.yaml:4: include[1]: included file experiments/nope.yaml not found "
                              "(an include path is relative to the file that names it).")
    write(project, "include: sub/deeper.yaml\n", "base.yaml")
    assert error_of(path) == ("experiments/base.yaml:1: include: included file experiments/sub/deeper.yaml not found "
                              "(an include path is relative to the file that names it).")


@pytest.mark.parametrize("value", ["3", "{a: b.yaml}", "[a.yaml, 2]", "[[a.yaml]]"])
def test_include_must_name_files(project, value):
    write(project, "seed: 1\n", "a.yaml")
    assert error_of(write(project, f"seed: 1\ninclude: {value}\n")) == (
        "experiments/exp.yaml:2: include: include must be a file path or a list of file paths.")


def test_use_is_found_from_the_file_that_names_it(project):
    # an included file elsewhere names a pipeline beside it: found there, not beside the experiment
    (project / "lib" / "graphs").mkdir(parents=True)
    (project / "lib" / "graphs" / "mine.yaml").write_text(
        (project / "pipelines" / "imagenet_train.yaml").read_text())
    (project / "lib" / "base.yaml").write_text("pipelines: {train: {use: graphs/mine.yaml}}\n")
    loaded = load_experiment(write(project, "include: ../lib/base.yaml\n"))
    assert loaded.pipelines["train"].file.resolve() == project / "lib" / "graphs" / "mine.yaml"


def test_resolved_experiment_stands_alone(project):
    # what runs log and `runner export` writes: merged values, no include left
    from runner.run.snapshot import _dump, inline_pipelines

    write(project, "data: {num_threads: 2, prefetch: 4}\npipelines: {train: {use: imagenet_train}}\n", "base.yaml")
    path = write(project, "include: base.yaml\ndata: {num_threads: 3}\n")
    loaded = load_experiment(path)
    exported = write(project, _dump(inline_pipelines(loaded)), "exported.yaml")
    assert "include" not in exported.read_text()
    again = load_experiment(exported)
    assert (again.config.data.num_threads, again.config.data.prefetch) == (3, 4)
    assert again.pipelines["train"].steps == loaded.pipelines["train"].steps


def test_unknown_pipeline_and_param(project):
    path = write(project, "pipelines: {train: {use: imagenet_trian}}\n")
    assert "pipelines.train.use: pipeline 'imagenet_trian' not found (looked in" in error_of(path)
    assert "Did you mean 'imagenet_train'? Available pipelines: imagenet_eval, " in error_of(path)
    path = write(project, "pipelines: {train: {use: imagenet_train, params: {sise: 3}}}\n")
    assert error_of(path) == ("experiments/exp.yaml:1: pipelines.train.params.sise: pipeline 'imagenet_train' has no "
                              "parameter 'sise'. Did you mean 'size'? Its parameters: data_root, size, shuffle, "
                              "decode_device, hw_decoder_load.")


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
                          "'resnet50'? Valid models: alexnet, convnext_base,")
    code, _, err = run_cli(["validate", path, "model.name=resnet18", "optimizer.name=lambb"], capsys)
    assert "error: command line 'optimizer.name=lambb': optimizer.name: unknown optimizer 'lambb'. Did you mean " \
           "'lamb'? optimizer.name takes one of timm.optim's" in err


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


def test_validate_shows_the_models_constructor_arguments(project, capsys):
    path = write(project, "model:\n  name: timm/resnet18\n  num_classes: 10\n  kwargs: {drop_path_rate: 0.05, "
                          "drop_rate: 0.1}\npipelines: {train: {use: imagenet_train}}\n")
    code, out, err = run_cli(["validate", path, "trainer.accelerator=cpu"], capsys)
    assert code == 0, err
    assert "timm/resnet18 (10 classes), drop_path_rate 0.05, drop_rate 0.1" in " ".join(out.split())
