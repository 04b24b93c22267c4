"""Screenshots of the MLflow UI as `runner ui` serves it, taken by headless Chromium.

    PYTHONPATH=$PWD .venv/bin/python scripts/ui_screenshots.py            # sweep, serve, shoot (a few minutes)
    PYTHONPATH=$PWD .venv/bin/python scripts/ui_screenshots.py --store DIR # reuse DIR/mlflow.db from a run before

It builds a store with a 2-strategy x 3-seed sweep of experiments/quickstart.yaml (tiny sizes, so it
runs on 2 CPU cores), starts `runner ui` on it, and saves, in --out (default docs/images):
    ui-runs.png       the page the address `runner ui` prints opens: the runs, the sweep expanded
    ui-compare.png    MLflow's compare view of the sweep's six runs
    ui-artifacts.png  one run's artifacts
Chromium is driven through the DevTools protocol over a pipe (--remote-debugging-pipe), so that the
script can wait for the page to render, expand the sweep and close MLflow's assistant panel, which
MLflow 3.17 opens by itself on a first visit to a localhost address.
"""
from __future__ import annotations

import argparse
import base64
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SIZE = (1600, 1000)
SWEEP = ["seed=0,1,2", "pipelines.train.use=imagenet_train,imagenet_train_randaugment",
         "trainer.epochs=2", "data.synth.per_class=16", "data.synth.eval_per_class=4",
         "pipelines.train.params.size=32", "pipelines.eval.params.size=32",
         "pipelines.eval.params.resize_shorter=36", "trainer.devices=1"]
# MLflow's useLocalStorage keys (`${key}_v${version}`): the assistant was shown once, and is closed
# the button beside a parent run's name that shows its child runs (MLflow's RunNameCellRenderer)
EXPAND_SWEEP = "document.querySelectorAll('[data-component-id*=\"runnamecellrenderer\"]').forEach(b => b.click())"
QUIET_ASSISTANT = {"mlflow.assistant.fab.autoOpenedOnFirstLoad_v1": "true", "mlflow.assistant.panelOpen_v1": "false"}


def runner(*args: str, cwd: Path, **kwargs) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen([sys.executable, "-m", "runner", *args], cwd=cwd, env=env, **kwargs)


def build_store(work: Path) -> None:
    """work/mlflow.db with the sweep's runs (the synthetic data under work/data)."""
    shutil.copytree(REPO / "pipelines", work / "pipelines", dirs_exist_ok=True)
    (work / "experiments").mkdir(exist_ok=True)
    shutil.copy(REPO / "experiments" / "quickstart.yaml", work / "experiments")
    print(f"sweep: runner sweep experiments/quickstart.yaml {' '.join(SWEEP)} (in {work})", flush=True)
    with open(work / "sweep.log", "w") as log:
        code = runner("sweep", "experiments/quickstart.yaml", *SWEEP, cwd=work, stdout=log,
                      stderr=subprocess.STDOUT).wait()
    if code != 0:
        sys.exit(f"the sweep failed (exit {code}); its output is in {work / 'sweep.log'}")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_ui(work: Path) -> tuple[subprocess.Popen, str]:
    """`runner ui` on work/mlflow.db, and the address it prints."""
    ui = runner("ui", "--uri", "mlflow.db", "--port", str(free_port()), "--log", "mlflow-ui.log", cwd=work,
                stdout=subprocess.PIPE, text=True)
    for line in ui.stdout:
        print(f"runner ui: {line.rstrip()}", flush=True)
        if m := re.search(r"http://\S+", line):
            return ui, m[0]
    sys.exit(f"runner ui ended (exit {ui.wait()}) without printing an address; see {work / 'mlflow-ui.log'}")


