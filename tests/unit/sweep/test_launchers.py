"""The sweep's launchers without running a child: how exit codes read, the slots a machine is split into, the sbatch
command and job script a plan gives, and which children `runner sweep --resume` runs again."""
from __future__ import annotations

import dataclasses

import pytest

from runner.config.sections import LauncherConfig, SlurmConfig
from runner.errors import ConfigError
from runner.sweep.local import Slot, plan_slots
from runner.sweep.plan import Resources, write_exit
from runner.sweep.slurm import check_slurm_config, sbatch_command
from runner.sweep.start import _again
from runner.sweep.status import counts_line, exit_reason, newest_attempts, sweep_status
from runner.tracking.store import RunRecord
from tests.fixtures.sweep_launchers import plan


def at(key: str) -> dict:
    return {"file": "exp.yaml", "where": key}


@pytest.mark.parametrize("code,state,reason", [
    (0, "done", ""),
    (2, "failed", "config or data (exit 2): the same again on a retry"),
    (1, "failed", "exit 1"),
    (143, "stopped", "SIGTERM"),   # scancel, or the local sweep's Ctrl-C passed on
    (130, "stopped", "SIGINT"),
    (137, "stopped", "SIGKILL"),
    (-15, "stopped", "SIGTERM"),   # as Popen reports a signal
    (139, "failed", "exit 139"),   # a crash (SIGSEGV) is not a stop: a retry would crash again
])
def test_an_exit_code_reads_as_a_state(code, state, reason):
    assert exit_reason(code) == (state, reason)


def test_the_counts_line_names_every_state_that_has_children():
    assert counts_line(["done", "running", "done", "queued", "invalid"]) == \
        "5 children: 2 done, 1 running, 1 queued, 1 invalid"
    assert counts_line([], 0) == "0 children: none started"
    assert counts_line(["done"]) == "1 child: 1 done"


def test_a_cpu_machine_is_split_into_pinned_slots():
    slots = plan_slots(LauncherConfig(parallel=2), [], [0, 1, 2, 3, 4], at)
    assert slots == [Slot(gpus=None, cpus=(0, 1)), Slot(gpus=None, cpus=(2, 3))]
    assert slots[1].describe() == "cores 2-3"
    assert plan_slots(LauncherConfig(), [], [0, 1], at) == [Slot(gpus=None, cpus=None)]  # one at a time: unpinned


def test_each_child_gets_its_own_gpus():
    slots = plan_slots(LauncherConfig(gpus_per_run=2), ["0", "1", "2", "3", "4", "5", "6", "7"], list(range(16)), at)
    assert [s.gpus for s in slots] == [("0", "1"), ("2", "3"), ("4", "5"), ("6", "7")]
    assert [s.cpus for s in slots] == [(0, 1, 2, 3), (4, 5, 6, 7), (8, 9, 10, 11), (12, 13, 14, 15)]
    assert slots[0].describe() == "GPUs 0,1, cores 0-3"
    (cpu_only,) = plan_slots(LauncherConfig(gpus_per_run=0), ["0"], [0, 1], at)
    assert cpu_only.gpus == () and cpu_only.describe() == "GPUs none"


@pytest.mark.parametrize("launcher,gpus,cores,message,key", [
    (LauncherConfig(gpus_per_run=3), ["0", "1"], [0, 1],
     "3 GPUs for each child, but this machine has 2 visible GPU(s). Give each child at most 2 (or 0, to train on the "
     "CPU).", "launcher.gpus_per_run"),
    (LauncherConfig(gpus_per_run=2, parallel=3), ["0", "1", "2", "3"], [0, 1, 2, 3],
     "3 children at once with 2 GPUs each need 6 GPUs; this machine has 4 visible. Run at most 2 at once, or give "
     "each fewer.", "launcher.parallel"),
    (LauncherConfig(parallel=2, cpus_per_run=2), [], [0, 1],
     "2 children at once with 2 cores each need 4 cores; this process may use 2. Run fewer at once, or give each "
     "fewer cores.", "launcher.cpus_per_run"),
    (LauncherConfig(parallel=3), [], [0, 1],
     "3 children at once with 1 cores each need 3 cores; this process may use 2. Run fewer at once, or give each "
     "fewer cores.", "launcher.parallel"),
])
def test_slots_a_machine_cannot_give_are_refused(launcher, gpus, cores, message, key):
    with pytest.raises(ConfigError) as e:
        plan_slots(launcher, gpus, cores, at)
    assert (e.value.message, e.value.where) == (message, key)


