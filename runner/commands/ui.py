"""`runner ui`: the MLflow UI on the store that `runner launch` logs to.

The server runs in its own process group with its output in a log file, so that runner's console shows
only the address, and stopping `runner ui` (Ctrl-C, SIGTERM) stops every worker the server started.
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

from runner import console
from runner.errors import RunnerError

DEFAULT_LOG = "mlflow-ui.log"
STARTUP_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 10.0


def register(sub) -> None:
    p = sub.add_parser("ui", help="serve the MLflow UI on the tracking store runs log to")
    p.add_argument("--port", type=int, default=5000, help="port to listen on (default 5000)")
    p.add_argument("--host", default="127.0.0.1", help="interface to bind (default 127.0.0.1: this machine only)")
    p.add_argument("--uri", help="tracking store: a URI, a .db file or a folder (default: $MLFLOW_TRACKING_URI, "
                                 "else ./mlflow.db)")
    p.add_argument("--experiment", help="experiment whose runs the printed address opens (default: the one "
                                        "with the newest run)")
    p.add_argument("--log", default=DEFAULT_LOG, help=f"file MLflow's server writes its output to "
                                                      f"(default ./{DEFAULT_LOG}, appended)")
    p.set_defaults(handler=run)


def page_address(base: str, experiment_id: str | None) -> str:
    """The experiment's runs in the UI's "Model training" view (MLflow 3 opens its GenAI view otherwise)."""
    route = f"experiments/{experiment_id}/runs" if experiment_id is not None else "experiments"
    return f"{base}/#/{route}?workflowType=machine_learning"


class _Stop(Exception):
    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def run(args) -> int:
    from runner.tracking import server_command, store_env
    from runner.tracking.store import landing_experiment, store_uri

    uri = store_uri(args.uri)
    if uri.startswith(("http://", "https://", "databricks")):
        console.out.print(f"{uri} is a tracking server already: open it in a browser.")
        return 0
    experiment_id = landing_experiment(uri, args.experiment)
    check_port_free(args.host, args.port)
    store_env(uri)
    # MLflow's job runner serves GenAI features (judges, prompt optimisation); runner's runs need none of it.
    os.environ.setdefault("MLFLOW_SERVER_ENABLE_JOB_EXECUTION", "false")
    log_path = Path(args.log).expanduser().resolve()
    local = "127.0.0.1" if args.host in ("0.0.0.0", "::") else args.host
    shown = "localhost" if args.host in ("127.0.0.1", "0.0.0.0", "::") else args.host
    return serve(server_command(uri, args.host, args.port), log_path, health=f"http://{local}:{args.port}/health",
                 ready=f"MLflow UI on {uri}: [bold]{page_address(f'http://{shown}:{args.port}', experiment_id)}[/]"
                       f"\nserver log: {log_path} (Ctrl-C stops it)")


def check_port_free(host: str, port: int) -> None:
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        # as the server binds: a port whose last server just stopped (connections in TIME_WAIT) is free
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as e:
            raise RunnerError(f"cannot serve on {host}:{port}: {e.strerror}. Another program (an earlier runner "
                              "ui?) may hold it; choose another port with --port.", where="--port") from None


def serve(argv: list[str], log_path: Path, *, health: str, ready: str, what: str = "the MLflow UI") -> int:
    """Run the server until it exits or this process is asked to stop; the whole group goes either way."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    previous = {s: signal.signal(s, _raise_stop) for s in (signal.SIGTERM, signal.SIGINT)}
    proc = None
    try:
        with open(log_path, "ab") as log:
            proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True)  # its own group: killpg reaches every worker
        if not _wait_until_up(proc, health):
            raise RunnerError(f"MLflow's server exited with code {proc.returncode} before answering; its output "
                              f"is in {log_path}: {_last_line(log_path)}")
        console.out.print(ready)
        console.out.file.flush()
        code = proc.wait()
        console.error(f"MLflow's server stopped by itself (exit code {code}); its output is in {log_path}.")
        return 1
    except _Stop as stop:
        console.err.print(f"stopping {what} ({signal.Signals(stop.signum).name})", markup=False)
        return 128 + stop.signum
    finally:
        if proc is not None:
            stop_group(proc)
        for s, handler in previous.items():
            signal.signal(s, handler)


def _raise_stop(signum: int, frame) -> None:
    raise _Stop(signum)


def _wait_until_up(proc: subprocess.Popen, health: str) -> bool:
    end = time.monotonic() + STARTUP_TIMEOUT_S
    while time.monotonic() < end and proc.poll() is None:
        try:
            with urllib.request.urlopen(health, timeout=2) as r:
                if r.status == 200:
                    return True
        except OSError:
            time.sleep(0.25)
    if proc.poll() is None:
        raise RunnerError(f"MLflow's server did not answer {health} within {STARTUP_TIMEOUT_S:.0f} s.")
    return False


def stop_group(proc: subprocess.Popen) -> None:
    """SIGTERM to the server's process group; SIGKILL to what is left of it after STOP_TIMEOUT_S."""
    group = proc.pid  # start_new_session made the server the leader of a group of its own
    _signal_group(group, signal.SIGTERM)
    end = time.monotonic() + STOP_TIMEOUT_S
    while time.monotonic() < end:
        proc.poll()  # reap the leader, so that only live members keep the group
        if not _signal_group(group, 0):
            return
        time.sleep(0.1)
    _signal_group(group, signal.SIGKILL)
    proc.wait()


def _signal_group(group: int, sig: int) -> bool:
    """Whether the group still had a member to signal."""
    try:
        os.killpg(group, sig)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:  # a zombie leader not reaped yet
        return True


def _last_line(path: Path) -> str:
    lines = [line for line in path.read_text(errors="replace").splitlines() if line.strip()]
    return lines[-1][:300] if lines else "(empty)"
