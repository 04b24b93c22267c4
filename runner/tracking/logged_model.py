"""A run's LoggedModel (MLflow's Models column): its best checkpoint in the run's artifacts, with its files."""
from __future__ import annotations

import json
import logging
import tempfile
from pathlib import Path
from typing import Any

from runner.tracking.uri import mlflow_client

# mlflow is imported where a LoggedModel is made, for start-up (~2 s).

log = logging.getLogger(__name__)


def log_logged_model(uri: str, run_id: str, name: str, index: dict[str, Any], files: dict[str, str]) -> str | None:
    """A LoggedModel of the run (MLflow 3's Models tab) that points at its best checkpoint, without a second
    copy of the weights: its artifacts are the label map, the experiment and a checkpoint.json naming
    runs:/RUN_ID/checkpoints/... . Returns its id, None when the store refused (logged, never raised)."""
    try:
        c = mlflow_client(uri)
        run = c.get_run(run_id)
        chosen = index.get("best") or index["last"]
        model = c.create_logged_model(experiment_id=run.info.experiment_id, name=name, source_run_id=run_id,
                                      model_type="runner-checkpoint",
                                      tags={"runner.checkpoint": f"runs:/{run_id}/{chosen}"},
                                      params={"checkpoint": chosen, "which": "best" if index.get("best") else "last",
                                              **{f"best.{k}": str(v) for k, v in
                                                 (index.get("best_metrics") or {}).items()}})
        with tempfile.TemporaryDirectory(prefix="runner-model-") as tmp:
            (Path(tmp) / "checkpoint.json").write_text(json.dumps({"run_id": run_id, "artifact": chosen,
                                                                   "uri": f"runs:/{run_id}/{chosen}", **index},
                                                                  indent=1))
            for file_name, text in files.items():
                (Path(tmp) / file_name).write_text(text)
            c.log_model_artifacts(model.model_id, tmp)
        from mlflow.entities import LoggedModelOutput

        c.log_outputs(run_id, [LoggedModelOutput(model.model_id, int(index.get("steps", {}).get(chosen, 0)))])
        c.finalize_logged_model(model.model_id, "READY")
        return model.model_id
    except Exception as e:  # noqa: BLE001 - the checkpoints are in the store already; the model is a pointer
        log.warning("the run's checkpoints are logged, but MLflow at %s refused its LoggedModel: %s", uri,
                    str(e).strip().splitlines()[0][:200] if str(e).strip() else type(e).__name__)
        return None
