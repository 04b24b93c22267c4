"""`runner ui` serves quietly, and stopping it leaves no process of MLflow's server behind.
tests/unit/test_ui.py holds its address and refusals."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import urllib.request

import psutil
import pytest

from tests.helpers import REPO, free_port


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT])
def test_serves_quietly_and_a_stop_leaves_no_process_behind(ui_store, stop):
    root, ids = ui_store
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
