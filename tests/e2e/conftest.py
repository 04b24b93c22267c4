"""The end-to-end tier: commands that train, torchrun, MLflow servers, PostgreSQL, SLURM."""
from __future__ import annotations

import pytest

from tests.helpers import Server


@pytest.fixture
def server(tmp_path, template_db):
    """`mlflow server` of this test's own, started by the test: outages kill and restart it."""
    (tmp_path / "server").mkdir()
    s = Server(tmp_path / "server", template_db)
    yield s
    s.kill()
