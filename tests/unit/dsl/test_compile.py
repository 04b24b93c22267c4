"""The DSL compiles to the same DALI pipeline a person would write by hand: same tensors, bit for bit."""
import importlib.util
import textwrap

import numpy as np
import pytest

from runner.dsl.compile import PipelineArgs, build_pipeline
from runner.run.validate import validate
from tests.helpers import run_cli

MEAN = [0.485 * 255, 0.456 * 255, 0.406 * 255]


STD = [0.229 * 255, 0.224 * 255, 0.225 * 255]


def hand_written(data_dir, args: PipelineArgs):
    """The PyTorch + DALI article's pipeline as written there, placed on the CPU, with the runner's sharding."""
    from nvidia.dali import fn, pipeline_def, types

    @pipeline_def
    def create_dali_pipeline(data_dir, crop_size=32):
        images, labels = fn.readers.file(file_root=data_dir, random_shuffle=True, name="Reader",
                                         shard_id=0, num_shards=1, pad_last_batch=True)
        images = fn.decoders.image(images, device="cpu", output_type=types.RGB)
        images = fn.random_resized_crop(images, size=(crop_size, crop_size))
        images = fn.crop_mirror_normalize(images, dtype=types.FLOAT, output_layout="CHW", mean=MEAN, std=STD,
                                          mirror=fn.random.coin_flip(probability=0.5))
        return images, labels

    pipe = create_dali_pipeline(data_dir=str(data_dir), **args.as_dict())
    pipe.build()
    return pipe


def batches(pipe, n):
    out = []
    for _ in range(n):
        images, labels = pipe.run()
        out.append((np.array(images.as_tensor()), np.array(labels.as_tensor())))
    return out


ARGS = PipelineArgs(batch_size=5, num_threads=2, device_id=None, seed=1234)


def test_seed_pipeline_matches_hand_written_dali(seed_experiment):
    path, data = seed_experiment
    v = validate(path, [f"pipelines.train.params.data_root={data}"], accelerator="cpu")
    ours = batches(build_pipeline(v.graphs["train"], ARGS), 6)
    theirs = batches(hand_written(data, ARGS), 6)
    for (a_img, a_lab), (b_img, b_lab) in zip(ours, theirs):
        assert a_img.dtype == np.float32 and a_img.shape == (5, 3, 32, 32)
        assert np.array_equal(a_img, b_img)
        assert np.array_equal(a_lab, b_lab)
    # and the augmentations are really random: batches differ
    assert not np.array_equal(ours[0][0], ours[1][0])


def test_compiled_source_runs_and_gives_the_same_tensors(seed_experiment, tmp_path, capsys):
    path, data = seed_experiment
    out_file = tmp_path / "seed_pipeline.py"
    code, _, err = run_cli(["compile", path, f"pipelines.train.params.data_root={data}", "data.batch_size=5",
                            "data.num_threads=2", "seed=7", "-o", out_file], capsys)
    assert code == 0, err
    source = out_file.read_text()
    assert "@pipeline_def\ndef train_pipeline(" in source
    assert 'fn.decoders.image(jpegs, device="cpu", output_type=types.RGB)' in source
    spec = importlib.util.spec_from_file_location("seed_pipeline", out_file)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.PIPELINE_ARGS["batch_size"] == 5 and module.PIPELINE_ARGS["device_id"] is None
    emitted = module.train_pipeline(**module.PIPELINE_ARGS)
    emitted.build()
    v = validate(path, [f"pipelines.train.params.data_root={data}", "data.batch_size=5", "seed=7"],
                 accelerator="cpu")
    ours = build_pipeline(v.graphs["train"], PipelineArgs(**module.PIPELINE_ARGS))
    for (a_img, a_lab), (b_img, b_lab) in zip(batches(ours, 4), batches(emitted, 4)):
        assert np.array_equal(a_img, b_img) and np.array_equal(a_lab, b_lab)


def test_gpu_placement_is_emitted_as_written(seed_experiment, capsys):
    path, _ = seed_experiment
    code, out, err = run_cli(["compile", path, "trainer.devices=1"], capsys)
    assert code == 0
    v = validate(path, accelerator="gpu")
    from runner.dsl.emit import emit_source

    source = emit_source(v.graphs["train"], ARGS, origin="x")
    assert 'fn.decoders.image(jpegs, device="mixed", output_type=types.RGB)' in source
    assert "return images, labels.gpu()" in source
    assert "Placement: GPU" in source


@pytest.mark.parametrize("pipeline", ["imagenet_train_randaugment", "imagenet_train_trivialaugment",
                                      "imagenet_train_timm"])
