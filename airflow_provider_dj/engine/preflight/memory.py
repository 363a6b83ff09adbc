"""Peak device memory of one probe call, behind one small interface.

Why an interface: the GPU path needs NVML and the torch allocator, which do
not exist on CPU-only machines (CI, laptops).  ``DeviceMemoryProbe`` has
two calls, ``start()`` before the op is built and ``finish()`` after its
last batch, and three implementations:

* ``CudaMemoryProbe`` (NVML + torch allocator) for a real GPU;
* ``CpuRssMemoryProbe`` for the CPU path, marked ``memory_source: "cpu-rss"``
  so nobody mistakes a process RSS figure for device memory;
* tests pass fake NVML / allocator objects to ``CudaMemoryProbe`` (there is
  no GPU on the development machines).

How the GPU peak is computed (documented in docs/gpu_preflight.md):

``torch_peak``  = ``torch.cuda.max_memory_allocated`` over the call (the
                  allocator's peak statistics are reset in ``start()``);
``nvml_delta``  = NVML device used memory after the call minus before it
                  (what the call left resident: CUDA context, cuBLAS/cuDNN
                  workspaces, the torch cache, other runtimes such as ONNX);
``non_torch``   = max(0, ``nvml_delta`` - ``torch_reserved_after``): the part
                  of the persistent usage that torch's allocator does not own;
``peak``        = max(``torch_peak`` + ``non_torch``, ``nvml_delta``);
``memory_fraction`` = min(1, ``peak`` * 1.10 / device total).

NVML is sampled only before and after the call, never from a background
thread while the model initialises (polling CUDA during initialisation
can deadlock or slow some runtimes).
"""

from __future__ import annotations

import os
import resource
import sys
from typing import Any, Protocol

from airflow_provider_dj.core.errors import DJError

HEADROOM = 0.10


class NoValidPeakError(DJError, RuntimeError):
    """The memory probe saw no usable peak (zero or negative): the figure cannot size replicas."""


class DeviceMemoryProbe(Protocol):
    source: str

    def start(self) -> None: ...

    def finish(self) -> dict: ...

    def device_info(self) -> dict: ...


def memory_fraction(peak_bytes: int, total_bytes: int, headroom: float = HEADROOM) -> float:
    """Share of one device a replica needs, headroom included, capped at 1."""
    if total_bytes <= 0:
        raise NoValidPeakError(f"device total memory is {total_bytes} bytes")
    return min(1.0, peak_bytes * (1.0 + headroom) / total_bytes)


def merge_peak(torch_peak: int, torch_reserved_after: int, nvml_before: int, nvml_after: int) -> dict:
    """The documented merge of allocator and NVML figures (pure, so it is unit-tested directly)."""
    nvml_delta = max(0, int(nvml_after) - int(nvml_before))
    non_torch = max(0, nvml_delta - int(torch_reserved_after))
    peak = max(int(torch_peak) + non_torch, nvml_delta)
    return {
        "torch_peak_bytes": int(torch_peak),
        "torch_reserved_after_bytes": int(torch_reserved_after),
        "nvml_used_before_bytes": int(nvml_before),
        "nvml_used_after_bytes": int(nvml_after),
        "nvml_delta_bytes": nvml_delta,
        "non_torch_bytes": non_torch,
        "peak_bytes": peak,
    }


def _physical_device(visible: str | None, logical_index: int) -> int | str:
    """NVML counts physical devices; CUDA_VISIBLE_DEVICES (set by Ray) renumbers them for torch."""
    if not visible:
        return logical_index
    entries = [e.strip() for e in visible.split(",") if e.strip()]
    if logical_index >= len(entries):
        return logical_index
    entry = entries[logical_index]
    return int(entry) if entry.isdigit() else entry  # a GPU-... UUID


