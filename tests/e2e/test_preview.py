"""A launch logs its first train and eval batches as `runner preview` draws them.
tests/unit/preview/test_preview.py holds the grids."""
from __future__ import annotations

import numpy as np

from tests.fixtures.preview import read_png
from tests.helpers import run_cli


def test_launch_logs_its_first_train_and_eval_batches_as_the_preview_draws_them(experiment, project, capsys):
    from mlflow import MlflowClient

    code, _, err = run_cli(["launch", experiment, "trainer.max_steps=2"], capsys)
    assert code == 0, err
    client = MlflowClient(f"sqlite:///{project}/mlflow.db")
    [run] = client.search_runs([client.get_experiment_by_name("colours").experiment_id])
    assert {a.path for a in client.list_artifacts(run.info.run_id, "preview")} == {"preview/train.png",
                                                                                   "preview/eval.png"}
    for role in ("train", "eval"):
        logged = client.download_artifacts(run.info.run_id, f"preview/{role}.png", str(project))
        from pathlib import Path

        _, launch_pixels = read_png(Path(logged))
        code, _, err = run_cli(["preview", experiment, "--pipeline", role, "-n", "6", "-o", f"p-{role}.png"], capsys)
        assert code == 0, err
        _, preview_pixels = read_png(project / f"p-{role}.png")
        # one batch of 6 (train) or the eval batch of 6: 3 columns of 160 px
        assert launch_pixels.shape[1] == 3 * 160 + 4 * 8
        assert np.array_equal(launch_pixels, preview_pixels)
