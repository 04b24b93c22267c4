"""What this machine has: GPUs (through NVML, without importing torch) and CPU cores."""
from __future__ import annotations

import functools
import os

from runner.errors import MachineError


@functools.cache
def visible_gpus() -> int:
    """CUDA GPUs this process may use, honouring CUDA_VISIBLE_DEVICES (0 without a driver)."""
    try:
        import pynvml

        pynvml.nvmlInit()
        count = pynvml.nvmlDeviceGetCount()
    except Exception:  # no driver, no library: a CPU machine
        return 0
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    if listed is None:
        return count
    ids = [d for d in listed.split(",") if d.strip() and d.strip() != "-1"]
    return min(count, len(ids))


def visible_gpu_ids() -> list[str]:
    """The ids CUDA_VISIBLE_DEVICES gives the visible GPUs (indexes or UUIDs; all of them when it is unset), to hand
    a subset to a child process."""
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    if listed is None:
        return [str(i) for i in range(visible_gpus())]
    return [d.strip() for d in listed.split(",") if d.strip() and d.strip() != "-1"][:visible_gpus()]


def cpu_core_ids() -> list[int]:
    """The cores this process may run on, by id."""
    try:
        return sorted(os.sched_getaffinity(0))
    except AttributeError:
        return list(range(os.cpu_count() or 1))


def cpu_cores() -> int:
    """Cores this process may run on (the affinity mask, not the machine's total)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def resolve_accelerator(requested: str, at: dict | None = None) -> str:
    """'cpu' or 'gpu' for trainer.accelerator (auto picks the GPU when there is one)."""
    gpus = visible_gpus()
    if requested == "gpu" and gpus == 0:
        raise MachineError(
            "the experiment asks for a GPU (trainer.accelerator: gpu) but this machine has none that CUDA "
            "can use (NVML found no device, or CUDA_VISIBLE_DEVICES hides them). Set trainer.accelerator=auto "
            "to fall back to the CPU, or run on a GPU machine.", **(at or {}))
    if requested == "auto":
        return "gpu" if gpus else "cpu"
    return requested


def processes_per_node(devices: int | str, accelerator: str, at: dict | None = None) -> int:
    """trainer.devices -> how many processes to start on this node."""
    if devices == "auto":
        return visible_gpus() if accelerator == "gpu" else 1
    if accelerator == "gpu" and devices > visible_gpus():
        raise MachineError(f"trainer.devices is {devices} but this machine has {visible_gpus()} visible GPU(s). "
                           "Use trainer.devices=auto or a smaller number.", **(at or {}))
    return int(devices)
