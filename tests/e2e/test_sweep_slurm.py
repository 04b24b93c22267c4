"""runner sweep --launcher slurm on a real one-node SLURM cluster (Debian's slurm-wlm and munge, started for these
tests by scripts/slurm/local_cluster.py): a 2 x 2 study lands its grouped table; a child cancelled mid-run with
scancel resumes with `runner sweep --resume` and its curve equals an uninterrupted run of its frozen experiment;
a misconfigured child fails alone, its error in its log."""
from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from mlflow import MlflowClient

from tests.helpers import REPO, runner_process, wait_for_text, write_image_folder

PLAIN, RANDAUG = "imagenet_train", "imagenet_train_randaugment"


STEPS = 12  # 2 epochs of 6 batches


EXPERIMENT = """\
name: study
seed: 3
model: {name: resnet18, num_classes: 3}
optimizer: {lr: 0.02}
trainer: {epochs: 2, log_every_n_steps: 1, deterministic: true}
data: {root: data, batch_size: 4}
pipelines:
  train: {use: imagenet_train, params: {size: 32, decode_device: cpu}}
  eval: {use: imagenet_eval, params: {size: 32, resize_shorter: 36, decode_device: cpu}}
tracking: {experiment: study}
launcher: {cpus_per_run: 1, slurm: {time: "30"}}
"""


def _local_cluster():
    spec = importlib.util.spec_from_file_location("local_cluster", REPO / "scripts" / "slurm" / "local_cluster.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    """A one-node cluster for this module's tests; SLURM_CONF points at it while they run."""
    cluster = _local_cluster()
    if cluster.missing():
        pytest.skip(f"SLURM is not installed here (missing {', '.join(cluster.missing())}; Debian: apt-get install "
                    "slurm-wlm munge)")
    if os.geteuid() != 0:
        pytest.skip("the local SLURM cluster runs its daemons as root (slurmd starts jobs as their users)")
    root = Path("/tmp") / f"runner-slurm-{os.getpid()}"  # short: munge's socket path has a length limit
    try:
        conf = cluster.start(root, os.cpu_count() or 2)
    except SystemExit as e:
        pytest.skip(f"the local SLURM cluster did not start: {e}")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SLURM_CONF", str(conf))
        yield root
    cluster.stop(root)
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def workdir(slurm, tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("slurm-study")
    root.chmod(0o755)
    shutil.copytree(REPO / "pipelines", root / "pipelines")
    write_image_folder(root / "data" / "train", classes=3, per_class=8, seed=1)
    write_image_folder(root / "data" / "val", classes=3, per_class=3, seed=2)
    (root / "experiments").mkdir()
    (root / "experiments" / "study.yaml").write_text(EXPERIMENT)
    return root


def finish(proc: subprocess.Popen, timeout: float = 600) -> tuple[int, str]:
    out, _ = proc.communicate(timeout=timeout)
    return proc.returncode, out


def sweep_folder(out: str) -> Path:
    line = next(line for line in out.splitlines() if "sweep folder " in line)
    return Path(line.split("sweep folder ", 1)[1].split(" (", 1)[0])


def curve(uri: str, run_id: str, key: str = "train/loss") -> dict[int, float]:
    return {m.step: m.value for m in MlflowClient(uri).get_metric_history(run_id, key)}


def children_of(uri: str, parent: str) -> dict[int, object]:
    """Child index -> its newest run."""
    client = MlflowClient(uri)
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()],
                              f"tags.`mlflow.parentRunId` = '{parent}'", order_by=["attributes.start_time ASC"])
    return {int(r.data.tags["runner.sweep.child"]): r for r in runs}


