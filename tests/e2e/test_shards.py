"""`runner data shard` and runs on shards: WebDataset and TFRecord shards written, resumed and checked; a run on
shards records their fingerprint and label map, reads every image once an epoch, is evaluated and reproduced as a
folder run is, and stops with one paragraph on a broken shard. tests/unit/data/test_shards.py holds the checks
made before any work."""
from __future__ import annotations

import io
import json
import shutil
import struct
import tarfile
from pathlib import Path

import pytest

from tests.fixtures.shards import batches, check_launch_refuses, digest, experiment, members, source
from tests.helpers import run_cli


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


@pytest.mark.parametrize("case", list(BROKEN))
def test_a_broken_shard_stops_the_launch_with_one_paragraph(project, ordered, case, capsys):
    check_launch_refuses(project, ordered, "webdataset", *BROKEN[case], capsys)


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


def test_shuffled_training_reads_every_image_once_an_epoch_with_its_label(tmp_path, images, module_tmp):
    from runner.data.shard_write import build_shards

    build_shards(images, tmp_path / "s", shard_mb=0.02, shuffle_seed=3, workers=1)
    epochs = batches(experiment(tmp_path, tmp_path / "s", shards=True), "train", 0, 1, epochs=2)
    labels = [[int(v) for _, y in epoch for v in y.flatten()] for epoch in epochs]
    assert sorted(labels[0][:24]) == [0] * 8 + [1] * 8 + [2] * 8
    assert labels[0][:24] != sorted(labels[0][:24])


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
