"""`runner tracking`: deliver runs kept offline while the tracking store did not answer."""
from __future__ import annotations

from runner import console


def register(sub) -> None:
    p = sub.add_parser("tracking", help="offline tracking bundles: list them, deliver them to a store")
    verbs = p.add_subparsers(dest="verb", required=True, metavar="VERB")
    s = verbs.add_parser("sync", help="deliver an offline bundle to a tracking store")
    s.add_argument("bundle", help="bundle directory, e.g. ./mlflow-offline/<run id>")
    s.add_argument("--uri", help="tracking store (default: the one the run was logging to)")
    s.set_defaults(handler=sync)
    q = verbs.add_parser("pending", help="list bundles not yet synced")
    q.add_argument("--dir", default="mlflow-offline", help="where bundles are written (default ./mlflow-offline)")
    q.set_defaults(handler=pending)


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
    import json
    from pathlib import Path

    from runner.tracking.weights import INDEX, log_logged_model

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
