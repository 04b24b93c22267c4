"""Each data split a run reads is one of its MLflow dataset inputs: digest = the data fingerprint."""
from __future__ import annotations

import json
import shutil

import pytest
from mlflow import MlflowClient

from runner.data.scan import fingerprint
from runner.tracking import MlflowTracker, data_input, load_bundle, sync_offline
from tests.conftest import free_port, run_cli

EXPERIMENT = "datasets"

TINY = """\
name: tiny
seed: 3
model: {{name: resnet18, num_classes: 3}}
trainer: {{epochs: 1, log_every_n_steps: 2, checkpoint_every_n_epochs: 0}}
data: {{root: {root}, batch_size: 8}}
pipelines:
  train: {{use: imagenet_train, params: {{size: 32}}}}
  eval: {{use: imagenet_eval, params: {{size: 32, resize_shorter: 36}}}}
tracking: {{experiment: tiny}}
"""


def inputs_of(client: MlflowClient, run_id: str) -> dict[str, dict]:
    """context -> name, digest, source, source_type, profile of the run's dataset inputs."""
    found = {}
    for item in client.get_run(run_id).inputs.dataset_inputs:
        tags = {t.key: t.value for t in item.tags}
        d = item.dataset
        found[tags["mlflow.data.context"]] = {"name": d.name, "digest": d.digest, "source": json.loads(d.source),
                                              "source_type": d.source_type, "profile": json.loads(d.profile)}
    return found


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


@pytest.mark.slow
def test_launch_logs_each_split_and_runs_on_the_same_data_share_a_digest(project, image_dataset, capsys):
    path = project / "experiments" / "tiny.yaml"
    path.write_text(TINY.format(root=image_dataset))
    for seed in (0, 1):
        code, _, err = run_cli(["launch", path, f"seed={seed}"], capsys)
        assert code == 0, err
    client = MlflowClient(f"sqlite:///{project}/mlflow.db")
    runs = client.search_runs([client.get_experiment_by_name("tiny").experiment_id])
    assert len(runs) == 2
    root = image_dataset.resolve()
    for run in runs:
        got = inputs_of(client, run.info.run_id)
        assert set(got) == {"training", "eval"}
        for context, folder in (("training", "train"), ("eval", "val")):
            fp = fingerprint(root / folder)
            assert run.data.params[f"data.fingerprint.{'train' if folder == 'train' else 'eval'}.sha256"] == fp["sha256"]
            assert got[context] == {"name": f"{root.name}/{folder}", "digest": fp["sha256"][:36],
                                    "source": {"uri": str(root / folder)}, "source_type": "local",
                                    "profile": fp}
    assert inputs_of(client, runs[0].info.run_id) == inputs_of(client, runs[1].info.run_id)