def test_auto_augment_policies_compile_with_conditionals(project, image_dataset, pipeline):
    (project / "experiments" / "aa.yaml").write_text(textwrap.dedent(f"""\
        data: {{root: {image_dataset}, batch_size: 4}}
        pipelines: {{train: {{use: {pipeline}, params: {{size: 24}}}}}}
        """))
    v = validate(project / "experiments" / "aa.yaml", accelerator="cpu")
    graph = v.graphs["train"]
    assert graph.conditionals
    images, labels = batches(build_pipeline(graph, ARGS.__class__(batch_size=4, num_threads=1, device_id=None,
                                                                   seed=3)), 1)[0]
    assert images.shape == (4, 3, 24, 24)


def test_reader_sharding_is_injected(project, image_dataset):
    (project / "experiments" / "s.yaml").write_text(f"data: {{root: {image_dataset}}}\n"
                                                   "pipelines: {train: {use: imagenet_train}}\n")
    from runner.config.load import load_experiment
    from runner.dsl.check import check_graph
    from runner.dsl.parse import parse_pipeline

    loaded = load_experiment(project / "experiments" / "s.yaml")
    graph = check_graph(parse_pipeline(loaded.pipelines["train"]), target="cpu", rank=2, world=4, seed=9)
    reader = graph.steps[0].node
    kwargs = {k: getattr(v, "value", None) for k, v in reader.kwargs}
    assert kwargs["shard_id"] == 2 and kwargs["num_shards"] == 4 and kwargs["pad_last_batch"] is True
    assert kwargs["shuffle_after_epoch_seed"] == 9 and kwargs["name"] == "Reader"
    assert graph.reader_name == "Reader"
    assert set(reader.injected) == {"name", "shard_id", "num_shards", "pad_last_batch", "shuffle_after_epoch_seed"}


ARITHMETIC = [
    # (step as written, how runner compile prints it): Python's precedence kept, constants folded
    "a = (images - labels) - (images - 1)",
    "a = images - labels - images // 2 % 3",
    "a = (images ** 2) ** labels + images ** labels ** 2",
    "a = -(images ** 2) + (-images) ** 2 - -images",
    "a = (images > labels) == (images < 3)",
    "a = (images | 1) & (labels ^ True) | ~images << 1",
    "a = math.clamp(images * (1 - $size), -(2 * $size), 255 / (images + 1))",
    "a = fn.rotate(images, angle=fn.random.uniform(range=[-10, 10]) * 2 + -labels)",
]


@pytest.mark.parametrize("step", ARITHMETIC)
def test_arithmetic_prints_as_written(project, capsys, step):
    """`runner compile` prints each expression so that Python reads it back as the same tree."""
    import ast

    (project / "experiments" / "a.yaml").write_text(textwrap.dedent(f"""\
        pipelines:
          train:
            params: {{data_root: /d, size: 3}}
            steps:
              - jpegs, labels = readers.file(file_root=$data_root)
              - images = decoders.image(jpegs)
              - '{step}'
              - images = resize(a, size=8)
            outputs: [images, labels]
        """))
    code, out, err = run_cli(["compile", "experiments/a.yaml", "trainer.accelerator=cpu"], capsys)
    assert code == 0, err
    printed = next(line.strip() for line in out.splitlines() if line.strip().startswith("a = "))
    written = step.replace("$size", "size")
    assert ast.dump(ast.parse(printed)) == ast.dump(ast.parse(written)), printed


def test_arithmetic_runs_where_its_operands_are(project, capsys):
    """As DALI places it: on the GPU when any operand is there (DALI copies the CPU ones), else on the CPU."""
    (project / "experiments" / "g.yaml").write_text(textwrap.dedent("""\
        pipelines:
          train:
            params: {data_root: /d}
            steps:
              - jpegs, labels = readers.file(file_root=$data_root)
              - images = decoders.image(jpegs, device="mixed")
              - scale = fn.random.uniform(range=[0.5, 1.5]) * 2
              - images = images * scale - labels
              - images = crop_mirror_normalize(images, dtype=FLOAT, output_layout="CHW", mean=scale - 1)
            outputs: [images, labels]
        """))
    graph = validate(project / "experiments" / "g.yaml", accelerator="gpu").graphs["train"]
    devices = [s.node.device for s in graph.steps]
    assert devices == ["cpu", "mixed", "cpu", "gpu", "gpu"]
    on_cpu = validate(project / "experiments" / "g.yaml", accelerator="cpu").graphs["train"]
    assert [s.node.device for s in on_cpu.steps] == ["cpu"] * 5
