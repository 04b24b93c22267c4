"""`runner data shard` and the WebDataset pipelines: shards, DALI indexes, labels by name, the manifest, resume,
batches identical to the ImageFolder's, the data commands on shards, and a broken shard's one-paragraph error."""
from __future__ import annotations

import hashlib
import io
import json
import shutil
import struct
import tarfile
from pathlib import Path

import pytest
import torch

from tests.conftest import run_cli, write_image_folder

EXPERIMENT = """\
name: shards
seed: 5
model: {{name: resnet18, num_classes: {classes}}}
optimizer: {{lr: 0.02}}
trainer: {{epochs: 1, max_steps: 2, log_every_n_steps: 1}}
data: {{root: {root}, batch_size: 4}}
pipelines:
  train: {{use: {train}, params: {{size: 32, decode_device: cpu{train_params}}}}}
  eval: {{use: {eval}, params: {{size: 32, resize_shorter: 36, decode_device: cpu}}}}
tracking: {{experiment: shards}}
"""


def experiment(folder: Path, root: Path, *, shards: bool, classes: int = 3, name: str | None = None,
               train_params: str = "", format: str = "webdataset") -> Path:
    suffix = {"webdataset": "_wds", "tfrecord": "_tfrecord"}[format] if shards else ""
    path = folder / (name or f"exp{suffix or '_folder'}.yaml")
    path.write_text(EXPERIMENT.format(root=root, classes=classes, train_params=train_params,
                                      train=f"imagenet_train{suffix}", eval=f"imagenet_eval{suffix}"))
    return path


def source(root: Path) -> Path:
    """train/ (3 classes x 8) and val/ (3 x 3), small random JPEGs."""
    write_image_folder(root / "train", classes=3, per_class=8, seed=1)
    write_image_folder(root / "val", classes=3, per_class=3, seed=2)
    return root


