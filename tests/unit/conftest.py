"""The unit tier: no training, no program started, no server. A test that needs any of them belongs in tests/e2e;
these guards fail it with that reason instead of letting it slow this tier down."""
from __future__ import annotations

import subprocess

import pytest

import runner.train.loop


@pytest.fixture(autouse=True)
def unit_tier(monkeypatch):
    def no_process(*args, **kwargs):
        raise AssertionError(f"a unit test started a program ({args[0] if args else kwargs.get('args')}); "
                             "move the test to tests/e2e")

    def no_training(*args, **kwargs):
        raise AssertionError("a unit test started training; move the test to tests/e2e")

    monkeypatch.setattr(subprocess.Popen, "__init__", no_process)
    monkeypatch.setattr(runner.train.loop, "_train", no_training)
