"""`runner ui`: the address it prints opens the runs of the newest experiment in MLflow's "Model training"
view, MLflow's own output goes to a log file, and stopping it stops every process of MLflow's server."""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import psutil
import pytest
from mlflow import MlflowClient

from runner.commands.ui import page_address
from tests.conftest import REPO, free_port, run_cli


@pytest.fixture
def store(tmp_path, template_db):
    """tmp/mlflow.db with two experiments; 'newer' holds the newest run."""
    shutil.copy(template_db, tmp_path / "mlflow.db")
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    ids = {}
    for name in ("older", "newer"):
        ids[name] = client.create_experiment(name, artifact_location=str(tmp_path / "artifacts" / name))
        client.set_terminated(client.create_run(ids[name]).info.run_id)
        time.sleep(0.01)
    return tmp_path, ids


def test_page_address_is_the_runs_in_the_model_training_view():
    assert page_address("http://localhost:5000", "7") == \
        "http://localhost:5000/#/experiments/7/runs?workflowType=machine_learning"
    assert page_address("http://localhost:5000", None) == "http://localhost:5000/#/experiments?workflowType=machine_learning"


def test_unknown_experiment_is_refused_with_the_ones_there(store, capsys):
    root, _ = store
    code, out, err = run_cli(["ui", "--uri", root / "mlflow.db", "--experiment", "nwer"], capsys)
    assert code == 2 and out == ""
    assert err.startswith(f"error: --experiment: no experiment 'nwer' in sqlite:///{root / 'mlflow.db'}. "
                          "Did you mean 'newer'? Experiments there: ")


def test_a_port_in_use_is_refused_before_mlflow_starts(store, capsys):
    root, _ = store
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        port = held.getsockname()[1]
        code, _, err = run_cli(["ui", "--uri", root / "mlflow.db", "--port", port], capsys)
    assert code == 2
    assert f"error: --port: cannot serve on 127.0.0.1:{port}: Address already in use." in " ".join(err.split())
    assert not (root / "mlflow-ui.log").exists()


@pytest.mark.slow
@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT])
def test_serves_quietly_and_a_stop_leaves_no_process_behind(store, stop):
    root, ids = store
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    ui = subprocess.Popen([sys.executable, "-m", "runner", "ui", "--uri", "mlflow.db", "--port", str(port)],
                          cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        first = ui.stdout.readline()  # printed once the server answers
        address = f"http://localhost:{port}/#/experiments/{ids['newer']}/runs?workflowType=machine_learning"
        assert first == f"MLflow UI on sqlite:///{root / 'mlflow.db'}: {address}\n"
        assert ui.stdout.readline() == f"server log: {root / 'mlflow-ui.log'} (Ctrl-C stops it)\n"
        with urllib.request.urlopen(f"http://localhost:{port}/", timeout=10) as page:
            assert page.status == 200 and b"<title>MLflow</title>" in page.read()
        server = psutil.Process(ui.pid).children(recursive=True)
        assert len(server) >= 2  # mlflow ui, uvicorn and its worker
        assert "Uvicorn running on" in (root / "mlflow-ui.log").read_text()

        ui.send_signal(stop)
        assert ui.wait(30) == 128 + stop
        out, err = ui.communicate()
    finally:
        if ui.poll() is None:
            ui.kill()
    assert out == ""
    assert err == f"stopping the MLflow UI ({stop.name})\n"  # and none of MLflow's INFO lines
    alive = [p.pid for p in server if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert alive == []
