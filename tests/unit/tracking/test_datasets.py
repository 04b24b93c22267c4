"""Each data split a run reads is one of its MLflow dataset inputs: digest = the data fingerprint."""
from __future__ import annotations

import shutil

import pytest
from mlflow import MlflowClient

from runner.tracking import MlflowTracker, data_input, load_bundle, sync_offline
from tests.fixtures.tracking_datasets import inputs_of
from tests.helpers import free_port

EXPERIMENT = "datasets"


@pytest.fixture
def store(tmp_path, template_db) -> str:
    shutil.copy(template_db, tmp_path / "mlflow.db")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    MlflowClient(uri).create_experiment(EXPERIMENT, artifact_location=str(tmp_path / "artifacts"))
    return uri


def split(context: str, sha: str) -> object:
    return data_input(name=f"data/{context}", sha256=sha, source=f"/data/{context}", context=context,
                      profile={"files": 3, "bytes": 100, "classes": 1, "sha256": sha})


def test_digest_is_the_fingerprint_cut_to_what_mlflow_keeps():
    sha = "ab" * 32
    assert split("training", sha).digest == sha[:36]


def test_inputs_kept_offline_are_replayed_by_sync(store, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    t = MlflowTracker(f"http://127.0.0.1:{free_port()}", EXPERIMENT, run_name="away")  # nothing listens there
    t.start({"lr": 0.1})
    t.log_input(split("training", "1" * 64))
    t.log_input(split("eval", "2" * 64))
    result = t.finish(timeout_s=1)
    assert not result.delivered
    assert [d["context"] for d in load_bundle(result.bundle).meta["inputs"]] == ["training", "eval"]

    run_id = sync_offline(result.bundle, store)
    got = inputs_of(MlflowClient(store), run_id)
    assert got == {c: {"name": f"data/{c}", "digest": sha[:36], "source": {"uri": f"/data/{c}"},
                       "source_type": "local", "profile": {"files": 3, "bytes": 100, "classes": 1, "sha256": sha}}
                   for c, sha in (("training", "1" * 64), ("eval", "2" * 64))}
