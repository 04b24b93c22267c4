"""Many runs logging at once to one tracking store: is every metric point, artifact and checkpoint there afterwards?

    .venv/bin/python bench/tracking_load.py [--runs 16] [--steps 300] [--keys 8] [--checkpoint-mb 8]
                                             [--stores server,sqlite,server-sqlite] [--repeat 2]

Each run is its own process and logs through runner's MlflowTracker, as a training process does: params, `--steps`
steps of `--keys` metrics (one batch every 20 steps, as a run logging every 20 steps would), three text artifacts
(the experiment, the label map, the compiled pipeline) and a checkpoint file of `--checkpoint-mb`, then finishes.
All runs start together (a barrier file). Afterwards the store is read back: per run, the metric points present of
those logged, the artifacts present, the checkpoint's size, the status, and any offline bundle the tracker wrote
because the store did not take its data in time.

Stores: `server`, runner tracking server (MLflow's server on PostgreSQL, artifacts through the server); `sqlite`, every
process writing one sqlite file directly (tracking.uri: ./mlflow.db, the default), created before the runs start (as
runner sweep's parent run creates it); `sqlite-new`, the same file not created yet; `server-sqlite`, MLflow's server on
a sqlite file (the compose stack's server). Writes bench/results/tracking-load-cpuN-runsR.csv and .md.
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
RESULTS = ROOT / "bench" / "results"
EXPERIMENT = "load"
ARTIFACTS = ("experiment.yaml", "label_map.json", "pipelines/train_pipeline.py")


def worker(uri: str, index: int, steps: int, keys: int, checkpoint_mb: float, barrier: Path, out: Path) -> dict:
    """One run: what a training process logs, through the tracker it logs with."""
    from runner.tracking.mlflow_tracker import MlflowTracker

    checkpoint = out / f"ckpt-{index}" / "step-1.pt"
    checkpoint.parent.mkdir(parents=True, exist_ok=True)
    checkpoint.write_bytes(os.urandom(int(checkpoint_mb * 2 ** 20)))
    tracker = MlflowTracker(uri, EXPERIMENT, run_name=f"load-{index}", offline_dir=out / "offline")
    while not barrier.exists():
        time.sleep(0.01)
    t0 = time.perf_counter()
    run_id = tracker.start({f"p{i}": i for i in range(60)} | {"index": index})
    for step in range(1, steps + 1):
        tracker.log_metrics({f"m{k}": float(step * 1000 + k) for k in range(keys)}, step)
        if step % 20 == 0:
            time.sleep(0.001)
    for name in ARTIFACTS:
        tracker.log_text(f"{name} of run {index}\n" * 50, name)
    tracker.log_artifact(checkpoint, "checkpoints")
    result = tracker.finish("FINISHED", timeout_s=120)
    return {"index": index, "run_id": run_id, "remote_id": result.run_id, "delivered": result.delivered,
            "bundle": str(result.bundle) if result.bundle else "", "dropped": result.dropped,
            "seconds": time.perf_counter() - t0}


def count(uri: str, steps: int, keys: int, checkpoint_mb: float, reports: list[dict]) -> dict:
    """The store read back, run by run."""
    from runner.tracking.uri import mlflow_client

    client = mlflow_client(uri)
    exp = client.get_experiment_by_name(EXPERIMENT)
    runs = list(client.search_runs([exp.experiment_id], max_results=10_000)) if exp else []
    points = artifacts = checkpoints = finished = 0
    for run in runs:
        finished += run.info.status == "FINISHED"
        for k in range(keys):
            history = client.get_metric_history(run.info.run_id, f"m{k}")
            points += len({(m.step, m.value) for m in history if m.value == m.step * 1000 + k})
        listed = {a.path: a for a in client.list_artifacts(run.info.run_id)}
        listed |= {a.path: a for a in client.list_artifacts(run.info.run_id, "pipelines")}
        listed |= {a.path: a for a in client.list_artifacts(run.info.run_id, "checkpoints")}
        artifacts += sum(name in listed for name in ARTIFACTS)
        ckpt = listed.get("checkpoints/step-1.pt")
        checkpoints += ckpt is not None and ckpt.file_size == int(checkpoint_mb * 2 ** 20)
    n = len(reports)
    return {"runs_in_store": len(runs), "finished": finished, "metric_points": points,
            "metric_points_logged": n * steps * keys, "artifacts": artifacts, "artifacts_logged": n * len(ARTIFACTS),
            "checkpoints": checkpoints, "bundles": sum(bool(r["bundle"]) for r in reports),
            "dropped": sum(r["dropped"] for r in reports),
            "seconds_median": sorted(r["seconds"] for r in reports)[n // 2] if reports else 0,
            "seconds_max": max((r["seconds"] for r in reports), default=0)}


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_health(url: str, proc: subprocess.Popen, timeout: float = 180) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise SystemExit(f"the server exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2):
                return
        except OSError:
            time.sleep(0.3)
    raise SystemExit(f"{url} did not answer")


def start_store(kind: str, folder: Path, port: int) -> tuple[str, subprocess.Popen | None]:
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    if kind in ("sqlite", "sqlite-new"):
        uri = f"sqlite:///{folder / 'mlflow.db'}"
        if kind == "sqlite":  # created and migrated first, as runner sweep's parent run does
            from runner.tracking.uri import mlflow_client

            mlflow_client(uri).search_experiments()
        return uri, None
    if kind == "server":
        argv = [sys.executable, "-m", "runner", "tracking", "server", "--dir", str(folder / "server"),
                "--port", str(port)]
    else:
        argv = [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", f"sqlite:///{folder / 'mlflow.db'}",
                "--artifacts-destination", str(folder / "artifacts"), "--serve-artifacts", "--host", "127.0.0.1",
                "--port", str(port), "--workers", "4"]
    log = open(folder / f"{kind}.log", "ab")
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    wait_health(url, proc)
    return url, proc


def measure(kind: str, args, port: int) -> dict:
    folder = Path(tempfile.mkdtemp(prefix=f"runner-load-{kind}-", dir="/tmp"))
    os.chmod(folder, 0o755)  # the server's PostgreSQL account reads below it
    uri, proc = start_store(kind, folder, port)
    try:
        barrier = folder / "go"
        procs = [subprocess.Popen([sys.executable, __file__, "worker", uri, str(i), str(args.steps), str(args.keys),
                                   str(args.checkpoint_mb), str(barrier), str(folder)], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True) for i in range(args.runs)]
        time.sleep(3 + 0.3 * args.runs)  # every process imported and waiting
        t0 = time.perf_counter()
        barrier.touch()
        reports, errors, outages = [], [], []
        for p in procs:
            out, err = p.communicate()
            outages += [line for line in err.splitlines() if "does not answer" in line]
            if p.returncode == 0 and out.strip():
                reports.append(json.loads(out.strip().splitlines()[-1]))
            else:
                lines = [line for line in err.strip().splitlines() if line.strip() and not line.startswith("(Background")]
                errors.append(lines[-1] if lines else f"exit {p.returncode}")
        wall = time.perf_counter() - t0
        try:
            counted = count(uri, args.steps, args.keys, args.checkpoint_mb, reports)
        except Exception as e:  # noqa: BLE001 - a store left broken is a result too
            counted = {"store_unreadable": " ".join(str(e).split())[:160]}
        # the tracker's warning when a write fails: "MLflow at URI does not answer (REASON); training goes on ..."
        reason = outages[0].split("(", 1)[-1].split(");", 1)[0][:160] if outages else ""
        return {"store": kind, "runs": args.runs, "processes_failed": len(errors),
                "first_error": errors[0][:160] if errors else "", "wall_s": round(wall, 1), **counted,
                "runs_told_store_away": len(outages), "store_away_reason": reason}
    finally:
        if proc is not None:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=60)
        shutil.rmtree(folder, ignore_errors=True)


def _cell(value) -> str:
    return str(round(value, 1) if isinstance(value, float) else value).replace("|", "/")


def header(args) -> str:
    versions = ", ".join(f"{d} {metadata.version(d)}" for d in ("mlflow", "sqlalchemy", "psycopg"))
    cpu = platform.processor() or platform.machine()
    return (f"{len(os.sched_getaffinity(0))} cores ({cpu}), Python {platform.python_version()}, {versions}; "
            f"{time.strftime('%Y-%m-%d')}; {args.runs} runs at once, {args.steps} steps x {args.keys} metrics, "
            f"{len(ARTIFACTS)} text artifacts and a {args.checkpoint_mb:g} MB checkpoint each.")


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "worker":
        uri, index, steps, keys, mb, barrier, out = sys.argv[2:]
        print(json.dumps(worker(uri, int(index), int(steps), int(keys), float(mb), Path(barrier), Path(out))))
        return 0
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=16)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--keys", type=int, default=8)
    p.add_argument("--checkpoint-mb", type=float, default=8)
    p.add_argument("--stores", default="server,sqlite,sqlite-new,server-sqlite")
    p.add_argument("--repeat", type=int, default=1)
    args = p.parse_args()
    rows: list[dict] = []
    for rnd in range(args.repeat):
        for kind in args.stores.split(","):
            row = {"round": rnd + 1, **measure(kind, args, free_port())}
            print(json.dumps(row), flush=True)
            rows.append(row)
    RESULTS.mkdir(parents=True, exist_ok=True)
    stem = RESULTS / f"tracking-load-cpu{len(os.sched_getaffinity(0))}-runs{args.runs}"
    fields = list(dict.fromkeys(k for r in rows for k in r))
    with open(f"{stem}.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields, restval="")
        w.writeheader()
        w.writerows(rows)
    columns = ["round", "store", "runs", "processes_failed", "finished", "metric_points", "metric_points_logged",
               "artifacts", "artifacts_logged", "checkpoints", "bundles", "runs_told_store_away", "wall_s",
               "seconds_median", "store_away_reason", "first_error", "store_unreadable"]
    lines = [header(args), "", f"`python bench/tracking_load.py {' '.join(sys.argv[1:])}`".replace("` ", "`"), "",
             "| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(_cell(r.get(c, "")) for c in columns) + " |" for r in rows]
    Path(f"{stem}.md").write_text("\n".join(lines) + "\n")
    print(f"wrote {stem}.csv and {stem}.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
