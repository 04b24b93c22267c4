"""`runner ui`: the MLflow UI on the store that `runner launch` logs to."""
from __future__ import annotations

import os

from runner import console


def register(sub) -> None:
    p = sub.add_parser("ui", help="serve the MLflow UI on the tracking store runs log to")
    p.add_argument("--port", type=int, default=5000, help="port to listen on (default 5000)")
    p.add_argument("--host", default="127.0.0.1", help="interface to bind (default 127.0.0.1: this machine only)")
    p.add_argument("--uri", help="tracking store (default: $MLFLOW_TRACKING_URI, else ./mlflow.db)")
    p.set_defaults(handler=run)


def run(args) -> int:
    from runner.errors import error_at
    from runner.tracking import resolve_tracking_uri, server_command, store_env

    uri = resolve_tracking_uri(args.uri, at=error_at("--uri", file="command line") if args.uri else None)
    if uri.startswith(("http://", "https://", "databricks")):
        console.out.print(f"{uri} is a tracking server already: open it in a browser.")
        return 0
    host = "localhost" if args.host in ("127.0.0.1", "0.0.0.0", "::") else args.host
    console.out.print(f"MLflow UI on {uri}: [bold]http://{host}:{args.port}[/] (Ctrl-C stops it)")
    console.out.file.flush()
    store_env(uri)
    argv = server_command(uri, args.host, args.port)
    os.execv(argv[0], argv)
    return 0  # not reached: exec replaces this process
