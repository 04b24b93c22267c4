"""The loader contract: shards, epochs, step counts, devices, and the three loaders' agreement."""
import os
import textwrap

import pytest
import torch

from runner.dist import Dist
from runner.loaders.loader import create_loader
from runner.run.validate import validate
from tests.helpers import LAYOUTS, PATHS, names


def loaders_for(project, root, batch, world, role):
    path = project / "experiments" / "paths.yaml"
    path.write_text(PATHS.format(root=root, batch=batch))
    v = validate(path, accelerator="cpu")
    return [create_loader(v.loaders, role, Dist(rank=r, world=world), feeds_model=False) for r in range(world)]


@pytest.mark.parametrize("world,batch", [(2, 4), (3, 2), (2, 5)])
def test_train_shards_are_disjoint_and_equal_in_steps(project, image_dataset, world, batch):
    loaders = loaders_for(project, image_dataset, batch, world, "train")
    total = 24
    assert len({ld.steps_per_epoch for ld in loaders}) == 1
    assert loaders[0].steps_per_epoch == (total // world) // batch
    for _ in range(3):  # epochs: reshuffled, still disjoint, all full batches
        seen = []
        for ld in loaders:
            batches = list(ld.epoch())
            assert len(batches) == ld.steps_per_epoch
            assert all(b[0].shape[0] == batch for b in batches)
            seen.append([n for b in batches for n in names(b[0])])
        flat = [n for s in seen for n in s]
        assert len(flat) == len(set(flat)), "a sample was read by two ranks"
        # at most one batch per rank (plus the shard remainder) is left out of an epoch
        assert total - len(flat) < world * batch + world


@pytest.mark.parametrize("world,batch", [(1, 4), (2, 4), (4, 2)])
def test_eval_covers_every_sample_once(project, image_dataset, world, batch):
    loaders = loaders_for(project, image_dataset, batch, world, "eval")
    for _ in range(2):
        seen = [n for ld in loaders for b in ld.epoch() for n in names(b[0])]
        assert sorted(seen) == sorted(f"c{c}/{i:03d}.jpg" for c in range(3) for i in range(3))


def test_labels_are_int64_on_the_device(project, image_dataset):
    (project / "experiments" / "e.yaml").write_text(
        f"data: {{root: {image_dataset}, batch_size: 4}}\n"
        "pipelines: {train: {use: imagenet_train, params: {size: 32}}}\n")
    v = validate(project / "experiments" / "e.yaml", accelerator="cpu")
    images, labels = next(iter(create_loader(v.loaders, "train", Dist()).epoch()))
    assert images.shape == (4, 3, 32, 32) and images.dtype == torch.float32
    assert labels.shape == (4,) and labels.dtype == torch.int64 and 0 <= labels.min() <= labels.max() < 3


def test_torchvision_and_synthetic_loaders_follow_the_contract(project, image_dataset):
    (project / "experiments" / "tv.yaml").write_text(textwrap.dedent(f"""\
        model: {{num_classes: 3}}
        data:
          root: {image_dataset}
          batch_size: 4
          image_size: 32
          torchvision:
            num_workers: 0
            train: ["RandomResizedCrop(32)", "ToTensor()"]
            eval: ["Resize(36)", "CenterCrop(32)", "ToTensor()"]
        """))
    for loader in ("torchvision", "synthetic"):
        v = validate(project / "experiments" / "tv.yaml", [f"data.loader={loader}"], accelerator="cpu")
        for world in (1, 2):
            train = [create_loader(v.loaders, "train", Dist(rank=r, world=world)) for r in range(world)]
            assert len({t.steps_per_epoch for t in train}) == 1
            batches = list(train[0].epoch())
            assert len(batches) == train[0].steps_per_epoch
            images, labels = batches[0]
            assert images.shape == (4, 3, 32, 32) and labels.dtype == torch.int64
        if loader == "torchvision":
            evals = [create_loader(v.loaders, "eval", Dist(rank=r, world=2)) for r in range(2)]
            assert sum(len(lbl) for ev in evals for _, lbl in ev.epoch()) == 9


HYBRID = PATHS.replace("""      - paths = get_property(jpegs, key="source_info")
    outputs: [paths, labels]
    params: {{data_root: null}}
  eval:""", """      - paths = get_property(jpegs, key=$key)
    outputs: [paths, labels]
    params: {{data_root: null, key: source_info}}
    hybrid: {{share: {share}, params: {{key: source_info}}}}
  eval:""")


def hybrid_loaders(project, root, batch, share, world, **loader_args):
    path = project / "experiments" / "hybrid.yaml"
    path.write_text(HYBRID.format(root=root, batch=batch, share=share))
    v = validate(path, accelerator="cpu")
    return v, [create_loader(v.loaders, "train", Dist(rank=r, world=world), feeds_model=False, **loader_args)
               for r in range(world)]


def listed(path: str) -> list[str]:
    return [line.split()[0] for line in open(path).read().splitlines()]


@pytest.mark.parametrize("world,batch,share,copy", [(1, 5, 0.6, 3), (2, 4, 0.5, 2), (2, 6, 0.2, 1)])
def test_a_hybrid_pipeline_makes_every_batch_from_both_copies(project, image_dataset, world, batch, share, copy):
    from runner.config.sections import HYBRID as COPY

    v, loaders = hybrid_loaders(project, image_dataset, batch, share, world)
    base_files = listed(dict(v.graphs["train"].steps[0].node.kwargs)["file_list"].value)
    copy_files = listed(dict(v.graphs[COPY].steps[0].node.kwargs)["file_list"].value)
    # the split is dealt between the copies in proportion to their part of a batch
    assert sorted(base_files + copy_files) == sorted(f"c{c}/{i:03d}.jpg" for c in range(3) for i in range(8))
    assert len(copy_files) == round(24 * copy / batch)
    steps = min((len(base_files) // world) // (batch - copy), (len(copy_files) // world) // copy)
    assert [ld.steps_per_epoch for ld in loaders] == [steps] * world
    for _ in range(2):
        seen = []
        for ld in loaders:
            batches = list(ld.epoch())
            assert len(batches) == steps and all(len(b[1]) == batch for b in batches)
            for images, _ in batches:
                assert set(names(images)[:batch - copy]) <= set(base_files)
                assert set(names(images)[batch - copy:]) <= set(copy_files)
                seen += names(images)
        assert len(seen) == len(set(seen)) == world * steps * batch, "a sample was read twice in an epoch"


@pytest.mark.parametrize("deal", ["smallest", "largest"])
def test_a_hybrid_copy_can_be_dealt_the_smallest_or_largest_files(project, image_dataset, deal):
    from runner.config.sections import HYBRID as COPY

    path = project / "experiments" / "hybrid.yaml"
    path.write_text(HYBRID.format(root=image_dataset, batch=4, share=0.75).replace(
        "params: {key: source_info}}", f"params: {{key: source_info}}, deal: {deal}}}"))
    v = validate(path, accelerator="cpu")
    copy_files = listed(dict(v.graphs[COPY].steps[0].node.kwargs)["file_list"].value)
    by_size = sorted((f"c{c}/{i:03d}.jpg" for c in range(3) for i in range(8)),
                     key=lambda f: (image_dataset / "train" / f).stat().st_size)
    assert len(copy_files) == 18
    assert set(copy_files) == set(by_size[:18] if deal == "smallest" else by_size[-18:])
    assert len({(image_dataset / "train" / f).stat().st_size for f in by_size}) > 20, "sizes must differ to test"


def test_a_hybrid_loader_resumes_both_copies_where_they_stopped(project, image_dataset):
    _, [whole] = hybrid_loaders(project, image_dataset, 4, 0.5, 1, checkpointing=True)
    first = [names(b[0]) for b in whole.epoch()]
    _, [stopped] = hybrid_loaders(project, image_dataset, 4, 0.5, 1, checkpointing=True)
    epoch = stopped.epoch()
    assert names(next(epoch)[0]) == first[0]
    state = stopped.state()
    assert isinstance(state, list) and len(state) == 2
    _, [resumed] = hybrid_loaders(project, image_dataset, 4, 0.5, 1, state=state)
    assert [names(b[0]) for b in resumed.epoch(start_batch=1)] == first[1:]


def test_a_hybrid_loader_times_the_wait_for_each_pipeline(project, image_dataset):
    from runner.loaders.loader import SlotLoader

    _, [a, b] = hybrid_loaders(project, image_dataset, 4, 0.5, 2)
    assert a.part_waits() == {"train": 0.0, "train.hybrid": 0.0}
    assert len(list(a.epoch())) == a.steps_per_epoch == 3
    waits = a.part_waits()
    assert list(waits) == ["train", "train.hybrid"] and all(w > 0 for w in waits.values())
    list(b.epoch())
    assert SlotLoader([a, b], [0, 1]).part_waits() == {k: a.part_waits()[k] + b.part_waits()[k] for k in waits}
    v = validate(project / "experiments" / "hybrid.yaml", ["pipelines.train.hybrid=null"], accelerator="cpu")
    single = create_loader(v.loaders, "train", Dist(), feeds_model=False)
    list(single.epoch())
    assert single.part_waits() == {}  # one pipeline: its wait is the loop's data wait


def test_a_hybrid_image_pipeline_decodes_on_both_copies(project, image_dataset):
    (project / "experiments" / "e.yaml").write_text(
        f"data: {{root: {image_dataset}, batch_size: 4}}\n"
        "pipelines: {train: {use: imagenet_train_fused, params: {size: 32},\n"
        "                    hybrid: {share: 0.75, params: {decode_device: cpu}, num_threads: 1}}}\n")
    v = validate(project / "experiments" / "e.yaml", accelerator="cpu")
    loader = create_loader(v.loaders, "train", Dist())
    batches = list(loader.epoch())
    assert len(batches) == loader.steps_per_epoch == 6
    images, labels = batches[0]
    assert images.shape == (4, 3, 32, 32) and images.dtype == torch.float32 and labels.dtype == torch.int64
    assert sorted(torch.cat([lbl for _, lbl in batches]).tolist()) == [c for c in range(3) for _ in range(8)]


def thread_cores() -> dict[str, set[str]]:
    """Thread name -> the CPU lists its threads may run on."""
    from pathlib import Path

    out: dict[str, set[str]] = {}
    for task in Path("/proc/self/task").iterdir():
        status = (task / "status").read_text()
        allowed = next(ln.split()[1] for ln in status.splitlines() if ln.startswith("Cpus_allowed_list"))
        out.setdefault((task / "comm").read_text().strip(), set()).add(allowed)
    return out


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two cores")
def test_reserved_cores_keep_dali_threads_off_the_training_thread(project, image_dataset, monkeypatch):
    from runner.loaders import affinity

    before = os.sched_getaffinity(0)
    monkeypatch.setattr(affinity, "_split", {})
    monkeypatch.delenv("DALI_AFFINITY_MASK", raising=False)
    cores = sorted(before)
    (project / "experiments" / "e.yaml").write_text(
        f"data: {{root: {image_dataset}, batch_size: 4, reserved_cores: 1}}\n"
        "pipelines: {train: {use: imagenet_train, params: {size: 32}}}\n")
    v = validate(project / "experiments" / "e.yaml", accelerator="cpu")
    try:
        loader = create_loader(v.loaders, "train", Dist())
        next(iter(loader.epoch()))
        assert os.sched_getaffinity(0) == {cores[0]}  # the training thread: the reserved core
        # DALI's workers, one per remaining core (thread i on core i), never on the reserved one
        workers = set().union(*(cpus for name, cpus in thread_cores().items() if name.startswith("[DALI][TP")))
        assert workers and workers <= {str(c) for c in cores[1:]}
        assert os.environ["DALI_AFFINITY_MASK"] == ",".join(str(c) for c in cores[1:])
    finally:
        os.sched_setaffinity(0, before)


def test_dali_nice_lowers_the_pipelines_threads_not_the_training_thread(project, image_dataset):
    import threading
    from pathlib import Path

    def threads() -> dict[int, tuple[str, int]]:
        """Thread id -> (name, nice value)."""
        return {int(t.name): ((t / "comm").read_text().strip(), os.getpriority(os.PRIO_PROCESS, int(t.name)))
                for t in Path("/proc/self/task").iterdir()}

    (project / "experiments" / "e.yaml").write_text(
        f"data: {{root: {image_dataset}, batch_size: 4, num_threads: 2, dali_nice: 7}}\n"
        "pipelines: {train: {use: imagenet_train, params: {size: 32}}}\n")
    v = validate(project / "experiments" / "e.yaml", accelerator="cpu")
    before = threads()
    loader = create_loader(v.loaders, "train", Dist())
    next(iter(loader.epoch()))
    after = threads()
    started = {after[tid] for tid in after.keys() - before.keys()}
    assert {("[DALI][TP0]Exec", 7), ("[DALI][TP1]Exec", 7)} <= started and {nice for _, nice in started} == {7}
    assert {tid: after[tid] for tid in before.keys() & after.keys()} == \
        {tid: before[tid] for tid in before.keys() & after.keys()}  # the training thread among them, still 0
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == 0


@pytest.mark.parametrize("layout,dtype", [("HWC", "FLOAT"), ("HWC", "FLOAT16"), ("CHW", "FLOAT16")])
def test_channels_last_and_half_precision_pipelines_give_the_trainer_the_same_images(project, image_dataset, layout,
                                                                                      dtype):
    path = project / "experiments" / "layouts.yaml"
    path.write_text(LAYOUTS.format(root=image_dataset))

    def first_batch(*overrides):
        v = validate(path, list(overrides), accelerator="cpu")
        return next(iter(create_loader(v.loaders, "train", Dist()).epoch()))

    (written, written_labels), (images, labels) = first_batch(), first_batch(
        f"pipelines.train.params.layout={layout}", f"pipelines.train.params.dtype={dtype}")
    assert images.shape == written.shape == (4, 3, 24, 32)  # N, C, H, W
    assert images.dtype == {"FLOAT": torch.float32, "FLOAT16": torch.float16}[dtype]
    # channels last: permuted, not copied, so the trainer's channels_last conversion is a no-op
    assert images.is_contiguous(memory_format=torch.channels_last) == (layout == "HWC")
    torch.testing.assert_close(images.float(), written, rtol=1e-3, atol=2e-3)
    assert torch.equal(labels, written_labels)


def test_the_model_gets_its_memory_format_and_fp32_when_autocast_is_off():
    from runner.models.device import model_input

    half = torch.randn(2, 24, 32, 3, dtype=torch.float16).permute(0, 3, 1, 2)  # channels last, as HWC arrives
    plain = model_input(half, False, {"enabled": False})
    assert plain.dtype == torch.float32 and plain.is_contiguous() and torch.equal(plain, half.float())
    kept = model_input(half, True, {"enabled": True})
    assert kept is half  # already channels last; autocast casts it in the first convolution
    assert model_input(half.contiguous(), True, {"enabled": True}).is_contiguous(memory_format=torch.channels_last)
