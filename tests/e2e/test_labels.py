"""Labels by class name through launch, reproduce and resume: a gapped eval split noted once with its label map
logged, a reproduction over data that numbers classes differently warned, a resume over relabelled folders refused.
tests/unit/data/test_labels.py holds the map and its checks."""
from __future__ import annotations

import json
from pathlib import Path

from mlflow import MlflowClient

from tests.fixtures.labels import dataset, experiment
from tests.helpers import run_cli


def test_launch_over_a_gapped_eval_split_notes_it_once_and_logs_the_label_map(project, gapped, capsys):
    code, out, err = run_cli(["launch", experiment(project, gapped)], capsys)
    assert code == 0, err
    note = ("note: gapped/val has no folder for 1 of the 3 classes of gapped/train ('bee'); evaluation counts the "
            "images it has, each labelled by its class name as in the train split.")
    assert err.count(note) == 1, err
    client = MlflowClient(f"sqlite:///{project}/mlflow.db")
    (run,) = client.search_runs([client.get_experiment_by_name("tiny").experiment_id])
    assert run.data.params["data.num_classes"] == "3"
    logged = Path(client.download_artifacts(run.info.run_id, "label_map.json", str(project))).read_text()
    assert json.loads(logged) == {"ant": 0, "bee": 1, "cat": 2}
    assert [m.value for m in client.get_metric_history(run.info.run_id, "eval/samples")] == [10]


def test_reproduce_warns_when_the_data_here_numbers_the_classes_differently(project, capsys):
    import torch

    origin = dataset(project / "origin", ("ant", "bee", "cat"), ("ant", "bee", "cat"))
    try:
        code, _, err = run_cli(["launch", experiment(project, origin)], capsys)
    finally:
        torch.use_deterministic_algorithms(False)
    assert code == 0, err
    uri = f"sqlite:///{project}/mlflow.db"
    client = MlflowClient(uri)
    (run,) = client.search_runs([client.get_experiment_by_name("tiny").experiment_id])
    here = dataset(project / "here", ("aardvark", "ant", "cat"), ("aardvark", "ant", "cat"))
    code, out, err = run_cli(["reproduce", run.info.run_id, "--uri", uri, f"data.root={here}", "--dry-run"], capsys)
    assert code == 0, err
    rows = [line for line in err.splitlines() if "classes " in line and "│" in line]
    assert len(rows) == 3, err
    assert "classes missing here (1)" in rows[0] and "bee=1" in rows[0]
    assert "classes only here (1)" in rows[1] and "aardvark=0" in rows[1]
    assert "classes renumbered (1)" in rows[2] and "ant=0" in rows[2] and "ant=1" in rows[2]
    assert (f"note: the train split here maps class names to other labels than run {run.info.run_id[:8]} logged in "
            "label_map.json") in err
    code, _, err = run_cli(["reproduce", run.info.run_id, "--uri", uri, "--dry-run"], capsys)
    assert code == 0 and "classes " not in err, err


def test_a_resume_over_relabelled_class_folders_is_refused(project, capsys):
    from runner.data.labels import load_label_map

    root = dataset(project / "data", ("ant", "bee", "cat"), ("ant", "bee", "cat"))
    path = experiment(project, root)
    code, _, err = run_cli(["launch", path], capsys)
    assert code == 0, err
    before = load_label_map(root / "train").digest
    for split in ("train", "val"):
        (root / split / "bee").rename(root / split / "dog")  # same count, other names: cat is now 1
    after = load_label_map(root / "train").digest
    code, _, err = run_cli(["launch", path, "--resume", "last"], capsys)
    assert code == 2, err
    assert f"data.label_map: {before} in the checkpoint, {after} now" in err
    assert before.startswith("3 classes, sha256 ") and before != after
