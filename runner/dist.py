"""Process-group setup from torchrun's environment, and the few collectives the loop needs."""
from __future__ import annotations

import datetime
import os
import signal
import time
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

# torch is imported in the functions that use it, for start-up: `runner validate` reads Dist and runs without
# torch (~4 s).

# torch is imported where it is used: `runner validate` plans a run's ranks without loading it


@dataclass(frozen=True)
class Dist:
    """A process's place in the run: this one's after setup(), or the one validation plans for (rank 0)."""
    accelerator: str = "cpu"      # cpu | gpu
    rank: int = 0
    world: int = 1
    local_rank: int = 0
    local_world: int = 1
    # reader slots per process (gradient accumulation): in a slot's view, rank and world count slots
    slots: int = 1

    @cached_property
    def device(self) -> torch.device:
        import torch

        return torch.device("cuda", self.local_rank) if self.accelerator == "gpu" else torch.device("cpu")

    @property
    def main(self) -> bool:
        return self.rank == 0

    @property
    def enabled(self) -> bool:
        return self.world > 1


def under_torchrun() -> bool:
    """True in a worker that torchrun (ours or the user's) started."""
    return "LOCAL_RANK" in os.environ and "WORLD_SIZE" in os.environ


def setup(accelerator: str, timeout_s: float = 600) -> Dist:
    """Join the process group torchrun prepared (NCCL on GPU, gloo on CPU); world 1 needs none."""
    import torch
    import torch.distributed as dist

    rank = int(os.environ.get("RANK", 0))
    world = int(os.environ.get("WORLD_SIZE", 1))
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", 1))
    d = Dist(accelerator=accelerator, rank=rank, world=world, local_rank=local_rank, local_world=local_world)
    if accelerator == "gpu":
        torch.cuda.set_device(local_rank)
    if world > 1 and not dist.is_initialized():
        backend = "nccl" if accelerator == "gpu" else "gloo"
        dist.init_process_group(backend=backend, timeout=datetime.timedelta(seconds=timeout_s),
                                device_id=d.device if accelerator == "gpu" else None)
    return d


_PEER_GONE = ("Connection closed by peer", "Connection reset by peer", "Broken pipe", "remote process exited",
              "NCCL communicator was aborted", "Socket Timeout")


def peer_failed(e: BaseException) -> bool:
    """Whether `e` is a collective failing because another rank died (gloo/NCCL report it this way)."""
    import torch.distributed as dist

    if isinstance(e, dist.DistBackendError):
        return True
    return isinstance(e, RuntimeError) and any(s in str(e) for s in _PEER_GONE)


PEER_GRACE_S = 30.0


def await_stop(grace_s: float = PEER_GRACE_S) -> None:
    """Wait for the launcher to stop this process after a peer failed, so the peer's own exit is the one
    torchrun reports first (its exit code is the run's); the default SIGTERM action ends the wait at once."""
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, signal.SIG_DFL)
    time.sleep(grace_s)


def teardown() -> None:
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()


def all_sum(values: list[float] | torch.Tensor, d: Dist) -> torch.Tensor:
    """Element-wise sum over ranks of a small vector (one collective; the caller's only sync point)."""
    import torch
    import torch.distributed as dist

    t = values if isinstance(values, torch.Tensor) else torch.tensor(values, dtype=torch.float64)
    t = t.to(d.device, torch.float64)
    if d.enabled:
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return t.cpu()


def all_gather_objects(obj, d: Dist) -> list:
    """Every rank's `obj`, in rank order (used for per-rank loader state in checkpoints)."""
    import torch.distributed as dist

    if not d.enabled:
        return [obj]
    out = [None] * d.world
    dist.all_gather_object(out, obj)
    return out


def broadcast_object(obj, d: Dist):
    import torch.distributed as dist

    if not d.enabled:
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def barrier(d: Dist) -> None:
    import torch.distributed as dist

    if d.enabled:
        dist.barrier()