def test_sbatch_asks_for_each_childs_resources_as_one_array(tmp_path):
    p = plan(tmp_path)
    launcher = LauncherConfig(name="slurm", parallel=2, slurm=SlurmConfig(
        partition="gpu", time="4:00:00", mem="64G", options=["--constraint=h100", "--exclusive"], grace_s=300))
    argv = sbatch_command(p, launcher, Resources(nodes=2, gpus=8, cpus=32), [1, 3, 4])
    folder = p.folder
    assert argv == ["sbatch", "--parsable", "--job-name=runner-tiny", "--array=1,3,4%2",
                    f"--output={folder}/%3a/log.txt", "--open-mode=append", f"--chdir={tmp_path}", "--nodes=2",
                    "--ntasks-per-node=1", "--gpus-per-node=8", "--cpus-per-task=32", "--partition=gpu",
                    "--time=4:00:00", "--mem=64G", "--requeue", "--signal=B:USR1@300", "--constraint=h100",
                    "--exclusive", f"{folder}/job.sh"]
    plain = sbatch_command(p, LauncherConfig(name="slurm", slurm=SlurmConfig(requeue=False)), Resources(), [2])
    assert plain[3] == "--array=2" and "--no-requeue" in plain and not any(a.startswith("--signal") for a in plain)


@pytest.mark.parametrize("cfg,message,key", [
    (SlurmConfig(time="4h"), "'4h' is not a SLURM time limit; write minutes (90), HH:MM:SS (4:00:00) or D-HH:MM:SS "
     "(2-00:00:00).", "launcher.slurm.time"),
    (SlurmConfig(options=["constraint=h100"]), "'constraint=h100' is not an sbatch option; write each as on sbatch's "
     "command line, e.g. --constraint=h100 or --exclusive.", "launcher.slurm.options.0"),
    (SlurmConfig(options=["--exclusive", "--output=x.log"]), "'--output' is set by runner sweep for every child (its "
     "array, log and working folder); remove it from launcher.slurm.options.", "launcher.slurm.options.1"),
])
def test_slurm_settings_sbatch_would_refuse_are_caught_first(cfg, message, key):
    with pytest.raises(ConfigError) as e:
        check_slurm_config(cfg, at)
    assert (e.value.message, e.value.where) == (message, key)


def record(index: int, status: str, start_ms: int, run_id: str) -> RunRecord:
    return RunRecord(run_id=run_id, name=f"seed={index - 1}", experiment="1", status=status, start_ms=start_ms,
                     end_ms=None, params={}, tags={"runner.sweep.child": str(index)}, metric_keys=(), uri="")


def test_resume_runs_again_only_the_children_that_did_not_finish(tmp_path):
    p = plan(tmp_path, 6)
    p = dataclasses.replace(p, children=[*p.children[:5], dataclasses.replace(p.children[5], error="bad override")])
    for child, code in zip(p.children[:4], (0, 143, 2, 1)):
        p.child_dir(child).mkdir(parents=True)
        write_exit(p.child_dir(child), code)
    # child 5 never ran; child 6 does not validate; child 1's earlier attempt was superseded by a newer one
    runs = newest_attempts([record(1, "KILLED", 1, "old"), record(1, "FINISHED", 2, "new"),
                            record(2, "KILLED", 3, "two")])
    assert runs[1].run_id == "new"
    statuses = sweep_status(p, {}, runs)
    assert [(s.state, s.reason) for s in statuses] == [
        ("done", ""), ("stopped", "SIGTERM"), ("failed", "config or data (exit 2): the same again on a retry"),
        ("failed", "exit 1"), ("not started", ""), ("invalid", "does not validate")]
    assert [s.child.index for s in statuses if _again(s, retry_failed=False)] == [2, 4, 5]
    assert [s.child.index for s in statuses if _again(s, retry_failed=True)] == [2, 3, 4, 5]


def test_a_child_killed_outright_has_its_run_ended_by_the_sweep(tmp_path, template_db):
    import shutil

    from mlflow import MlflowClient

    from runner.sweep.drive import end_abandoned_runs
    from runner.tracking.store import get_run

    shutil.copy(template_db, tmp_path / "mlflow.db")
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    client = MlflowClient(uri)
    exp = client.create_experiment("tiny")
    killed, finished = (client.create_run(exp).info.run_id for _ in range(2))
    client.set_terminated(finished, "FINISHED")
    p = dataclasses.replace(plan(tmp_path, 2), uri=uri)
    for child, code in zip(p.children, (137, 0)):
        p.child_dir(child).mkdir(parents=True)
        write_exit(p.child_dir(child), code)
    runs = {1: get_run(uri, killed), 2: get_run(uri, finished)}
    end_abandoned_runs(p, sweep_status(p, {}, runs))  # SIGKILL: the child's run could not end itself
    assert [client.get_run(r).info.status for r in (killed, finished)] == ["KILLED", "FINISHED"]
