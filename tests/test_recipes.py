"""The shipped recipes (experiments/resnet50_ffcv.yaml, resnet50_rsb_a3.yaml): they validate with the settings their
files cite, and each trains a few steps on the CPU through runner launch with every part of the recipe on."""
from __future__ import annotations

import pytest
from mlflow import MlflowClient

from runner.config.load import load_experiment
from tests.conftest import REPO, write_image_folder

# a few CPU steps: the recipe as shipped, on a small folder of 3 classes with small batches
SMALL = ["model.num_classes=3", "data.root=data", "data.batch_size=4", "data.eval_batch_size=4",
         "trainer.max_steps=3", "trainer.log_every_n_steps=1", "data.num_threads=1"]


def test_ffcv_recipe_says_what_ffcv_says():
    cfg = load_experiment(REPO / "experiments" / "resnet50_ffcv.yaml").config
    assert (cfg.optimizer.name, cfg.optimizer.lr, cfg.optimizer.lr_reference_batch) == ("sgd", 1.7, 4096)
    assert (cfg.optimizer.momentum, cfg.optimizer.weight_decay) == (0.9, 1e-4)
    assert (cfg.scheduler.name, cfg.scheduler.warmup_epochs, cfg.scheduler.warmup_start_factor) == ("linear", 2, 1e-4)
    assert (cfg.trainer.epochs, cfg.trainer.global_batch_size, cfg.data.batch_size) == (16, 4096, 512)
    assert (cfg.trainer.label_smoothing, cfg.trainer.eval_tta, cfg.trainer.precision) == (0.1, "flip", "fp16")
    r = cfg.pipelines.train.resolution
    assert (r.min, r.max, r.start_epoch, r.end_epoch) == (160, 192, 11, 13)
    assert cfg.pipelines.eval.params == {"size": 256, "resize_shorter": 292.57}


def test_rsb_a3_recipe_says_what_table_1_says():
    cfg = load_experiment(REPO / "experiments" / "resnet50_rsb_a3.yaml").config
    o, t = cfg.optimizer, cfg.trainer
    assert (cfg.model.name, o.name, o.lr, o.lr_reference_batch, o.weight_decay) == ("timm/resnet50", "lamb", 8e-3,
                                                                                     2048, 0.02)
    assert (cfg.scheduler.name, cfg.scheduler.warmup_epochs, t.epochs, t.global_batch_size) == ("cosine", 5, 100, 2048)
    assert (t.loss.name, t.loss.target_threshold, t.label_smoothing, t.ema, cfg.data.repeats) == ("bce", 0.2, 0.0,
                                                                                                  None, 1)
    train = cfg.pipelines.train
    assert train.params == {"size": 160, "policy": "rand-m6-mstd0.5-inc1", "reprob": 0.0}
    assert (train.mix.mixup_alpha, train.mix.cutmix_alpha, train.mix.switch_prob) == (0.1, 1.0, 0.5)
    assert cfg.pipelines.eval.params == {"size": 224, "resize_shorter": 235.79}


@pytest.fixture
def small_project(project):
    for name in ("resnet50_dali.yaml", "resnet50_ffcv.yaml", "resnet50_rsb_a3.yaml"):
        if (REPO / "experiments" / name).exists():
            (project / "experiments" / name).write_text((REPO / "experiments" / name).read_text())
    write_image_folder(project / "data" / "train", classes=3, per_class=4, seed=1)
    write_image_folder(project / "data" / "val", classes=3, per_class=2, seed=2)
    return project


@pytest.mark.slow
@pytest.mark.parametrize("name,extra", [
    ("resnet50_ffcv", ["trainer.global_batch_size=8", "trainer.precision=fp32"]),  # fp16 on a CPU: 5x slower
    ("resnet50_rsb_a3", ["trainer.global_batch_size=8", "trainer.precision=fp32"]),
])
def test_recipe_trains_a_few_steps_on_cpu(small_project, name, extra):
    from tests.test_budgets import launched

    launched(small_project, f"experiments/{name}.yaml", *SMALL, *extra)
    client = MlflowClient(f"sqlite:///{small_project}/mlflow.db")
    (run,) = client.search_runs([client.get_experiment_by_name("resnet50").experiment_id])
    assert run.info.status == "FINISHED"
    assert [m.step for m in client.get_metric_history(run.info.run_id, "train/loss")] == [1, 2, 3]
    assert "eval/top1" in run.data.metrics
