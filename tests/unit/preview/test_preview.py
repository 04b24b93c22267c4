"""`runner preview` and the grids every launch logs: real DALI CPU pipelines on solid-colour JPEGs (each class
its own colour, so an image's colour says which label it must carry), the torchvision and synthetic loaders,
real PNGs, a real MLflow store."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.fixtures.preview import COLOURS, EXPERIMENT, read_png
from tests.helpers import run_cli


def checked(path, *overrides):
    from runner.run.data import checked_with_data, ensure_data
    from runner.run.validate import validate

    v = validate(path, list(overrides))
    ensure_data(v, quiet=True)
    return checked_with_data(v, quiet=True)


def first_batch(v, pipeline):
    """(display pixels, labels) of the first batch the preview's loader yields."""
    from runner.preview.batches import batch_denorms
    from runner.preview.draw import create_preview_loader, preview_dist
    from runner.preview.grid import display_pixels

    loader = create_preview_loader(v.loaders, pipeline, preview_dist(v.target))
    images, labels = next(iter(loader.epoch()))
    loader.close()
    return display_pixels(images, batch_denorms(v.grids, pipeline)), labels


def assert_colours_match_labels(pixels, labels, names, tolerance=6):
    """Every image is its class's solid colour: normalisation undone at the right scale, labels right."""
    assert len(pixels) == len(labels) > 0
    for image, label in zip(pixels, labels.tolist()):
        expected = np.array(COLOURS[names[label]])
        assert np.abs(image.reshape(-1, 3).mean(0) - expected).max() < tolerance, (names[label], image[0, 0])


def test_dali_mean_and_std_are_read_from_the_graph_and_undone(experiment):
    from runner.preview.batches import batch_denorms

    v = checked(experiment)
    [(_, denorm)] = batch_denorms(v.grids, "train")
    assert denorm.mean == pytest.approx((123.675, 116.28, 103.53)) and denorm.std == pytest.approx((58.395, 57.12, 57.375))
    assert denorm.source == "crop_mirror_normalize (step 4)" and not denorm.stretch
    for pipeline in ("train", "eval"):
        pixels, labels = first_batch(v, pipeline)
        assert pixels.dtype == np.uint8 and pixels.shape[1:] == (32, 32, 3)
        assert_colours_match_labels(pixels, labels, v.labels.classes)


INLINE = """
  train:
    params: {{data_root: null, size: 24}}
    steps:
      - jpegs, labels = readers.file(file_root=$data_root, shuffle_after_epoch=True)
      - images = decoders.image(jpegs, device="cpu", output_type=RGB)
      - images = resize(images, resize_x=$size, resize_y=$size)
{last}
    outputs: [images, labels]
"""


def inline_experiment(project, colours, *last: str):
    """The experiment with an inline train pipeline: decode, resize to 24 px, then the steps `last`."""
    steps = "\n".join(f"      - {step}" for step in last)
    text = EXPERIMENT.format(root=colours).replace(
        "\n  train: {use: imagenet_train, params: {size: 32}}\n", INLINE.format(last=steps))
    path = project / "experiments" / "inline.yaml"
    path.write_text(text)
    return path


@pytest.mark.parametrize("last, source, mean", [
    # no mean or std: crop_mirror_normalize only converts to float CHW, values stay 0-255
    (["images = crop_mirror_normalize(images, dtype=FLOAT, output_layout='CHW')"],
     "crop_mirror_normalize (step 4)", (0.0,)),
    # scale and shift, in DALI's 0-255 units
    (["images = crop_mirror_normalize(images, dtype=FLOAT, mean=[100, 110, 120], std=[50, 60, 70], scale=2, "
      "shift=3)"], "crop_mirror_normalize (step 4)", (100.0, 110.0, 120.0)),
    # normalize (stddev, not std) and a transpose after it, followed back to the normalising step
    (["images = normalize(images, mean=120, stddev=64)", "images = transpose(images, perm=[2, 0, 1])"],
     "normalize (step 4)", (120.0,)),
    # a 0-1 pipeline: arithmetic on the stream, shown as 0-1 values
    (["images = crop_mirror_normalize(images, dtype=FLOAT)", "images = images / 255"], "", (0.0,)),
    # the decoded images themselves, uint8 and channels last: shown, though no model could train on them
    (["images = flip(images, horizontal=0)"], "", (0.0,)),
])
def test_other_normalisations_and_scales(project, colours, last, source, mean):
    from runner.preview.batches import batch_denorms

    v = checked(inline_experiment(project, colours, *last))
    [(_, denorm)] = batch_denorms(v.grids, "train")
    assert (denorm.source, denorm.mean) == (source, mean)
    pixels, labels = first_batch(v, "train")
    assert pixels.shape[1:] == (24, 24, 3)
    assert_colours_match_labels(pixels, labels, v.labels.classes)


def test_normalize_with_its_own_statistics_is_stretched(project, colours):
    from runner.preview.batches import batch_denorms

    v = checked(inline_experiment(project, colours, "images = normalize(images, axes=[0, 1])"))
    [(_, denorm)] = batch_denorms(v.grids, "train")
    assert denorm.stretch and denorm.describe() == ("normalize (step 4), with statistics of each batch: each image "
                                                     "shown over its own value range")


def test_torchvision_loader_is_undone_in_its_0_to_1_units(experiment):
    v = checked(experiment, "data.loader=torchvision", "data.torchvision.num_workers=0", "data.torchvision.train=["
                "\"RandomResizedCrop(32)\",\"ToTensor()\",\"Normalize(mean=[0.4, 0.5, 0.6], std=[0.2, 0.3, 0.4])\"]")
    from runner.preview.batches import batch_denorms

    assert batch_denorms(v.grids, "train")[0][1].mean == (0.4, 0.5, 0.6)
    pixels, labels = first_batch(v, "train")
    assert_colours_match_labels(pixels, labels, v.labels.classes)


