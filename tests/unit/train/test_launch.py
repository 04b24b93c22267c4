"""`runner launch` end to end on the CPU: real DALI, real torch, a real MLflow store, real gloo DDP."""

from tests.helpers import run_cli


def test_bad_tracking_uri_fails_before_training(tiny, capsys):
    code, _, err = run_cli(["launch", tiny, "tracking.uri=htp://x"], capsys)
    assert code == 2
    assert err.startswith("error: command line 'tracking.uri=htp://x': tracking.uri:")
