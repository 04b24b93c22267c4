"""What this machine has: GPUs (through NVML, without importing torch) and CPU cores."""
from __future__ import annotations

import functools
import logging
import os
from typing import Any

from runner.errors import MachineError

# pynvml is imported where GPUs are counted: it loads NVIDIA's driver library, absent on CPU-only machines.

log = logging.getLogger(__name__)

GIB = 1024 ** 3


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


def load_nvml() -> Any | None:
    """pynvml, initialised; None when the library or driver is missing."""
    try:
        import pynvml
        pynvml.nvmlInit()
    except Exception as e:  # ImportError, NVMLError_LibraryNotFound, driver not loaded, ...
        log.debug("NVML unavailable: %s", e)
        return None
    return pynvml


def nvml_handles(nvml: Any, indices: list[int] | None) -> list[tuple[int, Any]]:
    """(CUDA index, NVML handle) pairs. CUDA indices count only CUDA_VISIBLE_DEVICES; NVML's do not."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    ids: list[str] = ([v.strip() for v in visible.split(",") if v.strip()] if visible is not None
                      else [str(i) for i in range(nvml.nvmlDeviceGetCount())])
    out = []
    for i in range(len(ids)) if indices is None else indices:
        try:
            ident = ids[i]
            h = (nvml.nvmlDeviceGetHandleByIndex(int(ident)) if ident.isdigit()
                 else nvml.nvmlDeviceGetHandleByUUID(ident))
        except (IndexError, nvml.NVMLError) as e:
            log.warning("GPU %d: no NVML readings (%s)", i, e)
            continue
        out.append((i, h))
    return out


def gpu_info() -> dict[str, str]:
    """Run tags describing the visible GPUs: model, count, driver, memory. {} without NVML."""
    nvml = load_nvml()
    if nvml is None:
        return {}
    try:
        handles = [h for _, h in nvml_handles(nvml, None)]
        if not handles:
            return {}
        names = [nvml.nvmlDeviceGetName(h) for h in handles]
        names = [n.decode() if isinstance(n, bytes) else n for n in names]
        driver = nvml.nvmlSystemGetDriverVersion()
        mem = nvml.nvmlDeviceGetMemoryInfo(handles[0]).total / GIB
        return {"gpu.model": ", ".join(sorted(set(names))), "gpu.count": str(len(handles)),
                "gpu.driver": driver.decode() if isinstance(driver, bytes) else str(driver),
                "gpu.memory_gib": f"{mem:.1f}"}
    except nvml.NVMLError as e:
        log.debug("NVML query failed: %s", e)
        return {}
    finally:
        nvml.nvmlShutdown()
