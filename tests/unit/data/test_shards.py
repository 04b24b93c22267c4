"""`runner data shard` and the WebDataset pipelines: shards, DALI indexes, labels by name, the manifest, resume,
batches identical to the ImageFolder's, the data commands on shards, and a broken shard's one-paragraph error."""
from __future__ import annotations

import io
import json
import shutil
import struct
from pathlib import Path

import pytest
import torch

from tests.fixtures.shards import batches, check_launch_refuses, experiment, members, source
from tests.helpers import run_cli


@pytest.fixture(scope="module")
def ordered_tfrecord(module_tmp, images) -> Path:
    from runner.data.shard_write import build_shards

    build_shards(images, module_tmp / "ordered-tfrecord", format="tfrecord", shard_mb=0.02, shuffle_seed=None,
                 workers=2)
    return module_tmp / "ordered-tfrecord"


def test_index_offsets_point_at_each_component(ordered):
    from runner.data.shardset import parse_index

    tar = ordered / "train" / "shard-000000.tar"
    data = tar.read_bytes()
    files = members(tar)
    for sample in parse_index(tar.with_suffix(".idx")):
        for ext, (offset, size, name) in sample.components.items():
            assert name == f"{sample.key}.{ext}"
            assert data[offset:offset + size] == files[name]


def test_shards_inside_their_source_are_refused_before_anything_is_written(tmp_path, images, capsys):
    src = tmp_path / "src"
    shutil.copytree(images, src)
    code, _, err = run_cli(["data", "shard", src, src / "shards"], capsys)
    assert code == 2
    assert "Put the shards outside the dataset." in " ".join(err.split())
    assert not (src / "shards").exists()


def test_an_eval_class_the_train_split_lacks_stops_before_writing(tmp_path, capsys):
    root = source(tmp_path / "images")
    (root / "val" / "c2").rename(root / "val" / "zebra")
    code, _, err = run_cli(["data", "shard", root, tmp_path / "s"], capsys)
    assert code == 2 and "class folder(s) that the train split" in err and "'zebra'" in err
    assert not (tmp_path / "s").exists()


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


def test_data_check_and_fingerprint_read_shard_sets(ordered, capsys):
    code, out, _ = run_cli(["data", "check", ordered], capsys)
    assert code == 0
    assert "24 of 24 samples decode (JPEG 24)." in out and "9 of 9 samples decode" in out
    code, out, _ = run_cli(["data", "fingerprint", ordered / "train"], capsys)
    assert code == 0 and "24 samples in" in out and "in the source's order" in out and "made from" in out


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


def test_a_model_with_fewer_outputs_than_the_shards_classes_is_refused(project, ordered, capsys):
    path = experiment(project / "experiments", ordered, shards=True, classes=2)
    code, _, err = run_cli(["launch", path], capsys)
    assert code == 2 and "Set model.num_classes=3" in " ".join(err.split())


def test_a_file_reader_on_shards_and_a_shard_reader_on_files_say_which_pipeline(project, images, ordered, capsys):
    code, _, err = run_cli(["launch", experiment(project / "experiments", ordered, shards=False)], capsys)
    assert code == 2
    assert "holds WebDataset shards (`runner data shard`), but the train pipeline reads files with readers.file. " \
           "Read them with a readers.webdataset pipeline: pipelines.train.use=imagenet_train_wds." in " ".join(err.split())
    code, _, err = run_cli(["launch", experiment(project / "experiments", images, shards=True)], capsys)
    assert code == 2
    assert "which holds no shards that `runner data shard` wrote" in " ".join(err.split())


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


def test_a_source_without_the_train_split_names_the_option(tmp_path, images, capsys):
    code, _, err = run_cli(["data", "shard", images, tmp_path / "s", "--train-split", "training"], capsys)
    assert code == 2
    assert "holds the splits train, val but no 'training': the label map is the train split's classes. Name the " \
           "train split with --train-split." in " ".join(err.split())