def test_a_study_on_slurm_survives_a_cancelled_child_and_lands_its_grouped_table(workdir):
    uri = f"sqlite:///{workdir}/mlflow.db"
    sweep = runner_process(workdir, "sweep", "experiments/study.yaml", "seed=0,1",
                           f"pipelines.train.use={PLAIN},{RANDAUG}", "--launcher", "slurm")
    seen = []
    for line in sweep.stdout:  # read until the sweep names its folder and jobs
        seen.append(line)
        if "sweep folder " in line:
            break
    folder = sweep_folder("".join(seen))
    plan = json.loads((folder / "sweep.json").read_text())
    (submission,) = plan["submissions"]
    assert submission["children"] == [1, 2, 3, 4]
    assert "--array=1,2,3,4 " in submission["command"] and "--cpus-per-task=1" in submission["command"]
    assert "--time=30" in submission["command"] and "--requeue" in submission["command"]

    wait_for_text(folder / "002" / "log.txt", "(global 4)")  # child 2 (seed=0, RandAugment) is mid-epoch 1
    subprocess.run(["scancel", f"{submission['job']}_2"], check=True)
    code, out = finish(sweep)
    out = "".join(seen) + out
    assert code == 1, out
    assert "4 children: 3 done, 1 stopped" in out, out
    exit_record = json.loads((folder / "002" / "exit.json").read_text())
    assert exit_record["exit_code"] == 143  # SIGTERM from scancel, passed on by job.sh: it checkpointed
    assert (folder / "002" / "checkpoints").is_dir()
    parent = plan["parent_run_id"]
    stopped = children_of(uri, parent)[2]
    assert stopped.info.status == "KILLED" and len(curve(uri, stopped.info.run_id)) < STEPS

    resume = runner_process(workdir, "sweep", "--resume", parent)
    code, out = finish(resume)
    assert code == 0, out
    assert "running again: 2\n" in out.replace("\n  ", " ")
    assert "4 runs of study in 2 groups, by pipelines.train.use\n  4 children: 4 done\n" in out, out
    plan = json.loads((folder / "sweep.json").read_text())
    assert [s["children"] for s in plan["submissions"]] == [[1, 2, 3, 4], [2]]
    children = children_of(uri, parent)
    assert sorted(children) == [1, 2, 3, 4] and all(r.info.status == "FINISHED" for r in children.values())
    assert children[2].info.run_id == stopped.info.run_id  # resumed in place, not started again
    assert "restart 0" in (folder / "002" / "log.txt").read_text()

    # the same child, never interrupted: its frozen experiment launched by hand, into another store
    again = runner_process(workdir, "launch", folder / "002" / "experiment.yaml", "tracking.uri=sqlite:///again.db",
                           f"trainer.checkpoint_dir={workdir / 'again-ckpt'}", "~tracking.tags")
    code, out = finish(again)
    assert code == 0, out
    (full,) = MlflowClient(f"sqlite:///{workdir}/again.db").search_runs(
        [MlflowClient(f"sqlite:///{workdir}/again.db").get_experiment_by_name("study").experiment_id])
    resumed_curve = curve(uri, children[2].info.run_id)
    assert sorted(resumed_curve) == list(range(1, STEPS + 1))
    assert resumed_curve == curve(f"sqlite:///{workdir}/again.db", full.info.run_id)  # bit for bit
    assert curve(uri, children[2].info.run_id, "eval/top1") == curve(f"sqlite:///{workdir}/again.db",
                                                                      full.info.run_id, "eval/top1")

    parent_run = MlflowClient(uri).get_run(parent)
    assert parent_run.info.status == "FINISHED"
    from runner.tracking.store import read_artifact

    assert read_artifact(uri, parent, "compare.md").startswith(
        "4 runs of study in 2 groups, by pipelines.train.use\n\n- 4 children: 4 done\n")


def test_a_misconfigured_child_fails_alone_with_its_error_in_its_log(workdir):
    sweep = runner_process(workdir, "sweep", "experiments/study.yaml", "model.name=resnet18,resnet1800",
                           "trainer.max_steps=2", "--launcher", "slurm", "tracking.experiment=misconfigured")
    code, out = finish(sweep)
    assert code == 2, out  # only config failures
    folder = sweep_folder(out)
    plan = json.loads((folder / "sweep.json").read_text())
    assert [s["children"] for s in plan["submissions"]] == [[1]]  # the other was never submitted
    error = ("command line 'model.name=resnet18,resnet1800': model.name: unknown model 'resnet1800'. Did you mean "
             "'resnet18'? Valid models: alexnet, ")
    log = (folder / "002" / "log.txt").read_text()
    assert log.startswith(f"error: {error}") and log.endswith(" (80 in all).\n") and log.count("\n") == 1
    assert f"error: sweep child 2 (name=resnet1800) does not validate: {error}" in out
    assert f"(80 in all). Its log: {folder / '002' / 'log.txt'}\n" in out
    assert json.loads((folder / "001" / "exit.json").read_text())["exit_code"] == 0
    assert "\n  2 children: 1 done, 1 invalid\n" in out, out