class Chromium:
    """Headless Chromium driven through the DevTools protocol on fds 3 and 4 (--remote-debugging-pipe)."""

    def __init__(self, profile: Path, size: tuple[int, int] = SIZE):
        to_chrome_r, self._to_chrome = os.pipe()
        self._from_chrome, from_chrome_w = os.pipe()

        def fds() -> None:  # in the child: Chromium reads commands on fd 3, writes replies on fd 4
            read, write = os.dup(to_chrome_r), os.dup(from_chrome_w)  # above 4, so neither dup2 clobbers the other
            os.dup2(read, 3)
            os.dup2(write, 4)

        exe = shutil.which("chromium") or shutil.which("chromium-browser") or sys.exit("chromium is not installed")
        self.proc = subprocess.Popen(
            [exe, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--remote-debugging-pipe",
             f"--user-data-dir={profile}", f"--window-size={size[0]},{size[1]}", "about:blank"],
            preexec_fn=fds, pass_fds=(3, 4), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self._buffer, self._next_id, self.size = b"", 0, size
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        self.page("Emulation.setDeviceMetricsOverride", width=size[0], height=size[1], deviceScaleFactor=1,
                  mobile=False)

    def call(self, method: str, session: str | None = None, **params) -> dict:
        self._next_id += 1
        message = {"id": self._next_id, "method": method, "params": params}
        if session:
            message["sessionId"] = session
        os.write(self._to_chrome, json.dumps(message).encode() + b"\0")
        while True:
            while b"\0" not in self._buffer:
                chunk = os.read(self._from_chrome, 1 << 20)
                if not chunk:
                    raise RuntimeError("chromium closed the DevTools pipe")
                self._buffer += chunk
            raw, self._buffer = self._buffer.split(b"\0", 1)
            reply = json.loads(raw)
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})

    def page(self, method: str, **params) -> dict:
        return self.call(method, self.session, **params)

    def js(self, expression: str):
        result = self.page("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        return result.get("result", {}).get("value")

    def goto(self, url: str, ready: str, timeout: float = 60.0) -> None:
        """Open `url` and wait until the JS expression `ready` is true (then a little more, for charts)."""
        self.page("Page.navigate", url=url)
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.js(ready):
                time.sleep(2.0)
                return
            time.sleep(0.5)
        raise RuntimeError(f"{url}: the page did not show what was waited for ({ready}) in {timeout:.0f} s")

    def screenshot(self, path: Path) -> None:
        data = self.page("Page.captureScreenshot", format="png")["data"]
        path.write_bytes(base64.b64decode(data))
        print(f"wrote {path}", flush=True)

    def close(self) -> None:
        try:
            self.call("Browser.close")
        except (RuntimeError, OSError):
            pass
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def text_shown(*needles: str) -> str:
    return " && ".join(f"document.body && document.body.innerText.includes({json.dumps(n)})" for n in needles)


def sweep_runs(work: Path) -> tuple[str, list[str]]:
    """The experiment id and the ids of the sweep's child runs (oldest first)."""
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    from mlflow import MlflowClient

    client = MlflowClient(f"sqlite:///{work / 'mlflow.db'}")
    exp = client.get_experiment_by_name("quickstart")
    runs = client.search_runs([exp.experiment_id], "tags.`mlflow.parentRunId` != ''",
                              order_by=["attributes.start_time ASC"])
    runs = [r for r in runs if r.data.tags.get("mlflow.parentRunId")] or list(client.search_runs([exp.experiment_id]))
    return exp.experiment_id, [r.info.run_id for r in runs]


def take(address: str, work: Path, out: Path) -> None:
    base = address.split("/#/")[0]
    experiment_id, run_ids = sweep_runs(work)
    browser = Chromium(work / "chromium-profile")
    try:
        browser.goto(f"{base}/health", "document.readyState === 'complete'")
        browser.js("; ".join(f"localStorage.setItem({json.dumps(k)}, {json.dumps(v)})"
                             for k, v in QUIET_ASSISTANT.items()))
        browser.goto(address, text_shown("matching runs", "Dataset"))
        browser.js(EXPAND_SWEEP)
        time.sleep(2.0)
        browser.screenshot(out / "ui-runs.png")

        query = urllib.parse.urlencode({"runs": json.dumps(run_ids), "experiments": json.dumps([experiment_id]),
                                        "workflowType": "machine_learning"})
        browser.goto(f"{base}/#/compare-runs?{query}", text_shown("Parameters", "Metrics"))
        browser.screenshot(out / "ui-compare.png")

        browser.goto(f"{base}/#/experiments/{experiment_id}/runs/{run_ids[0]}/artifacts?workflowType=machine_learning",
                     text_shown("experiment.yaml"))
        for name in ("preview", "train.png"):  # the grid of the first batch the run trained on
            browser.js(f"[...document.querySelectorAll('span,div')].find(e => e.innerText === '{name}')?.click()")
            time.sleep(2.0)
        browser.screenshot(out / "ui-artifacts.png")
    finally:
        browser.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "images", help="folder for the PNGs")
    parser.add_argument("--store", type=Path, help="a folder with the mlflow.db a run of this script left "
                                                   "(skips the sweep)")
    args = parser.parse_args()
    work = args.store.resolve() if args.store else Path(tempfile.mkdtemp(prefix="runner-ui-shots-"))
    if not (work / "mlflow.db").is_file():
        build_store(work)
    args.out.mkdir(parents=True, exist_ok=True)
    ui, address = start_ui(work)
    try:
        take(address, work, args.out.resolve())
    finally:
        ui.send_signal(signal.SIGTERM)  # runner ui stops the server's whole process group
        ui.wait(30)
    print(f"store and logs kept in {work} (pass --store {work} to shoot again without the sweep)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
