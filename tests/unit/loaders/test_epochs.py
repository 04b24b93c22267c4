"""pipelines.train.resolution and data.repeats without training: FFCV's resolution ramp value for value, timm's
RepeatAugSampler deal, each epoch's DALI pipeline at its side and in its order, the torchvision sampler, preview
and resume under a ramp, and the errors. tests/e2e/test_epoch_plan.py launches and resumes mid-ramp."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from runner.config.sections import ResolutionConfig
from runner.dist import Dist
from runner.loaders.epochs import repeat_indices, resolution_at
from tests.helpers import run_cli


def ffcv_get_resolution(epoch, min_res, max_res, end_ramp, start_ramp):
    """ffcv-imagenet's train_imagenet.py ImageNetTrainer.get_resolution, as published."""
    assert min_res <= max_res
    if epoch <= start_ramp:
        return min_res
    if epoch >= end_ramp:
        return max_res
    interp = np.interp([epoch], [start_ramp, end_ramp], [min_res, max_res])
    return int(np.round(interp[0] / 32)) * 32


@pytest.mark.parametrize("low,high,start,end", [(160, 192, 65, 76), (160, 192, 11, 13), (160, 171, 2, 14),
                                                (128, 256, 0, 40)])
def test_the_ramp_is_ffcvs(low, high, start, end):
    r = ResolutionConfig(min=low, max=high, start_epoch=start, end_epoch=end)
    for epoch in range(0, end + 5):
        assert resolution_at(r, epoch) == ffcv_get_resolution(epoch, low, high, end, start), epoch


def test_repeats_deal_copies_to_different_ranks_with_an_epochs_length():
    n, k, world = 24, 3, 4
    ranks = [repeat_indices(n, k, r, world, seed=5, epoch=2) for r in range(world)]
    assert [len(r) for r in ranks] == [6] * world  # n / world each: an epoch as long as without repeats
    dealt = [ranks[i % world][i // world] for i in range(n)]  # the round-robin deal, undone
    firsts = dealt[::k]
    assert dealt == [i for i in firsts for _ in range(k)]  # k copies in a row of one shuffled order
    assert all(len({(j + c) % world for c in range(k)}) == k for j in range(0, n, k))  # copies on k ranks
    assert repeat_indices(n, k, 0, world, seed=5, epoch=3) != ranks[0]  # another order each epoch
    assert repeat_indices(n, k, 0, world, seed=6, epoch=2) != ranks[0]  # and each seed


def test_each_epoch_reads_its_side_and_its_own_order(ramp):
    from runner.data.splits import train_label_map
    from runner.loaders.loader import create_train_loader
    from runner.run.validate import validate

    v = validate("experiments/ramp.yaml", ["data.num_threads=1"])
    world = 2
    loaders = [create_train_loader(v.loaders, Dist(rank=r, world=world), 1) for r in range(world)]
    labels = train_label_map(v.config.data, v.loaded.at)
    names = sorted(p.relative_to(ramp / "data" / "train").as_posix() for p in (ramp / "data" / "train").rglob("*.jpg"))
    for epoch, side in enumerate([32, 48, 48, 64]):
        for rank, loader in enumerate(loaders):
            loader.set_epoch(epoch)
            got = [(mb.images.shape[-1], mb.labels.tolist()) for (mb,) in loader.epoch()]
            assert {s for s, _ in got} == {side}
            order = repeat_indices(len(names), 2, rank, world, seed=2, epoch=epoch)
            expected = [labels.index[names[i].split("/")[0]] for i in order]
            assert [x for _, batch in got for x in batch] == expected[:len(got) * 4], (epoch, rank)
    for loader in loaders:
        loader.close()


def test_the_torchvision_loader_deals_the_same_repeats(ramp):
    from runner.loaders.loader import create_train_loader
    from runner.run.validate import validate

    v = validate("experiments/ramp.yaml", ["data.loader=torchvision", "~pipelines.train.resolution",
                                           "data.torchvision.num_workers=0"])
    loader = create_train_loader(v.loaders, Dist(rank=1, world=2), 1)
    assert loader.loaders[0].sampler.indices() == repeat_indices(24, 2, 1, 2, seed=2, epoch=0)[:12]
    assert loader.steps_per_epoch == 3


@pytest.mark.parametrize("override,expected", [
    ("pipelines.train.resolution.param=side", "command line 'pipelines.train.resolution.param=side': "
                                              "pipelines.train.resolution.param: 'side' is not a param of the train "
                                              "pipeline (imagenet_train), so the schedule would change nothing; its "
                                              "params: data_root, decode_device, hw_decoder_load, shuffle, size. Set "
                                              "pipelines.train.resolution.param to the one that sets its output side."),
    ("pipelines.train.resolution.min=96", "command line 'pipelines.train.resolution.min=96': "
                                          "pipelines.train.resolution.min: 96 is above "
                                          "pipelines.train.resolution.max (64): the side grows from min to max."),
    ("data.loader=synthetic", "experiments/ramp.yaml:10: pipelines.train.resolution: the resolution schedule sets a "
                              "param of the DALI train pipeline, and data.loader is 'synthetic'; set data.loader=dali, "
                              "or remove pipelines.train.resolution."),
])
def test_bad_schedules(ramp, override, expected):
    from runner.errors import ConfigError
    from runner.run.validate import validate

    with pytest.raises(ConfigError) as e:
        validate("experiments/ramp.yaml", [override])
    assert str(e.value) == expected


def test_preview_names_the_epochs_side(ramp, capsys):
    code, out, err = run_cli(["preview", "experiments/ramp.yaml", "--epoch", "4", "-o", "ramp4.png"], capsys)
    assert code == 0, err
    assert "epoch 4: train side 64 px (pipelines.train.resolution)" in out
    assert "wrote ramp4.png: 16 train images" in err


def test_a_checkpoint_of_a_ramp_resumes_under_that_ramp_only(ramp):
    from runner.errors import ConfigError
    from runner.run.validate import validate
    from runner.weights.checkpoint import check_resumable

    saved = {"fixed_settings": validate("experiments/ramp.yaml").fixed_settings(1)}
    check_resumable(saved, Path("last.pt"), validate("experiments/ramp.yaml").fixed_settings(1))
    with pytest.raises(ConfigError) as e:
        check_resumable(saved, Path("last.pt"), validate("experiments/ramp.yaml", [
            "data.repeats=1", "pipelines.train.resolution.end_epoch=2"]).fixed_settings(1))
    assert "data.repeats: 2 in the checkpoint, 1 now; pipelines.train.resolution: size 32-64 px over epochs 0-3, " \
           "multiples of 16 in the checkpoint, size 32-64 px over epochs 0-2, multiples of 16 now." in str(e.value)
