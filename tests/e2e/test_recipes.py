"""The shipped recipes (experiments/resnet50_ffcv.yaml, resnet50_rsb_a3.yaml): they validate with the settings their
files cite, and each trains a few steps on the CPU through runner launch with every part of the recipe on."""
from __future__ import annotations

import pytest
from mlflow import MlflowClient

from tests.helpers import REPO, write_image_folder

# a few CPU steps: the recipe as shipped, on a small folder of 3 classes with small batches
SMALL = ["model.num_classes=3", "data.root=data", "data.batch_size=4", "data.eval_batch_size=4",
         "trainer.max_steps=3", "trainer.log_every_n_steps=1", "data.num_threads=1"]


@pytest.fixture
def small_project(project):
    for name in ("resnet50_dali.yaml", "resnet50_ffcv.yaml", "resnet50_rsb_a3.yaml"):
        if (REPO / "experiments" / name).exists():
            (project / "experiments" / name).write_text((REPO / "experiments" / name).read_text())
    write_image_folder(project / "data" / "train", classes=3, per_class=4, seed=1)
    write_image_folder(project / "data" / "val", classes=3, per_class=2, seed=2)
    return project


@pytest.mark.parametrize("name,extra", [
    ("resnet50_ffcv", ["trainer.global_batch_size=8", "trainer.precision=fp32"]),  # fp16 on a CPU: 5x slower
    ("resnet50_rsb_a3", ["trainer.global_batch_size=8", "trainer.precision=fp32"]),
])
def test_recipe_trains_a_few_steps_on_cpu(small_project, name, extra):
    from tests.helpers import launched

    launched(small_project, f"experiments/{name}.yaml", *SMALL, *extra)
    client = MlflowClient(f"sqlite:///{small_project}/mlflow.db")
    (run,) = client.search_runs([client.get_experiment_by_name("resnet50").experiment_id])
    assert run.info.status == "FINISHED"
    assert [m.step for m in client.get_metric_history(run.info.run_id, "train/loss")] == [1, 2, 3]
    assert "eval/top1" in run.data.metrics
