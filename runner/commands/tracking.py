"""`runner tracking`: a tracking server for many writers; deliver runs kept offline while the store did not
answer."""
from __future__ import annotations

import json
import os
import socket
from pathlib import Path

from runner import console


def register(sub) -> None:
    p = sub.add_parser("tracking", help="a tracking server for many writers (MLflow on PostgreSQL); offline "
                                        "tracking bundles: list them, deliver them to a store")
    verbs = p.add_subparsers(dest="verb", required=True, metavar="VERB")
    srv = verbs.add_parser("server", help="MLflow's tracking server on PostgreSQL, serving its artifacts: one store "
                                          "for a sweep's children on any machine",
                           description="Without --backend-uri, runner keeps a PostgreSQL cluster of its own in "
                                       "DIR/postgres (created on first start, reached only through a Unix socket in "
                                       "DIR), started and stopped with the server. Ctrl-C or SIGTERM stops both.")
    srv.add_argument("--dir", default="mlflow-server", help="the server's folder: its database cluster, artifacts "
                                                            "and log (default ./mlflow-server)")
    srv.add_argument("--backend-uri", help="an existing database instead: postgresql://USER:PASSWORD@HOST:PORT/DB "
                                           "(or any SQLAlchemy URI MLflow takes)")
    srv.add_argument("--artifacts", help="where the server keeps artifacts (default DIR/artifacts; a path or an "
                                         "s3://, gs:// ... URI)")
    srv.add_argument("--host", default="127.0.0.1", help="interface to bind (default 127.0.0.1; 0.0.0.0 for other "
                                                         "machines: the server has no login)")
    srv.add_argument("--port", type=int, default=5000, help="port (default 5000)")
    srv.add_argument("--workers", type=int, default=4, help="server processes answering requests (default 4)")
    srv.add_argument("--allowed-hosts", default="", metavar="NAME[,NAME]",
                     help="more Host names the server answers (it answers this machine's names and addresses)")
    srv.set_defaults(handler=server)
    s = verbs.add_parser("sync", help="deliver an offline bundle to a tracking store")
    s.add_argument("bundle", help="bundle directory, e.g. ./mlflow-offline/<run id>")
    s.add_argument("--uri", help="tracking store (default: the one the run was logging to)")
    s.set_defaults(handler=sync)
    q = verbs.add_parser("pending", help="list bundles not yet synced")
    q.add_argument("--dir", default="mlflow-offline", help="where bundles are written (default ./mlflow-offline)")
    q.set_defaults(handler=pending)


def server(args) -> int:
    from runner.commands.ui import check_port_free, serve
    from runner.tracking import server as srv

    folder = Path(args.dir).expanduser().resolve()
    folder.mkdir(parents=True, exist_ok=True)
    check_port_free(args.host, args.port)
    pg = None
    if args.backend_uri:
        backend, database = args.backend_uri, srv.shown_uri(args.backend_uri)
    else:
        pg = srv.postgres_in(folder)
        srv.start_postgres(pg)
        backend, database = pg.uri, f"PostgreSQL {pg.version} in {pg.data}"
    artifacts = args.artifacts or str(folder / "artifacts")
    os.environ.setdefault("MLFLOW_SERVER_ENABLE_JOB_EXECUTION", "false")  # GenAI jobs: runner's runs need none
    local = "127.0.0.1" if args.host in ("0.0.0.0", "::") else args.host
    name = socket.gethostname() if args.host in ("0.0.0.0", "::") else args.host
    extra = [h.strip() for h in args.allowed_hosts.split(",") if h.strip()]
    argv = srv.server_argv(backend, artifacts, args.host, args.port, args.workers, srv.allowed_hosts(args.host, extra))
    log = folder / "server.log"
    try:
        return serve(argv, log, health=f"http://{local}:{args.port}/health",
                     ready=f"tracking server: [bold]http://{name}:{args.port}[/] (MLflow on {database}; artifacts in "
                           f"{artifacts}, uploaded and downloaded through the server)\nruns log to it with: export "
                           f"MLFLOW_TRACKING_URI=http://{name}:{args.port}\nserver log: {log} (Ctrl-C stops it"
                           + (" and the database)" if pg else ")"),
                     what="the tracking server" + (" and its database" if pg else ""))
    finally:
        if pg is not None:
            srv.stop_postgres(pg)


def sync(args) -> int:
    from runner.errors import error_at
    from runner.tracking import load_bundle, resolve_tracking_uri, sync_offline

    uri = resolve_tracking_uri(args.uri or load_bundle(args.bundle).meta["uri"],
                               at=error_at("--uri", file="command line"))
    run_id = sync_offline(args.bundle, uri)
    console.out.print(f"[green]synced[/] {args.bundle} -> run {run_id} at {uri}")
    _log_model(args.bundle, uri, run_id)
    return 0


def _log_model(bundle: str, uri: str, run_id: str) -> None:
    """A delivered run with checkpoints gets the LoggedModel that launch makes when the store answers."""
    from runner.tracking.logged_model import log_logged_model
    from runner.weights.store import INDEX

    artifacts = Path(bundle) / "artifacts"
    index = artifacts / INDEX
    meta = json.loads((Path(bundle) / "run.json").read_text())
    if index.is_file() and meta.get("status") == "FINISHED":
        files = {name: (artifacts / name).read_text() for name in ("experiment.yaml", "label_map.json")
                 if (artifacts / name).is_file()}
        log_logged_model(uri, run_id, meta.get("params", {}).get("name") or meta["experiment"],
                         json.loads(index.read_text()), files)


def pending(args) -> int:
    from runner.tracking import list_bundles, sync_command

    bundles = list_bundles(args.dir)
    if not bundles:
        console.out.print(f"no bundles waiting in {args.dir}")
        return 0
    rows = [[b.path.name, b.meta["experiment"], b.meta.get("run_name") or "", b.meta["status"], b.meta["metrics"],
             sync_command(b.path, b.meta["uri"])] for b in bundles]
    console.out.print(console.table(f"{len(rows)} runs waiting for delivery",
                                    ["bundle", "experiment", "run name", "status", "metrics", "deliver with"], rows,
                                    justify_numbers=False))
    return 0