def test_captions_from_labels_and_from_soft_targets():
    from runner.preview.grid import _font, caption_lines, captions

    names = ["cat", "dog", "fox"]
    assert captions(torch.tensor([2, 0, 7]), names) == [[("fox", 1.0)], [("cat", 1.0)], [("label 7", 1.0)]]
    # the third row: a 0.7/0.3 mix with label smoothing 0.3 over 3 classes (0.1 on every class)
    soft = torch.tensor([[0.7, 0.3, 0.0], [0.004, 0.006, 0.99], [0.1, 0.59, 0.31]])
    got = captions(soft, names)
    assert [[n for n, _ in c] for c in got] == [["cat", "dog"], ["fox"], ["dog", "fox"]]
    assert got[0][0][1] == pytest.approx(0.7) and got[1][0][1] == pytest.approx(0.99)
    font = _font(14)
    assert caption_lines([("cat", 0.7), ("dog", 0.3)], font, 200) == ["cat 0.70 + dog 0.30"]
    assert caption_lines([("cat", 1.0)], font, 200) == ["cat"]
    long = caption_lines([("a long class name of a bird", 0.55), ("dog", 0.45)], font, 160)
    assert long[0].endswith("… 0.55") and long[1] == "+ dog 0.45"  # the name is cut, never the weight


def test_the_same_seed_draws_the_same_grid_and_another_seed_another(experiment, project, capsys):
    grids = {}
    for name, extra in (("a", []), ("b", []), ("c", ["seed=6"])):
        out = project / f"{name}.png"
        code, _, err = run_cli(["preview", experiment, "-o", out, *extra], capsys)
        assert code == 0, err
        assert f"wrote {out}: 16 train images" in err
        grids[name] = read_png(out)
    assert grids["a"][0] == grids["b"][0]
    assert grids["a"][1].shape == grids["c"][1].shape and not np.array_equal(grids["a"][1], grids["c"][1])
    # 16 images of 32 px, enlarged 5x to 160 px, in 4 columns of 160 + 8 px padding
    assert grids["a"][1].shape[1] == 4 * 160 + 5 * 8


def test_n_and_the_default_output_name(experiment, project, capsys):
    code, _, err = run_cli(["preview", experiment, "--pipeline", "eval", "-n", "20"], capsys)
    assert code == 0, err
    assert "wrote colours-eval.png: 9 eval images (its epoch on rank 0 has 9)" in err
    _, pixels = read_png(project / "colours-eval.png")
    assert pixels.shape[1] == 3 * 160 + 4 * 8  # 9 images: 3 columns


def test_synthetic_loader(experiment, project, capsys):
    code, _, err = run_cli(["preview", experiment, "data.loader=synthetic", "-n", "4", "-o", "s.png"], capsys)
    assert code == 0, err
    _, pixels = read_png(project / "s.png")
    assert pixels.shape[1] == 2 * 224 + 3 * 8  # data.image_size: 224 px, 2 columns


HYBRID = "pipelines.train.hybrid={share: 0.5, params: {decode_device: cpu}}"


def test_hybrid_copy_alone_is_the_copy_part_of_each_train_batch(experiment):
    v = checked(experiment, HYBRID)
    whole, whole_labels = first_batch(v, "train")
    copy, copy_labels = first_batch(v, "train.hybrid")
    assert len(whole) == 6 and len(copy) == 3
    assert np.array_equal(whole[3:], copy) and torch.equal(whole_labels[3:], copy_labels)
    assert_colours_match_labels(copy, copy_labels, v.labels.classes)


def test_hybrid_preview_through_the_cli(experiment, project, capsys):
    code, _, err = run_cli(["preview", experiment, HYBRID, "--pipeline", "train.hybrid", "-n", "5"], capsys)
    assert code == 0, err
    assert "wrote colours-train.hybrid.png: 5 train.hybrid images" in err


@pytest.mark.parametrize("args, message", [
    (["--pipeline", "trian"], "error: command line: --pipeline: 'trian' is not a pipeline; choose train, eval or "
                              "train.hybrid. Did you mean 'train'?"),
    (["--pipeline", "train.hybrid"], "error: experiments/colours.yaml:7: pipelines.train: the train pipeline has no "
                                     "hybrid copy (pipelines.train.hybrid is not set), so --pipeline train.hybrid "
                                     "has nothing to show; choose train or eval, or set pipelines.train.hybrid "
                                     "(docs/pipelines.md, \"Hybrid\")."),
    (["--pipeline", "train.hybrid", "data.loader=torchvision"],
     "error: experiments/colours.yaml:7: pipelines.train: the train pipeline has no hybrid copy (data.loader is "
     "'torchvision', and a hybrid copy is a DALI pipeline), so --pipeline train.hybrid has nothing to show; choose "
     "train or eval, or set pipelines.train.hybrid (docs/pipelines.md, \"Hybrid\")."),
    (["--pipeline", "eval", "~pipelines.eval"],
     "error: experiments/colours.yaml: pipelines.eval: the experiment has no eval pipeline (pipelines.eval is not "
     "set), so --pipeline eval has nothing to show; choose train."),
    (["-n", "0"], "error: command line: -n: 0 images: draw at least one (-n 16 draws sixteen)."),
])
def test_bad_arguments_exit_2_with_one_paragraph(experiment, project, capsys, args, message):
    (project / "old.png").write_bytes(b"kept")
    code, out, err = run_cli(["preview", "experiments/colours.yaml", *args, "-o", "old.png"], capsys)
    assert code == 2 and out == ""
    assert err.strip() == message
    assert (project / "old.png").read_bytes() == b"kept"
