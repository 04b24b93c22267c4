"""Preemption, resume, atomic checkpoints, corrupt data and DDP faults: nothing is lost, nothing hangs."""
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch
from mlflow import MlflowClient

from tests.helpers import runner_process, write_image_folder

EXPERIMENT = """\
name: tiny
seed: 5
model: {name: resnet18, num_classes: 3}
optimizer: {lr: 0.01}
scheduler: {name: cosine}
trainer: {epochs: 3, log_every_n_steps: 1, deterministic: true}
data: {root: data, batch_size: 4}
pipelines:
  train: {use: imagenet_train, params: {size: 32}}
  eval: {use: imagenet_eval, params: {size: 32, resize_shorter: 36}}
tracking: {experiment: tiny}
"""


def make_workdir(root: Path) -> Path:
    import shutil

    from tests.helpers import REPO

    shutil.copytree(REPO / "pipelines", root / "pipelines")
    (root / "experiments").mkdir()
    write_image_folder(root / "data" / "train", classes=3, per_class=8, seed=1)
    write_image_folder(root / "data" / "val", classes=3, per_class=3, seed=2)
    (root / "experiments" / "tiny.yaml").write_text(EXPERIMENT)
    return root


@pytest.fixture
def workdir(tmp_path):
    return make_workdir(tmp_path)


@pytest.fixture(scope="module")
def reference(module_tmp):
    """One uninterrupted run that the interrupted ones are compared with."""
    root = make_workdir(module_tmp)
    full = runner_process(root, "launch", "experiments/tiny.yaml", "tracking.run_name=full")
    assert full.wait(timeout=300) == 0, full.stdout.read()
    return root


def wait_for(proc: subprocess.Popen, text: str, timeout: float = 120) -> str:
    """Read the process's output until `text` appears; returns what was read."""
    seen, end = [], time.monotonic() + timeout
    for line in proc.stdout:
        seen.append(line)
        if text in line:
            return "".join(seen)
        if time.monotonic() > end:
            break
    raise AssertionError(f"{text!r} never appeared:\n" + "".join(seen[-30:]))


def history(workdir, run_name, key="train/loss"):
    client = MlflowClient(f"sqlite:///{workdir}/mlflow.db")
    exp = client.get_experiment_by_name("tiny")
    run = next(r for r in client.search_runs([exp.experiment_id]) if r.info.run_name == run_name)
    return run, {m.step: m.value for m in client.get_metric_history(run.info.run_id, key)}


