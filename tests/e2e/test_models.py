"""The quickstart trains a timm model (model.name: timm/<name>). tests/unit/models/test_zoo.py holds the zoo."""
from __future__ import annotations

import torch


def test_the_quickstart_trains_a_timm_model(project, capsys):
    from mlflow import MlflowClient

    from tests.helpers import REPO, run_cli

    code, out, err = run_cli(["launch", REPO / "experiments" / "quickstart.yaml", "model.name=timm/resnet18",
                              "trainer.max_steps=2", "trainer.log_every_n_steps=1", "data.batch_size=4",
                              "data.synth.classes=2", "data.synth.per_class=4", "data.synth.eval_per_class=2"], capsys)
    assert code == 0, err
    client = MlflowClient(f"sqlite:///{project}/mlflow.db")
    (run,) = client.search_runs([client.get_experiment_by_name("quickstart").experiment_id])
    assert run.info.status == "FINISHED"
    assert (run.data.params["model.name"], run.data.params["model.num_classes"]) == ("timm/resnet18", "10")
    assert [m.step for m in client.get_metric_history(run.info.run_id, "train/loss")] == [1, 2]
    state = torch.load(project / "checkpoints" / "quickstart" / run.info.run_id / "last.pt", weights_only=False)
    assert state["step"] == 2 and state["fixed_settings"]["model.name"] == "timm/resnet18"
    assert state["model"]["fc.weight"].shape == (10, 512)  # timm's ResNet-18 head, for the 10 classes
