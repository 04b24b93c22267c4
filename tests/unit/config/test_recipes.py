"""The shipped recipes (experiments/resnet50_ffcv.yaml, resnet50_rsb_a3.yaml) validate with the settings their
sources cite. tests/e2e/test_recipes.py trains each a few steps on the CPU."""
from __future__ import annotations

from runner.config.load import load_experiment
from tests.helpers import REPO


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
