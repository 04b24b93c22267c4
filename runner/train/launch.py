"""`runner launch`: prepare data, then run the worker here (one process) or under torchrun (several).

Several processes are always started by PyTorch's own launcher (torch.distributed.run), with its
rendezvous options passed through for multi-node runs; a worker that torchrun started (ours or
the user's own `torchrun -m runner launch ...`) is recognised by torchrun's environment.
"""
from __future__ import annotations

import os

from runner.dist import under_torchrun
from runner.run.data import checked_with_data, ensure_data
from runner.run.processes import run_torchrun, torchrun_args
from runner.run.resume import AUTO_RESUME, auto_resume, load_resume
from runner.tracking.uri import logged_to
from runner.train.worker import RunObserver, run_worker
from runner.weights.init import plan_init


def launch(v, experiment: str, overrides: list[str], *, resume: str | None = None,
           observer: RunObserver | None = None) -> int:
    """Run the experiment to its end; returns the process exit code. `observer` hears of the run's fresh start
    and of its end (on rank 0)."""
    if v.config.trainer.deterministic:  # cuBLAS reproducibility; torch before ~2.10 raises without it
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    if resume == AUTO_RESUME:
        resume = auto_resume(v.config.trainer.checkpoint_dir, v.config.name)
    if under_torchrun():
        return run_worker(v, resume=resume, observer=observer)
    init = None
    if v.config.model.init is not None and not resume:
        init = plan_init(v.config.model, v.weights_place)  # weights that do not fit fail here, before any work; workers find a fetch cached
    ensure_data(v)
    v = checked_with_data(v)
    if v.target.world == 1:
        return run_worker(v, resume=resume, init=init, observer=observer)
    if resume:  # refused here once, rather than by every process torchrun would start
        load_resume(resume, v.config.trainer.checkpoint_dir, v.config.name,
                    logged_to(v.config.tracking, v.loaded.at("tracking.uri")), v.fixed_settings(v.target.world))
    return run_torchrun(torchrun_args(v.config.trainer, v.processes, experiment, overrides,
                                      ["--resume", resume] if resume else []),
                        v.processes)