@pytest.mark.parametrize("sig,code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_stop_mid_epoch_then_resume_continues_bit_identically(reference, sig, code):
    workdir, name = reference, f"cut-{sig.name}"
    cut = runner_process(workdir, "launch", "experiments/tiny.yaml", f"tracking.run_name={name}")
    wait_for(cut, "(global 8)")  # epoch 2, batch 2 of 6
    cut.send_signal(sig)
    out = cut.stdout.read()
    assert cut.wait(timeout=120) == code, out
    run, before = history(workdir, name)
    assert run.info.status == "KILLED" and "KILLED" in out
    ckpt = Path(workdir, run.data.tags["runner.checkpoint"])
    state = torch.load(ckpt, weights_only=False)
    assert state["epoch"] == 1 and 0 < state["batch"] < 6 and state["step"] == 6 + state["batch"]
    assert state["loader_states"][0]  # DALI's reader and RNG state
    resumed = runner_process(workdir, "resume", run.info.run_id)
    assert resumed.wait(timeout=300) == 0, resumed.stdout.read()
    run, after = history(workdir, name)
    _, expected = history(workdir, "full")
    assert run.info.status == "FINISHED"
    assert after == expected  # every step's loss, bit for bit, across the interruption
    _, ev_cut = history(workdir, name, "eval/top1")
    _, ev_full = history(workdir, "full", "eval/top1")
    assert ev_cut == ev_full


@pytest.mark.parametrize("command", ["resume", "launch"])
def test_resume_where_the_checkpoint_is_not_fetches_the_last_logged_one(reference, command):
    import shutil

    workdir, name = reference, f"cut-elsewhere-{command}"
    cut = runner_process(workdir, "launch", "experiments/tiny.yaml", f"tracking.run_name={name}")
    wait_for(cut, "(global 8)")
    cut.send_signal(signal.SIGTERM)
    out = cut.stdout.read()
    assert cut.wait(timeout=120) == 143, out
    run, _ = history(workdir, name)
    folder = Path(workdir, run.data.tags["runner.checkpoint"]).parent
    step = torch.load(folder / "last.pt", weights_only=False)["step"]
    shutil.rmtree(folder)  # resumed on another machine, which has the store but not the run's folder
    how = ["resume", run.info.run_id] if command == "resume" else ["launch", "experiments/tiny.yaml", "--resume",
                                                                   run.info.run_id[:8]]
    resumed = runner_process(workdir, *how)
    out = resumed.stdout.read()
    assert resumed.wait(timeout=300) == 0, out
    assert f"checkpoint is not on this machine: fetched its last logged one (step {step})" in out
    run, after = history(workdir, name)
    _, expected = history(workdir, "full")
    assert run.info.status == "FINISHED"
    assert after == expected  # the same losses as the uninterrupted run
    # the store's index came back with the checkpoint, so the resumed run dropped the stored one it began from
    client = MlflowClient(f"sqlite:///{workdir}/mlflow.db")
    stored = sorted(a.path for a in client.list_artifacts(run.info.run_id, "checkpoints"))
    assert stored == ["checkpoints/index.json", f"checkpoints/step-{18:07d}.pt"]
    assert json.loads((folder / "index.json").read_text())["recent"] == [f"checkpoints/step-{18:07d}.pt"]


def test_resume_without_the_checkpoint_here_or_in_the_store_says_so(workdir):
    import shutil

    done = runner_process(workdir, "launch", "experiments/tiny.yaml", "trainer.epochs=1",
                          "trainer.checkpoint_log=false", "tracking.run_name=unlogged")
    assert done.wait(timeout=300) == 0, done.stdout.read()
    run, _ = history(workdir, "unlogged")
    written = run.data.tags["runner.checkpoint"]
    shutil.rmtree(Path(workdir, written).parent)
    resumed = runner_process(workdir, "resume", run.info.run_id)
    out = resumed.stdout.read()
    assert resumed.wait(timeout=120) == 2
    assert out == (f"error: command line: run {run.info.run_id} has no checkpoint on this machine (tag "
                   f"runner.checkpoint: {written}) and logged none to sqlite:///{workdir}/mlflow.db "
                   "(trainer.checkpoint_log); resume it where it ran, or pass a checkpoint file to `runner launch "
                   "EXPERIMENT --resume FILE`.\n")


def test_a_resume_from_a_run_neither_here_nor_in_the_store_is_refused(workdir):
    proc = runner_process(workdir, "launch", "experiments/tiny.yaml", "--resume", "0123abcd")
    out = proc.stdout.read()
    assert proc.wait(timeout=120) == 2, out
    assert out.endswith("error: --resume 0123abcd: not a checkpoint file, a run folder, a run id with a checkpoint "
                        f"under checkpoints/tiny/, or logged to sqlite:///{workdir.resolve()}/mlflow.db, or 'last'.\n")
    assert not (workdir / "mlflow.db").exists()  # looking for the run made no store


def test_a_kill_during_a_checkpoint_write_keeps_the_last_good_one(tmp_path):
    from runner.weights import checkpoint

    first = checkpoint.save({"step": 1, "weights": torch.ones(10)}, tmp_path)
    script = textwrap.dedent(f"""\
        import torch
        from pathlib import Path
        from runner.weights import checkpoint
        state = {{"step": 2, "weights": torch.randn(800_000_000 // 4)}}
        print("writing", flush=True)
        checkpoint.save(state, Path({str(tmp_path)!r}))
        print("done", flush=True)
        """)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "writing"
    time.sleep(0.2)
    proc.kill()
    proc.wait()
    temporaries = list(tmp_path.glob(".last.pt.*.tmp"))
    assert temporaries, "the write was not interrupted; make the state larger"
    state = checkpoint.load(first)
    assert state["step"] == 1 and torch.equal(state["weights"], torch.ones(10))
    # the next save replaces it atomically and leaves the stale temporary harmless
    checkpoint.save({"step": 3}, tmp_path)
    assert checkpoint.load(first)["step"] == 3


def corrupt(workdir) -> str:
    (workdir / "data" / "train" / "c1" / "005.jpg").write_text("not a jpeg")
    return "c1/005.jpg"


def test_a_file_that_does_not_decode_is_named_then_skipped(workdir):
    bad = corrupt(workdir)
    first = runner_process(workdir, "launch", "experiments/tiny.yaml", "tracking.enabled=false", "trainer.epochs=1")
    out = first.stdout.read()
    assert first.wait(timeout=300) == 2
    assert "Traceback" not in out
    assert (f"error: data/train: the train pipeline failed to decode an image (nvImageCodec failure: '#4'). 1 "
            f"file(s) here do not decode: {bad} (not an image (a text file: 'not a jpeg')). They are now listed in "
            "data/train/.runner-bad-files.txt, so the next run leaves them out: run the same command again.") in out
    second = runner_process(workdir, "launch", "experiments/tiny.yaml", "tracking.enabled=false", "trainer.epochs=1")
    out = second.stdout.read()
    assert second.wait(timeout=300) == 0, out
    assert "FINISHED" in out


def test_ddp_a_failing_rank_ends_every_rank_and_is_reported_first(workdir):
    corrupt(workdir)
    start = time.monotonic()
    proc = runner_process(workdir, "launch", "experiments/tiny.yaml", "tracking.enabled=false", "trainer.devices=2")
    out = proc.stdout.read()
    assert proc.wait(timeout=120) == 2, out
    assert time.monotonic() - start < 60
    errors = [ln for ln in out.splitlines() if ln.startswith("error: ")]
    assert errors[0].startswith("error: data/train: the train pipeline failed to decode an image")
    assert errors[-1].startswith("error: rank ") and "exited with code 2 first" in errors[-1]
    assert "Traceback" not in out


def test_ddp_a_killed_rank_ends_every_rank(workdir):
    start = time.monotonic()
    proc = runner_process(workdir, "launch", "experiments/tiny.yaml", "tracking.enabled=false", "trainer.devices=2",
                          "trainer.epochs=50", start_new_session=True)
    wait_for(proc, "(global 3)")
    victim = next(pid for pid in _children(proc.pid) if _env(pid).get("RANK") == "1")
    os.kill(victim, signal.SIGKILL)
    out = proc.stdout.read()
    assert proc.wait(timeout=120) != 0
    assert time.monotonic() - start < 90
    assert "error: rank 1 (pid" in out and "was killed by SIGKILL first" in out
    assert not [p for p in _children(proc.pid)]


def _children(pid: int) -> list[int]:
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout.split()
    kids = [int(p) for p in out]
    return kids + [g for k in kids for g in _children(k)]


def _env(pid: int) -> dict[str, str]:
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    return dict(item.split("=", 1) for item in raw.decode(errors="replace").split("\0") if "=" in item)


def test_resume_under_settings_the_checkpoint_does_not_fit_is_refused_before_anything_starts(workdir):
    done = runner_process(workdir, "launch", "experiments/tiny.yaml", "trainer.max_steps=2", "tracking.run_name=short")
    assert done.wait(timeout=300) == 0, done.stdout.read()
    run, _ = history(workdir, "short")
    ckpt = Path(workdir, run.data.tags["runner.checkpoint"])
    saved = ckpt.read_bytes()
    refused = runner_process(workdir, "launch", "experiments/tiny.yaml", "--resume", "last", "data.batch_size=8",
                             "pipelines.train.hybrid.share=0.5", "pipelines.train.hybrid.params.decode_device=cpu")
    out = refused.stdout.read()
    assert refused.wait(timeout=120) == 2
    assert out.splitlines()[-1] == (
        f"error: --resume: checkpoint {ckpt.relative_to(workdir)} cannot resume under these settings: "
        "data.batch_size: 4 in the checkpoint, 8 now; trainer.global_batch_size: 4 in the checkpoint, 8 now; "
        "pipelines.train.hybrid: none in the checkpoint, share 0.5, deal "
        "random now. Its model, optimizer and data readers' "
        "positions were saved under the checkpoint's values: launch with those, or start a new run without --resume.")
    assert "Traceback" not in out and ckpt.read_bytes() == saved
    two = runner_process(workdir, "launch", "experiments/tiny.yaml", "--resume", "last", "trainer.devices=2")
    out = two.stdout.read()
    assert two.wait(timeout=120) == 2 and "torchrun" not in out  # refused once, before any process is started
    assert [ln for ln in out.splitlines() if ln.startswith("error:")] == [
        f"error: --resume: checkpoint {ckpt.relative_to(workdir)} cannot resume under these settings: processes: 1 "
        "in the checkpoint, 2 now; trainer.global_batch_size: 4 in the checkpoint, 8 now. Its model, optimizer and data readers' positions were saved under the "
        "checkpoint's values: launch with those, or start a new run without --resume."]
    run_after, _ = history(workdir, "short")
    assert run_after.info.status == "FINISHED"  # the run was not reopened, nor marked failed