def digest(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def members(tar: Path) -> dict[str, bytes]:
    with tarfile.open(tar) as t:
        return {m.name: t.extractfile(m).read() for m in t.getmembers()}


@pytest.fixture(scope="module")
def images(module_tmp) -> Path:
    return source(module_tmp / "images")


@pytest.fixture(scope="module")
def ordered(module_tmp, images) -> Path:
    """The images as shards in the folder's own order (--shuffle-seed none), several shards for train."""
    from runner.data.shard_write import build_shards

    build_shards(images, module_tmp / "ordered", shard_mb=0.02, shuffle_seed=None, workers=2)
    return module_tmp / "ordered"


@pytest.fixture(scope="module")
def ordered_tfrecord(module_tmp, images) -> Path:
    from runner.data.shard_write import build_shards

    build_shards(images, module_tmp / "ordered-tfrecord", format="tfrecord", shard_mb=0.02, shuffle_seed=None,
                 workers=2)
    return module_tmp / "ordered-tfrecord"


# ---- writing --------------------------------------------------------------------------------------

def test_shard_writes_tars_indexes_label_map_and_manifest(tmp_path, images, capsys):
    code, out, _ = run_cli(["data", "shard", images, tmp_path / "s", "--shard-size", "0.02"], capsys)
    assert code == 0
    assert "sharded 33 images (train 24 in" in out and "val 9 in " in out and ", 3 classes" in out
    root = tmp_path / "s"
    assert json.loads((root / "labels.json").read_text()) == {"c0": 0, "c1": 1, "c2": 2}
    manifest = json.loads((root / ".runner-shards.json").read_text())
    assert manifest["complete"] and manifest["classes"] == ["c0", "c1", "c2"]
    assert manifest["settings"]["shard_mb"] == 0.02 and manifest["settings"]["shuffle_seed"] == 0
    assert set(manifest["source_fingerprint"]) == {"train", "val"}
    train = manifest["splits"]["train"]
    assert train["samples"] == 24 and len(train["shards"]) >= 2
    assert [s["name"] for s in train["shards"]] == sorted(p.name for p in (root / "train").glob("*.tar"))
    # every sample: the source's bytes, its label by class name, as text and int32, and where it came from
    seen = {}
    for tar in sorted((root / "train").glob("*.tar")):
        assert tar.with_suffix(".idx").read_text().startswith("v1.2 ")
        files = members(tar)
        for name, data in files.items():
            if name.endswith(".json"):
                key, meta = name[:-5], json.loads(data)
                label = struct.unpack("<i", files[key + ".cls.i32"])[0]
                assert int(files[key + ".cls"]) == label == int(meta["class"][1:])
                assert files[key + ".jpg"] == (images / "train" / meta["path"]).read_bytes()
                seen[meta["path"]] = key
    assert len(seen) == 24
    # shuffled with seed 0: not the folder's order, keys numbered in the order written
    assert sorted(seen, key=seen.get) != sorted(seen)


def test_index_offsets_point_at_each_component(ordered):
    from runner.data.shardset import parse_index

    tar = ordered / "train" / "shard-000000.tar"
    data = tar.read_bytes()
    files = members(tar)
    for sample in parse_index(tar.with_suffix(".idx")):
        for ext, (offset, size, name) in sample.components.items():
            assert name == f"{sample.key}.{ext}"
            assert data[offset:offset + size] == files[name]


def test_same_source_same_bytes_and_a_rerun_rewrites_only_what_is_missing(tmp_path, images, capsys):
    dst = tmp_path / "s"
    assert run_cli(["data", "shard", images, dst, "--shard-size", "0.02"], capsys)[0] == 0
    first = digest(dst)
    code, out, _ = run_cli(["data", "shard", images, dst, "--shard-size", "0.02"], capsys)
    assert code == 0 and "0 written" in out and "already there" in out
    victim = dst / "train" / "shard-000001.tar"
    victim.write_bytes(victim.read_bytes()[:1000])   # cut short, as an interrupted copy leaves it
    (dst / "train" / "shard-000000.idx").unlink()
    code, out, _ = run_cli(["data", "shard", images, dst, "--shard-size", "0.02"], capsys)
    assert code == 0 and "2 written" in out
    shards = lambda d: {k: v for k, v in d.items() if k.endswith((".tar", ".idx"))}  # noqa: E731
    assert shards(digest(dst)) == shards(first) and len(shards(first)) > 4


def test_other_settings_in_the_same_folder_are_refused(tmp_path, images, capsys):
    dst = tmp_path / "s"
    assert run_cli(["data", "shard", images, dst], capsys)[0] == 0
    code, _, err = run_cli(["data", "shard", images, dst, "--shuffle-seed", "7"], capsys)
    assert code == 2
    assert "holds shards made with other settings: shuffle_seed 0 (wanted 7)" in err


def test_shards_inside_their_source_are_refused_before_anything_is_written(tmp_path, images, capsys):
    src = tmp_path / "src"
    shutil.copytree(images, src)
    code, _, err = run_cli(["data", "shard", src, src / "shards"], capsys)
    assert code == 2
    assert "Put the shards outside the dataset." in " ".join(err.split())
    assert not (src / "shards").exists()


def test_a_file_that_does_not_decode_is_left_out_and_listed(tmp_path, capsys):
    root = source(tmp_path / "images")
    bad = root / "train" / "c1" / "003.jpg"
    bad.write_bytes(bad.read_bytes()[:300])
    code, out, _ = run_cli(["data", "shard", root, tmp_path / "s"], capsys)
    assert code == 0
    assert "1 file(s) that do not decode, left out" in out and "train/c1/003.jpg" in out
    manifest = json.loads((tmp_path / "s" / ".runner-shards.json").read_text())
    assert manifest["splits"]["train"]["samples"] == 23
    assert manifest["skipped"][0][0] == "train/c1/003.jpg"
    assert "train/c1/003.jpg" in (tmp_path / "s" / ".runner-bad-files.txt").read_text()


def test_an_eval_class_the_train_split_lacks_stops_before_writing(tmp_path, capsys):
    root = source(tmp_path / "images")
    (root / "val" / "c2").rename(root / "val" / "zebra")
    code, _, err = run_cli(["data", "shard", root, tmp_path / "s"], capsys)
    assert code == 2 and "class folder(s) that the train split" in err and "'zebra'" in err
    assert not (tmp_path / "s").exists()


# ---- reading: the same batches as the ImageFolder ------------------------------------------------------

def batches(path: Path, role: str, rank: int, world: int, epochs: int = 2) -> list[list[tuple]]:
    from runner.dist import Dist
    from runner.loaders.loader import create_loader
    from runner.run.validate import validate

    loader = create_loader(validate(path, accelerator="cpu"), role, Dist(rank=rank, world=world))
    return [[(x.clone(), y.clone()) for x, y in loader.epoch()] for _ in range(epochs)]


@pytest.mark.parametrize("format", ["webdataset", "tfrecord"])
@pytest.mark.parametrize("role", ["train", "eval"])
@pytest.mark.parametrize("rank,world", [(0, 1), (1, 2)])
def test_shards_give_the_image_folders_batches_bit_for_bit(tmp_path, images, ordered, ordered_tfrecord, format, role,
                                                           rank, world):
    # the same images in the same order: the folder's files, its shards written in that order; train with the
    # readers' shuffles off (the file reader permutes images, the shard readers shards)
    params = ", shuffle: false"
    root = ordered if format == "webdataset" else ordered_tfrecord
    folder = batches(experiment(tmp_path, images, shards=False, train_params=params), role, rank, world)
    shards = batches(experiment(tmp_path, root, shards=True, train_params=params, format=format), role, rank, world)
    for a, b in zip(folder, shards):
        assert len(a) == len(b) > 0
        for (xa, ya), (xb, yb) in zip(a, b):
            assert torch.equal(xa, xb) and torch.equal(ya, yb)


def test_shuffled_training_reads_every_image_once_an_epoch_with_its_label(tmp_path, images, module_tmp):
    from runner.data.shard_write import build_shards

    build_shards(images, tmp_path / "s", shard_mb=0.02, shuffle_seed=3, workers=1)
    epochs = batches(experiment(tmp_path, tmp_path / "s", shards=True), "train", 0, 1, epochs=2)
    labels = [[int(v) for _, y in epoch for v in y.flatten()] for epoch in epochs]
    assert sorted(labels[0][:24]) == [0] * 8 + [1] * 8 + [2] * 8
    assert labels[0][:24] != sorted(labels[0][:24])


# ---- runs and data commands -------------------------------------------------------------------------

def test_a_run_on_shards_records_their_fingerprint_and_label_map(project, ordered, capsys):
    from mlflow import MlflowClient

    from runner.data.scan import fingerprint

    path = experiment(project / "experiments", ordered, shards=True)
    code, out, err = run_cli(["launch", path], capsys)
    assert code == 0, err
    client = MlflowClient(f"sqlite:///{project / 'mlflow.db'}")
    run = client.search_runs([client.get_experiment_by_name("shards").experiment_id])[0]
    fp = fingerprint(ordered / "train")
    assert run.data.params["data.fingerprint.train.sha256"] == fp["sha256"]
    assert run.data.params["data.fingerprint.train.files"] == "24"
    train = [d.dataset for d in run.inputs.dataset_inputs if "ordered/train" in d.dataset.source]
    assert len(train) == 1 and fp["sha256"].startswith(train[0].digest)
    label_map = json.loads(Path(client.download_artifacts(run.info.run_id, "label_map.json", str(project))).read_text())
    assert label_map == {"c0": 0, "c1": 1, "c2": 2}


def test_data_check_and_fingerprint_read_shard_sets(ordered, capsys):
    code, out, _ = run_cli(["data", "check", ordered], capsys)
    assert code == 0
    assert "24 of 24 samples decode (JPEG 24)." in out and "9 of 9 samples decode" in out
    code, out, _ = run_cli(["data", "fingerprint", ordered / "train"], capsys)
    assert code == 0 and "24 samples in" in out and "in the source's order" in out and "made from" in out


def test_data_check_names_a_sample_that_does_not_decode(tmp_path, ordered, capsys):
    from runner.data.shardset import parse_index

    dst = tmp_path / "s"
    shutil.copytree(ordered, dst)
    tar = dst / "train" / "shard-000000.tar"
    sample = parse_index(tar.with_suffix(".idx"))[1]
    offset, size, _ = sample.components["jpg"]
    data = bytearray(tar.read_bytes())
    data[offset + 200:offset + size] = bytes(size - 200)   # the JPEG's scan zeroed, the tar whole
    tar.write_bytes(bytes(data))
    code, out, _ = run_cli(["data", "check", dst], capsys)
    assert code == 1
    assert f"shard-000000.tar: {sample.key} (c0/001.jpg)" in out


def test_a_sample_in_memory_fails_for_the_reason_its_file_would(tmp_path):
    from PIL import Image

    from runner.data.scan import setup_decoder, try_decode, try_decode_bytes

    setup_decoder()
    buf = io.BytesIO()
    Image.new("RGB", (64, 48), (200, 30, 30)).save(buf, "JPEG")
    jpeg = buf.getvalue()
    cases = {"whole": jpeg, "cut": jpeg[:300], "header": jpeg[:10], "text": b"hello, not a jpeg", "empty": b""}
    for name, data in cases.items():
        (tmp_path / name).write_bytes(data)
        assert try_decode_bytes(data) == try_decode(str(tmp_path / name)), name
    assert try_decode_bytes(jpeg[:300])[0] == "truncated JPEG (ends after 300 bytes)"
    assert try_decode_bytes(b"hello, not a jpeg")[0] == "not an image (a text file: 'hello, not a jpeg')"


# ---- broken shards --------------------------------------------------------------------------------------

def _truncate(root: Path) -> None:
    tar = root / "train" / "shard-000001.tar"
    tar.write_bytes(tar.read_bytes()[:3000])


def _drop_index(root: Path) -> None:
    (root / "train" / "shard-000001.idx").unlink()


def _other_index(root: Path) -> None:
    shutil.copyfile(root / "train" / "shard-000000.idx", root / "train" / "shard-000001.idx")


def _rewrite(root: Path, change) -> None:
    """shard-000001 written again by hand with `change(sample dict)` applied to its first sample, indexed by
    DALI's wds2idx, as a hand-made fix would leave it."""
    from wds2idx import IndexCreator

    tar = root / "train" / "shard-000001.tar"
    files = members(tar)
    keys = sorted({name.split(".", 1)[0] for name in files})
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as t:
        for n, key in enumerate(keys):
            sample = {name: data for name, data in files.items() if name.split(".", 1)[0] == key}
            if n == 0:
                change(key, sample)
            for name, data in sample.items():
                info = tarfile.TarInfo(name)
                info.size = len(data)
                t.addfile(info, io.BytesIO(data))
    tar.write_bytes(out.getvalue())
    with IndexCreator(str(tar), str(tar.with_suffix(".idx")), verbose=False) as creator:
        creator.create_index()


def _no_label(root: Path) -> None:
    _rewrite(root, lambda key, s: (s.pop(f"{key}.cls.i32"), s.pop(f"{key}.cls")))


def _label_beyond(root: Path) -> None:
    _rewrite(root, lambda key, s: s.update({f"{key}.cls.i32": struct.pack("<i", 7), f"{key}.cls": b"7"}))


BROKEN = {
    "truncated": (_truncate, "shard-000001.tar: is cut short: it holds 3000 bytes, but its index shard-000001.idx "
                             "places data up to byte"),
    "missing index": (_drop_index, "shard-000001.tar: has no index shard-000001.idx beside it."),
    "index of another shard": (_other_index, "shard-000001.tar: does not match its index shard-000001.idx: the "
                                             "index has '00000000."),
    "sample without a label": (_no_label, "has no label: no 'cls.i32' component"),
    "label beyond the classes": (_label_beyond, "shard-000001.tar: holds label 7, beyond the 3 classes of the set: "
                                                "labels run 0 to 2."),
}


def check_launch_refuses(project: Path, shards: Path, format: str, break_it, message: str, capsys) -> None:
    """A copy of `shards` broken by `break_it`: the launch stops with `message`, one paragraph, and changes nothing."""
    root = project / "shards"
    shutil.copytree(shards, root)
    break_it(root)
    before = digest(root)
    code, out, err = run_cli(["launch", experiment(project / "experiments", root, shards=True, format=format)], capsys)
    assert code == 2
    assert message in " ".join(err.split())
    assert "Traceback" not in err and len(err.strip().split("\n\n")) == 1
    assert digest(root) == before                     # nothing rewritten, nothing removed
    assert not (project / "mlflow.db").exists() or "FINISHED" not in out


@pytest.mark.parametrize("case", list(BROKEN))
def test_a_broken_shard_stops_the_launch_with_one_paragraph(project, ordered, case, capsys):
    check_launch_refuses(project, ordered, "webdataset", *BROKEN[case], capsys)


def test_a_model_with_fewer_outputs_than_the_shards_classes_is_refused(project, ordered, capsys):
    path = experiment(project / "experiments", ordered, shards=True, classes=2)
    code, _, err = run_cli(["launch", path], capsys)
    assert code == 2 and "Set model.num_classes=3" in " ".join(err.split())


def test_evaluate_on_shards_scores_a_folder_run_as_its_folder_does(project, images, ordered, capsys):
    from mlflow import MlflowClient

    path = experiment(project / "experiments", images, shards=False)
    assert run_cli(["launch", path], capsys)[0] == 0
    client = MlflowClient(f"sqlite:///{project / 'mlflow.db'}")
    run = client.search_runs([client.get_experiment_by_name("shards").experiment_id])[0]
    code, _, err = run_cli(["evaluate", run.info.run_id, f"data.root={ordered}", "pipelines.eval.use=imagenet_eval_wds",
                            "pipelines.train.use=imagenet_train_wds"], capsys)
    assert code == 0, err
    evaluated = client.search_runs([run.info.experiment_id], "tags.`runner.evaluates` != ''") or \
        [r for r in client.search_runs([run.info.experiment_id]) if r.info.run_id != run.info.run_id]
    top1 = {k: v for k, v in evaluated[0].data.metrics.items() if k.endswith("top1")}
    assert top1 and all(v == run.data.metrics["eval/top1"] for v in top1.values())


def test_a_file_reader_on_shards_and_a_shard_reader_on_files_say_which_pipeline(project, images, ordered, capsys):
    code, _, err = run_cli(["launch", experiment(project / "experiments", ordered, shards=False)], capsys)
    assert code == 2
    assert "holds WebDataset shards (`runner data shard`), but the train pipeline reads files with readers.file. " \
           "Read them with a readers.webdataset pipeline: pipelines.train.use=imagenet_train_wds." in " ".join(err.split())
    code, _, err = run_cli(["launch", experiment(project / "experiments", images, shards=True)], capsys)
    assert code == 2
    assert "which holds no shards that `runner data shard` wrote" in " ".join(err.split())


def test_reproduce_compares_the_shards_a_run_read_with_the_ones_here(project, images, capsys):
    from mlflow import MlflowClient

    from runner.data.shard_write import build_shards

    root = project / "shards"
    build_shards(images, root, shuffle_seed=None, workers=1)
    assert run_cli(["launch", experiment(project / "experiments", root, shards=True)], capsys)[0] == 0
    client = MlflowClient(f"sqlite:///{project / 'mlflow.db'}")
    run_id = client.search_runs([client.get_experiment_by_name("shards").experiment_id])[0].info.run_id
    code, out, err = run_cli(["reproduce", run_id, "--dry-run"], capsys)
    assert code == 0 and "the data differs" not in out + err
    shutil.rmtree(root)
    build_shards(images, root, shuffle_seed=9, workers=1)  # the same images, written in another order
    code, out, err = run_cli(["reproduce", run_id, "--dry-run"], capsys)
    assert code == 0
    assert "data (train)" in out + err and "the data differs from what the run read" in " ".join((out + err).split())


def test_a_compact_jpeg_cache_shards_and_its_manifest_says_so(tmp_path, images, capsys):
    assert run_cli(["data", "cache", images, tmp_path / "jpeg", "--format", "jpeg", "--max-side", "48"], capsys)[0] == 0
    (tmp_path / "s" / "train").mkdir(parents=True)
    dead = tmp_path / "s" / "train" / f".shard-000000.tar.tmp-{__import__('socket').gethostname()}-999999999"
    code, out, _ = run_cli(["data", "shard", tmp_path / "jpeg", tmp_path / "s"], capsys)
    assert code == 2 and "not a shard set made by runner" in " ".join(out.split() + _.split())
    shutil.rmtree(tmp_path / "s")
    assert run_cli(["data", "shard", tmp_path / "jpeg", tmp_path / "s"], capsys)[0] == 0
    manifest = json.loads((tmp_path / "s" / ".runner-shards.json").read_text())
    assert manifest["source_cache"].startswith("JPEG cache, longer side <= 48 px")
    assert manifest["splits"]["train"]["samples"] == 24
    dead.parent.mkdir(parents=True, exist_ok=True)
    dead.write_bytes(b"left by a build that was killed")
    assert run_cli(["data", "shard", tmp_path / "jpeg", tmp_path / "s"], capsys)[0] == 0
    assert not dead.exists()


# ---- TFRecord -------------------------------------------------------------------------------------------

def test_tfrecord_shards_hold_examples_with_the_source_bytes_and_labels(ordered_tfrecord, images):
    from runner.data.tfrecord import CLASS_KEY, IMAGE_KEY, LABEL_KEY, NAME_KEY, parse_index, read_examples

    manifest = json.loads((ordered_tfrecord / ".runner-shards.json").read_text())
    assert manifest["settings"]["format"] == "tfrecord" and manifest["splits"]["train"]["samples"] == 24
    seen = []
    for shard in sorted((ordered_tfrecord / "train").glob("*.tfrecord")):
        index = parse_index(shard.with_suffix(".idx"))
        assert index[0][0] == 0 and sum(size for _, size in index) == shard.stat().st_size
        for example in read_examples(shard, index):
            name = example[NAME_KEY].decode()
            assert example[IMAGE_KEY] == (images / "train" / name).read_bytes()
            assert example[CLASS_KEY].decode() == name.split("/")[0] == f"c{example[LABEL_KEY]}"
            seen.append(name)
    assert seen == sorted(seen) and len(seen) == 24    # --shuffle-seed none: the folder's order


def _tf_rewrite(root: Path, change) -> None:
    """train/shard-000001.tfrecord written again with change(features) on its first record, and indexed."""
    from tfrecord.writer import TFRecordWriter

    from runner.data.tfrecord import parse_index, read_examples

    shard = root / "train" / "shard-000001.tfrecord"
    examples = list(read_examples(shard, parse_index(shard.with_suffix(".idx"))))
    change(examples[0])
    writer = TFRecordWriter(str(shard))
    for example in examples:
        writer.write({k: (v, "int" if isinstance(v, int) else "byte") for k, v in example.items()})
    writer.close()
    offsets, offset = [], 0
    data = shard.read_bytes()
    while offset < len(data):
        size = struct.unpack("<Q", data[offset:offset + 8])[0] + 16
        offsets.append(f"{offset} {size}\n")
        offset += size
    shard.with_suffix(".idx").write_text("".join(offsets))


TF_BROKEN = {
    "truncated": (lambda r: (r / "train" / "shard-000001.tfrecord").write_bytes(
        (r / "train" / "shard-000001.tfrecord").read_bytes()[:3000]), "shard-000001.tfrecord: is cut short"),
    "missing index": (lambda r: (r / "train" / "shard-000001.idx").unlink(),
                      "shard-000001.tfrecord: has no index shard-000001.idx beside it."),
    "index of another shard": (lambda r: shutil.copyfile(r / "train" / "shard-000002.idx", r / "train" / "shard-000001.idx"),
                               "shard-000001.tfrecord: does not match its index shard-000001.idx"),
    "sample without a label": (lambda r: _tf_rewrite(r, lambda e: e.pop("image/class/label")),
                               "shard-000001.tfrecord: record 0 has no label: no single int64 'image/class/label'"),
    "label beyond the classes": (lambda r: _tf_rewrite(r, lambda e: e.update({"image/class/label": 9})),
                                 "shard-000001.tfrecord: holds label 9, beyond the 3 classes of the set"),
}


@pytest.mark.parametrize("case", list(TF_BROKEN))
def test_a_broken_tfrecord_shard_stops_the_launch_with_one_paragraph(project, ordered_tfrecord, case, capsys):
    check_launch_refuses(project, ordered_tfrecord, "tfrecord", *TF_BROKEN[case], capsys)


def test_data_check_decodes_every_tfrecord_sample(ordered_tfrecord, capsys):
    code, out, _ = run_cli(["data", "check", ordered_tfrecord], capsys)
    assert code == 0 and "24 of 24 samples decode (JPEG 24)." in out


def test_a_webdataset_reader_on_tfrecord_shards_names_the_pipelines(project, ordered_tfrecord, capsys):
    code, _, err = run_cli(["launch", experiment(project / "experiments", ordered_tfrecord, shards=True)], capsys)
    assert code == 2
    assert "holds tfrecord shards, which readers.webdataset does not read: use the imagenet_*_tfrecord pipelines." \
        in " ".join(err.split())


def _unfinished(root: Path) -> None:
    manifest = json.loads((root / ".runner-shards.json").read_text())
    (root / ".runner-shards.json").write_text(json.dumps({**manifest, "complete": False}))


def _extra_shard(root: Path) -> None:
    shutil.copyfile(root / "train" / "shard-000000.tar", root / "train" / "shard-000099.tar")


SET_BROKEN = {
    "unfinished build": (_unfinished, "is a shard set whose build did not finish, so it holds only part of its source"),
    "a listed shard missing": (lambda r: (r / "train" / "shard-000002.tar").unlink(),
                               "lacks 1 shard that its manifest lists: shard-000002.tar. Copy them again, or run"),
    "a shard not listed": (_extra_shard, "holds 1 shard that its manifest does not list: shard-000099.tar (a reader "
                                         "would read them too, with labels runner never checked)."),
}


@pytest.mark.parametrize("case", list(SET_BROKEN))
def test_a_shard_set_that_does_not_match_its_manifest_stops_the_launch(project, ordered, case, capsys):
    check_launch_refuses(project, ordered, "webdataset", *SET_BROKEN[case], capsys)


def test_eval_shards_numbered_by_another_map_are_refused(project, images, module_tmp, capsys):
    from runner.data.shard_write import build_shards

    other = source(project / "other")
    (other / "val" / "c0").rename(other / "val" / "a0")       # another train map: a0, c1, c2 -> val labels shift
    (other / "train" / "c0").rename(other / "train" / "a0")
    build_shards(other, project / "other-shards", workers=1)
    path = experiment(project / "experiments", images, shards=False)
    code, _, err = run_cli(["launch", path, f"data.eval_split={project / 'other-shards' / 'val'}",
                            "pipelines.eval.use=imagenet_eval_wds"], capsys)
    assert code == 2
    assert "holds shards whose labels number 3 classes by the map in" in " ".join(err.split())
    assert "first difference at label 0" in " ".join(err.split())


def test_a_source_without_the_train_split_names_the_option(tmp_path, images, capsys):
    code, _, err = run_cli(["data", "shard", images, tmp_path / "s", "--train-split", "training"], capsys)
    assert code == 2
    assert "holds the splits train, val but no 'training': the label map is the train split's classes. Name the " \
           "train split with --train-split." in " ".join(err.split())
