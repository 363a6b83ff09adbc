"""Device-memory arithmetic of the GPU probe, with FAKE NVML and FAKE torch allocator objects.

They are fakes because there is no GPU on the development and CI machines;
the real path runs in scripts/gpu_check.sh on a GPU box.  What is tested is
our merge rule and its bookkeeping, not NVML itself.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from airflow_provider_dj.engine.gpu.report import schedule_num_gpus
from airflow_provider_dj.engine.preflight.memory import (
    CpuRssMemoryProbe,
    CudaMemoryProbe,
    NoValidPeakError,
    _physical_device,
    memory_fraction,
    merge_peak,
)

GiB = 2**30


class FakeNvml:
    def __init__(self, used_seq, total=80 * GiB, name=b"NVIDIA H200"):
        self.used_seq = list(used_seq)
        self.total, self.name = total, name
        self.calls: list = []

    def nvmlInit(self):
        self.calls.append("init")

    def nvmlDeviceGetHandleByIndex(self, i):
        self.calls.append(("index", i))
        return ("h", i)

    def nvmlDeviceGetHandleByUUID(self, u):
        self.calls.append(("uuid", u))
        return ("h", u)

    def nvmlDeviceGetMemoryInfo(self, handle):
        used = self.used_seq.pop(0) if len(self.used_seq) > 1 else self.used_seq[0]
        return SimpleNamespace(used=used, total=self.total)

    def nvmlDeviceGetName(self, handle):
        return self.name

    def nvmlDeviceGetCount(self):
        return 8


class FakeAllocator:
    def __init__(self, peak, reserved, initialized=True):
        self.peak, self.reserved, self.initialized = peak, reserved, initialized
        self.resets = 0

    def is_initialized(self):
        return self.initialized

    def synchronize(self, d):
        pass

    def reset_peak_memory_stats(self, d):
        self.resets += 1

    def max_memory_allocated(self, d):
        return self.peak

    def memory_reserved(self, d):
        return self.reserved

    def empty_cache(self):
        pass


def test_merge_takes_torch_peak_plus_non_torch_share():
    # 3 GiB torch peak; NVML grew 5 GiB of which torch reserves 4 -> 1 GiB is context/other runtimes.
    m = merge_peak(torch_peak=3 * GiB, torch_reserved_after=4 * GiB, nvml_before=1 * GiB, nvml_after=6 * GiB)
    assert m["non_torch_bytes"] == 1 * GiB
    assert m["nvml_delta_bytes"] == 5 * GiB
    assert m["peak_bytes"] == 5 * GiB  # max(3+1, 5)


def test_merge_prefers_transient_torch_peak_over_smaller_persistent_delta():
    # A transient 10 GiB activation peak freed back to a 2 GiB cache: NVML delta 2.5 GiB.
    m = merge_peak(torch_peak=10 * GiB, torch_reserved_after=2 * GiB, nvml_before=0, nvml_after=int(2.5 * GiB))
    assert m["peak_bytes"] == int(10.5 * GiB)


def test_merge_covers_non_torch_runtime():
    # An ONNX-style runtime: torch saw nothing, NVML saw 7 GiB.
    m = merge_peak(torch_peak=0, torch_reserved_after=0, nvml_before=GiB, nvml_after=8 * GiB)
    assert m["peak_bytes"] == 7 * GiB


def test_cuda_probe_reports_fraction_with_headroom():
    nvml = FakeNvml(used_seq=[1 * GiB, 9 * GiB], total=80 * GiB)
    alloc = FakeAllocator(peak=6 * GiB, reserved=7 * GiB)
    probe = CudaMemoryProbe(nvml=nvml, cuda=alloc, visible_devices="")
    probe.start()
    out = probe.finish()
    assert alloc.resets == 1
    assert out["peak_bytes"] == 8 * GiB  # max(6 + (8-7), 8)
    assert out["memory_fraction"] == pytest.approx(8 * 1.1 / 80)
    assert out["memory_source"] == "nvml+torch"
    info = probe.device_info()
    assert info == {
        "kind": "cuda",
        "gpu_model": "NVIDIA H200",
        "gpu_total_bytes": 80 * GiB,
        "gpu_count": 8,
        "physical_device": 0,
    }


def test_cuda_probe_samples_nvml_before_cuda_is_touched():
    nvml = FakeNvml(used_seq=[GiB, 2 * GiB])
    alloc = FakeAllocator(peak=0, reserved=0, initialized=False)
    probe = CudaMemoryProbe(nvml=nvml, cuda=alloc, visible_devices="")
    probe.start()
    assert alloc.resets == 0  # nothing to reset, and no CUDA init from the probe itself
    assert probe.finish()["peak_bytes"] == GiB


def test_no_valid_peak_fails():
    probe = CudaMemoryProbe(nvml=FakeNvml(used_seq=[GiB]), cuda=FakeAllocator(0, 0), visible_devices="")
    probe.start()
    with pytest.raises(NoValidPeakError, match="no valid GPU memory peak"):
        probe.finish()


def test_visible_devices_map_to_physical_nvml_handles():
    assert _physical_device("3,5", 0) == 3
    assert _physical_device("GPU-abc,GPU-def", 1) == "GPU-def"
    nvml = FakeNvml(used_seq=[GiB])
    CudaMemoryProbe(nvml=nvml, cuda=FakeAllocator(1, 1), visible_devices="GPU-abc")
    assert ("uuid", "GPU-abc") in nvml.calls


def test_fraction_caps_at_one():
    assert memory_fraction(100 * GiB, 80 * GiB) == 1.0


def test_num_gpus_rule():
    # unset: max(fraction, 1/cap)
    assert schedule_num_gpus(0.05, None, 5, "cuda") == (0.2, None)
    assert schedule_num_gpus(0.33, None, 5, "cuda") == (0.33, None)
    # explicit below the measured share: raised, with a warning
    value, warning = schedule_num_gpus(0.4, 0.25, 5, "cuda")
    assert value == 0.4 and "raised" in warning
    # explicit otherwise wins (even below 1/cap)
    assert schedule_num_gpus(0.05, 0.1, 5, "cuda") == (0.1, None)
    # CPU path: never ask Ray for a GPU share
    assert schedule_num_gpus(None, 0.5, 5, "cpu") == (0.0, None)


def test_cpu_probe_is_marked_cpu_rss():
    probe = CpuRssMemoryProbe()
    probe.start()
    blob = bytearray(64 << 20)  # touch 64 MiB
    blob[::4096] = b"x" * len(blob[::4096])
    out = probe.finish()
    assert out["memory_source"] == "cpu-rss" and out["memory_fraction"] is None
    assert out["peak_rss_bytes"] >= out["rss_before_bytes"] > 0
