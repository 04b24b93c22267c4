"""NVIDIA's image classification and augmentation examples, pasted into the DSL line for line (tests/corpus/*.yaml),
validate, compile, and give bit for bit the batches of the same lines run as direct fn.* calls (tests/corpus/direct.py)."""
import importlib.util
import textwrap
import warnings
from pathlib import Path

import numpy as np
import pytest

from runner.dsl.compile import PipelineArgs, build_pipeline
from runner.run.validate import validate
from tests.corpus import direct
from tests.helpers import REPO, run_cli, write_image_folder

CORPUS = sorted((REPO / "tests" / "corpus").glob("*.yaml"))


@pytest.fixture(scope="module")
def images(tmp_path_factory) -> Path:
    return write_image_folder(tmp_path_factory.mktemp("corpus") / "train", classes=2, per_class=5, seed=4)


def outputs(pipe, iterations: int = 2) -> list[list[np.ndarray]]:
    """Each output of each iteration, sample by sample (augmented images differ in shape)."""
    out = []
    for _ in range(iterations):
        for batch in pipe.run():
            out.append([np.array(batch[i]) for i in range(len(batch))])
    return out


def assert_same(ours, theirs) -> None:
    assert len(ours) == len(theirs)
    for a_batch, b_batch in zip(ours, theirs):
        assert len(a_batch) == len(b_batch)
        for a, b in zip(a_batch, b_batch):
            assert a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b)


@pytest.mark.parametrize("path", CORPUS, ids=[p.stem for p in CORPUS])
def test_example_validates_compiles_and_matches_direct_calls(path, images, tmp_path, capsys):
    over = [f"pipelines.train.params.data_root={images}", "data.batch_size=4", "data.num_threads=1", "seed=11",
            "trainer.accelerator=cpu"]
    code, _, err = run_cli(["validate", path, *over], capsys)
    assert code == 0, err
    out_file = tmp_path / f"{path.stem}.py"
    code, _, err = run_cli(["compile", path, *over, "-o", out_file], capsys)
    assert code == 0, err
    spec = importlib.util.spec_from_file_location(path.stem, out_file)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    args = module.PIPELINE_ARGS
    assert args["device_id"] is None and args["seed"] == 11
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # DALI's deprecated names, as the example writes them
        theirs = getattr(direct, path.stem)(data_dir=str(images), **args)
        theirs.build()
        reference = outputs(theirs)
    emitted = module.train_pipeline(**args)
    emitted.build()
    assert_same(outputs(emitted), reference)
    built = build_pipeline(validate(path, over[:-1], accelerator="cpu").graphs["train"], PipelineArgs(**args))
    assert_same(outputs(built), reference)
    # the augmentations are really random and the batches really the images: two iterations differ
    assert any(a.shape != b.shape or not np.array_equal(a, b) for a, b in zip(reference[0], reference[2]))


def test_deprecated_names_compile_to_the_current_ones(images, capsys):
    path = REPO / "tests" / "corpus" / "resnet50_train.yaml"
    code, out, err = run_cli(["compile", path, f"pipelines.train.params.data_root={images}",
                              "trainer.accelerator=cpu"], capsys)
    assert code == 0, err
    assert err.count("note: DALI has deprecated") == 1
    assert "note: DALI has deprecated fn.image_decoder_random_crop (now fn.decoders.image_random_crop); the " \
           "pipelines are compiled with the current names." in err
    assert "fn.decoders.image_random_crop(" in out and "image_decoder" not in out
    assert "    labels = labels  # moved to the CPU (no GPU)" in out


def test_gpu_copy_steps_are_kept_on_a_gpu(images):
    v = validate(REPO / "tests" / "corpus" / "efficientnet_train_none.yaml",
                 [f"pipelines.train.params.data_root={images}"], accelerator="gpu")
    from runner.dsl.emit import emit_source

    source = emit_source(v.graphs["train"], PipelineArgs(batch_size=2, num_threads=1, device_id=0, seed=1), origin="x")
    assert "    images = images.gpu()\n    rng = fn.random.coin_flip(probability=0.5)\n" in source
    assert "    output = fn.flip(images, horizontal=rng)\n" in source  # placed on the GPU by its input, as DALI does


NOT_EXPRESSIBLE = [
    # (NVIDIA's example, the step as it writes it, the one-sentence reason)
    ("EfficientNet dali.py: the policy chosen by a Python if",
     'if automatic_augmentation == "autoaugment": output = auto_augment.auto_augment_image_net(images)',
     "Python control flow (if, for, while, or DALI's conditionals with enable_conditionals) cannot be a step, "
     "since each step is one operator call; choose per sample with an argument input such as "
     "mirror=random.coin_flip(probability=0.5), or an auto_aug policy."),
    ("EfficientNet dali.py: training_pipe_external_source",
     'filepaths = fn.external_source(name="images", no_copy=True)',
     "external_source calls back into Python code, and a pipeline step cannot name code; read the data with a "
     "reader (readers.file, readers.numpy, ...) and transform it with DALI operators."),
    ("warp.ipynb: matrices from Python through python_function",
     "transform = fn.python_function(images, function=random_transform)",
     "python_function calls back into Python code, and a pipeline step cannot name code;"),
]


@pytest.mark.parametrize("example,step,message", NOT_EXPRESSIBLE, ids=[c[0] for c in NOT_EXPRESSIBLE])
def test_what_cannot_be_expressed_says_why(project, capsys, example, step, message):
    (project / "experiments" / "x.yaml").write_text(textwrap.dedent(f"""\
        pipelines:
          train:
            steps:
              - 'jpegs, labels = readers.file(file_root="/data")'
              - 'images = decoders.image(jpegs)'
              - '{step.replace("'", "''")}'
            outputs: [images, labels]
        """))
    code, out, err = run_cli(["validate", "experiments/x.yaml"], capsys)
    assert code == 2, out + err
    assert err.startswith("error: experiments/x.yaml:6: step 3 (") and err.count("\n") == 1, err
    assert message in err
