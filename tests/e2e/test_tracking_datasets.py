"""A launch logs each data split it reads as an MLflow dataset input; runs on the same data share a digest.
tests/unit/tracking/test_datasets.py holds the digest and the offline replay."""
from __future__ import annotations

from mlflow import MlflowClient

from runner.data.scan import fingerprint
from tests.fixtures.tracking_datasets import inputs_of
from tests.helpers import run_cli

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