class CudaMemoryProbe:
    """NVML + torch allocator.  ``nvml`` is the ``pynvml`` module (from nvidia-ml-py), ``cuda`` is
    ``torch.cuda``; both are injectable so the arithmetic is testable with fakes."""

    source = "nvml+torch"

    def __init__(
        self, nvml: Any = None, cuda: Any = None, device_index: int = 0, visible_devices: str | None = None
    ) -> None:
        if nvml is None:
            import pynvml as nvml  # nvidia-ml-py
        if cuda is None:
            import torch

            cuda = torch.cuda
        self.nvml, self.cuda, self.device_index = nvml, cuda, device_index
        self.nvml.nvmlInit()
        visible = os.environ.get("CUDA_VISIBLE_DEVICES") if visible_devices is None else visible_devices
        phys = _physical_device(visible, device_index)
        if isinstance(phys, str):
            self.handle = self.nvml.nvmlDeviceGetHandleByUUID(phys)
        else:
            self.handle = self.nvml.nvmlDeviceGetHandleByIndex(phys)
        self.physical_device = phys
        self._before: int | None = None

    def _used(self) -> int:
        return int(self.nvml.nvmlDeviceGetMemoryInfo(self.handle).used)

    def device_info(self) -> dict:
        name = self.nvml.nvmlDeviceGetName(self.handle)
        if isinstance(name, bytes):
            name = name.decode()
        return {
            "kind": "cuda",
            "gpu_model": str(name),
            "gpu_total_bytes": int(self.nvml.nvmlDeviceGetMemoryInfo(self.handle).total),
            "gpu_count": int(self.nvml.nvmlDeviceGetCount()),
            "physical_device": self.physical_device,
        }

    def start(self) -> None:
        # NVML first, before this process touches CUDA: the CUDA context the op's first kernel
        # creates (hundreds of MiB) is then part of the delta, as it is for every real replica.
        self._before = self._used()
        if self.cuda.is_initialized():  # an uninitialised allocator has no peak to reset
            self.cuda.synchronize(self.device_index)
            self.cuda.reset_peak_memory_stats(self.device_index)

    def finish(self) -> dict:
        if self._before is None:
            raise RuntimeError("finish() called before start()")
        if self.cuda.is_initialized():
            self.cuda.synchronize(self.device_index)
        torch_peak = int(self.cuda.max_memory_allocated(self.device_index))
        reserved = int(self.cuda.memory_reserved(self.device_index))
        after = self._used()
        out = merge_peak(torch_peak, reserved, self._before, after)
        total = int(self.nvml.nvmlDeviceGetMemoryInfo(self.handle).total)
        if out["peak_bytes"] <= 0:
            raise NoValidPeakError(
                "no valid GPU memory peak: the torch allocator reported 0 bytes and NVML "
                "saw no growth; the op may not have used the GPU (check its device argument)"
            )
        out.update(
            memory_source=self.source,
            device_total_bytes=total,
            memory_fraction=memory_fraction(out["peak_bytes"], total),
        )
        return out

    def release(self) -> None:
        """Return cached allocator blocks between probes in one worker (ordered replay)."""
        try:
            self.cuda.empty_cache()
        except Exception:  # noqa: BLE001 - best effort
            pass


def _current_rss() -> int:
    try:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def _max_rss() -> int:
    ru = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(ru) if sys.platform == "darwin" else int(ru) * 1024  # Linux reports KiB


class CpuRssMemoryProbe:
    """CPU path: growth of the process's peak RSS over the call.

    ``ru_maxrss`` is a high-water mark for the whole process, so the figure
    is ``max(peak RSS after, RSS before) - RSS before``: a lower bound when
    the process had peaked higher earlier.  It sizes nothing on a GPU, so
    ``memory_fraction`` stays null and the report says ``cpu-rss``.
    """

    source = "cpu-rss"

    def __init__(self) -> None:
        self._before: int | None = None

    def device_info(self) -> dict:
        return {"kind": "cpu", "gpu_model": None, "gpu_total_bytes": None, "gpu_count": 0}

    def start(self) -> None:
        self._before = _current_rss()

    def finish(self) -> dict:
        if self._before is None:
            raise RuntimeError("finish() called before start()")
        peak_rss = max(_max_rss(), _current_rss())
        return {
            "memory_source": self.source,
            "rss_before_bytes": self._before,
            "peak_rss_bytes": peak_rss,
            "peak_bytes": max(0, peak_rss - self._before),
            "device_total_bytes": None,
            "memory_fraction": None,
        }

    def release(self) -> None:
        pass
