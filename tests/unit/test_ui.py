"""`runner ui`: the address it prints opens the runs of the newest experiment in MLflow's "Model training"
view, MLflow's own output goes to a log file, and stopping it stops every process of MLflow's server."""
from __future__ import annotations

import socket

from runner.commands.ui import page_address
from tests.helpers import run_cli


def test_page_address_is_the_runs_in_the_model_training_view():
    assert page_address("http://localhost:5000", "7") == \
        "http://localhost:5000/#/experiments/7/runs?workflowType=machine_learning"
    assert page_address("http://localhost:5000", None) == "http://localhost:5000/#/experiments?workflowType=machine_learning"


def test_unknown_experiment_is_refused_with_the_ones_there(ui_store, capsys):
    root, _ = ui_store
    code, out, err = run_cli(["ui", "--uri", root / "mlflow.db", "--experiment", "nwer"], capsys)
    assert code == 2 and out == ""
    assert err.startswith(f"error: --experiment: no experiment 'nwer' in sqlite:///{root / 'mlflow.db'}. "
                          "Did you mean 'newer'? Experiments there: ")


def test_a_port_in_use_is_refused_before_mlflow_starts(ui_store, capsys):
    root, _ = ui_store
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        port = held.getsockname()[1]
        code, _, err = run_cli(["ui", "--uri", root / "mlflow.db", "--port", port], capsys)
    assert code == 2
    assert f"error: --port: cannot serve on 127.0.0.1:{port}: Address already in use." in " ".join(err.split())
    assert not (root / "mlflow-ui.log").exists()
