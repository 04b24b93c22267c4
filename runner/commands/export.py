"""`runner export`: a tracked run's experiment as one shareable YAML file, its pipelines inlined."""
from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from runner import console
from runner.errors import display_path


def register(sub) -> None:
    p = sub.add_parser("export", help="write a tracked run's experiment as one self-contained YAML "
                                      "(resolved config, pipeline steps inlined)")
    p.add_argument("run_id", metavar="RUN_ID", help="the run to export (a unique start of its id will do)")
    p.add_argument("-o", "--output", help="file to write (default: print to stdout)")
    p.add_argument("--uri", help="tracking store holding the run (default: $MLFLOW_TRACKING_URI, else ./mlflow.db)")
    p.set_defaults(handler=run)


def run(args) -> int:
    from runner.run.snapshot import export_yaml
    from runner.tracking.store import get_run, store_uri
    uri = store_uri(args.uri)
    record = get_run(uri, args.run_id)
    with tempfile.TemporaryDirectory(prefix="runner-export-") as tmp:
        text, snap = export_yaml(record, Path(tmp))
        for role, local in snap.from_checkout.items():
            console.note(f"run {record.short} did not log its {role} pipeline file; inlined this checkout's "
                         f"{display_path(local)}. If it changed since the run's commit, so did the pipeline.")
    if args.output:
        Path(args.output).parent.mkdir(parents=True, exist_ok=True)
        Path(args.output).write_text(text)
        console.err.print(f"wrote {args.output}: run {record.run_id} ({record.name}); launch it with "
                          f"runner launch {args.output}")
    else:
        sys.stdout.write(text)
    return 0
