"""Gradient accumulation's reader slots (trainer.global_batch_size): a global batch that is no whole number of
batches is refused at its line; validate says how it is reached; a process with N slots reads, slot by slot, the
batches N processes would read (the same shard and seeds), and its DALI threads are split between the slots.
tests/e2e/test_accumulate.py trains both ways and compares the curves.
"""
from __future__ import annotations

import hashlib

import pytest

from runner.dist import Dist
from runner.loaders.loader import create_train_loader
from tests.helpers import run_cli


@pytest.mark.parametrize("overrides, message", [
    (["trainer.global_batch_size=12", "trainer.devices=2"],
     "error: command line 'trainer.global_batch_size=12': trainer.global_batch_size: 12 is not a whole multiple of "
     "data.batch_size x processes = 4 x 2 = 8: each optimizer step accumulates the same whole number of batches of "
     "data.batch_size on every process. Valid here: 8, 16, 24, ... (accumulating 1, 2, 3, ... batches), or null "
     "(8); or change data.batch_size.\n"),
    (["trainer.global_batch_size=2"],
     "error: command line 'trainer.global_batch_size=2': trainer.global_batch_size: 2 is not a whole multiple of "
     "data.batch_size x processes = 4 x 1 = 4: each optimizer step accumulates the same whole number of batches of "
     "data.batch_size on every process. Valid here: 4, 8, 12, ... (accumulating 1, 2, 3, ... batches), or null "
     "(4); or change data.batch_size.\n"),
])
def test_a_global_batch_that_is_no_whole_number_of_batches_is_refused(exp, capsys, overrides, message):
    code, _, err = run_cli(["validate", exp, *overrides], capsys)
    assert code == 2 and err == message


def test_the_global_batch_in_the_file_is_named_by_its_line(exp, capsys):
    exp.write_text(exp.read_text().replace("global_batch_size: 8", "global_batch_size: 6"))
    code, _, err = run_cli(["validate", exp], capsys)
    assert code == 2 and err.startswith("error: experiments/acc.yaml:6: trainer.global_batch_size: 6 is not a whole "
                                        "multiple of data.batch_size x processes = 4 x 1 = 4:"), err


def test_validate_says_how_the_global_batch_is_reached(exp, capsys):
    code, _, err = run_cli(["validate", exp, "trainer.devices=2", "trainer.global_batch_size=24"], capsys)
    assert code == 0, err
    assert ("note: trainer.global_batch_size=24: each optimizer step accumulates the gradients of 3 batches of 4 "
            "(data.batch_size) on each of 2 process(es); trainer.max_steps, logging and the schedule count optimizer "
            "steps.") in " ".join(err.split())
    code, _, err = run_cli(["validate", exp, "trainer.global_batch_size=4"], capsys)
    assert code == 0 and "accumulates" not in err


def _digests(loader, epochs: int = 2) -> dict[tuple[int, int, int], str]:
    """(epoch, step, slot) -> sha1 of that micro-batch's images and labels."""
    out = {}
    for e in range(epochs):
        for i, micro in enumerate(loader.epoch()):
            for mb in micro:
                out[e, i, mb.slot] = hashlib.sha1(mb.images.numpy().tobytes() + mb.labels.numpy().tobytes()).hexdigest()
    loader.close()
    return out


@pytest.mark.parametrize("loader", ["dali", "torchvision", "synthetic"])
def test_one_process_with_two_slots_reads_the_batches_of_two_processes(exp, loader):
    from runner.run.validate import validate

    overrides = [f"data.loader={loader}", "data.torchvision.num_workers=0", "data.image_size=16",
                 "data.torchvision.train=[RandomResizedCrop(16), ToTensor()]", "data.synth.per_class=4"]
    v = validate(exp, overrides, accelerator="cpu")
    two_slots = create_train_loader(v.loaders, Dist(), 2)
    assert two_slots.slots == [0, 1]
    ranks = [create_train_loader(v.loaders, Dist(rank=r, world=2), 1) for r in range(2)]
    assert two_slots.steps_per_epoch == ranks[0].steps_per_epoch == ranks[1].steps_per_epoch > 0
    accumulated = _digests(two_slots)
    separate = {**_digests(ranks[0]), **_digests(ranks[1])}
    assert accumulated == separate and len(accumulated) == 2 * 2 * two_slots.steps_per_epoch
    if loader == "synthetic":  # a fixed batch per slot, as per rank
        assert len(set(accumulated.values())) == 2
    else:
        assert len(set(accumulated.values())) == len(accumulated)  # every micro-batch its own


def test_the_compiled_train_pipeline_is_slot_0s_and_reads_its_batches(exp, project, capsys):
    """The source `runner compile` prints and every run logs reads what slot 0 read: shard 0 of processes x
    accumulation, with slot 0's seed and threads; eval is not split into slots."""
    import importlib.util

    import numpy as np

    from runner.run.validate import validate

    out_file = project / "train_pipeline.py"
    code, _, err = run_cli(["compile", exp, "-o", out_file], capsys)
    assert code == 0, err
    source = out_file.read_text()
    assert "pipe = train_pipeline(shard_id=0, num_shards=2, **PIPELINE_ARGS)" in source
    spec = importlib.util.spec_from_file_location("train_pipeline", out_file)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    pipe = module.train_pipeline(shard_id=0, num_shards=2, **module.PIPELINE_ARGS)
    pipe.build()
    images, labels = pipe.run()
    slot0 = next(create_train_loader(validate(exp, accelerator="cpu").loaders, Dist(), 2).epoch())[0]
    assert slot0.slot == 0
    assert np.array_equal(np.array(images.as_tensor()), slot0.images.numpy())
    assert np.array(labels.as_tensor()).reshape(-1).tolist() == slot0.labels.tolist()
    code, out, err = run_cli(["compile", exp, "--pipeline", "eval"], capsys)
    assert code == 0, err
    assert "pipe = eval_pipeline(shard_id=0, num_shards=1, **PIPELINE_ARGS)" in out


def test_dali_auto_threads_are_split_between_a_process_slots(monkeypatch):
    from runner.config.sections import DataConfig
    from runner.loaders import dali_plan

    monkeypatch.setattr(dali_plan, "cpu_cores", lambda: 16)
    assert dali_plan.dali_threads(DataConfig(), Dist(local_world=2)) == 6
    assert dali_plan.dali_threads(DataConfig(), Dist(local_world=2, slots=2)) == 3
    assert dali_plan.dali_threads(DataConfig(num_threads=4), Dist(slots=2)) == 4  # as written
