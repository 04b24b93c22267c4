"""The processes a run starts: torchrun's command line and launcher, and each process's threads and numerics."""
from __future__ import annotations

import os
import signal

import torch
from torch.distributed.elastic.multiprocessing.api import SignalException
from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
from torch.distributed.run import get_args_parser, run

from runner import console
from runner.config.sections import TrainerConfig
from runner.dist import Dist
from runner.machine import cpu_cores


def configure_torch(cfg, d: Dist) -> None:
    """Seeds and numerics: deterministic when asked, fast (cuDNN autotune, TF32) otherwise."""
    torch.manual_seed(cfg.seed)  # identical initial weights on every rank
    torch.use_deterministic_algorithms(cfg.trainer.deterministic)  # both ways: in-process re-runs inherit it
    if cfg.trainer.deterministic:
        torch.backends.cudnn.benchmark = False
        torch.backends.cuda.matmul.allow_tf32 = False  # numbers comparable across GPU generations
        torch.backends.cudnn.allow_tf32 = False
    elif d.device.type == "cuda":
        torch.backends.cudnn.benchmark = True
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True


WORKER_ENV = "RUNNER_WORKER_OF"  # set by our torchrun parent: the worker need not repeat its notes


def torchrun_args(tc: TrainerConfig, processes: int, experiment: str, overrides: list[str], extra: list[str],
                  command: tuple[str, ...] = ("launch",)) -> list[str]:
    """torchrun's own command line: `processes` per node, the trainer section's nodes and rendezvous, then
    `-m runner launch ...` (or `command`)."""
    args = [f"--nproc-per-node={processes}", f"--nnodes={tc.nnodes}", f"--max-restarts={tc.max_restarts}"]
    if tc.nnodes > 1:  # config.load checked that rdzv_endpoint is set
        args += [f"--node-rank={tc.node_rank}", f"--rdzv-backend={tc.rdzv_backend}",
                 f"--rdzv-endpoint={tc.rdzv_endpoint}", f"--rdzv-id={tc.rdzv_id}"]
    else:
        args += ["--standalone"]
    return args + ["-m", "runner", *command, experiment, *overrides, *extra]


def run_torchrun(args: list[str], processes: int) -> int:
    """PyTorch's launcher (torch.distributed.run), in this process so that its failure report is ours."""
    os.environ[WORKER_ENV] = str(os.getpid())
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, cpu_cores() // processes)))
    console.note(f"starting {processes} processes per node with torchrun: torchrun {' '.join(args)}")
    try:
        run(get_args_parser().parse_args(args))
    except ChildFailedError as e:
        rank, failure = e.get_first_failure()
        code = failure.exitcode
        how = f"was killed by {signal.Signals(-code).name}" if code < 0 else f"exited with code {code}"
        console.error(f"rank {rank} (pid {failure.pid}) {how} first; its own message, if any, is above. torchrun "
                      "stopped the other processes. A run that was checkpointed can continue with --resume.")
        return code if code > 0 else 128 - code
    except SignalException as e:  # SIGTERM/SIGINT to this process: torchrun passed it on to the workers
        console.error(f"stopped by {e.sigval.name}; the workers saved a checkpoint if they could (--resume).")
        return 128 + int(e.sigval)
    return 0


def torch_threads(d) -> None:
    if d.device.type == "cpu":
        torch.set_num_threads(max(1, cpu_cores() // max(1, d.local_world)))
