"""``max_concurrent_gpu_probes`` bounds how many probe workers run at once, observed on real processes.

Each probe worker notes when it was busy (``started_at``/``finished_at``, its own clock) and the report
keeps them per unit; the overlap of those intervals is what ran at once, whatever the driver believed.
The ops are the CPU fakes of probe_test_ops.py (``uses_cuda=True``, no GPU here).  Overlap depends on
timing, so the bound is checked on every one of several runs, and reaching it on at least one.
"""

from __future__ import annotations

import itertools

from airflow_provider_dj.engine.preflight import preflight as preflight_mod
from airflow_provider_dj.engine.preflight.executors import concurrency_limit
from airflow_provider_dj.engine.preflight.preflight import (
    OpEntry,
    PreflightSettings,
    peak_concurrency,
    run_preflight,
)
from airflow_provider_dj.ops.registry import get_op_class


def _independent_targets(n: int, init_s: float) -> list[OpEntry]:
    """``n`` GPU targets reading ``text``, each writing its own field: ``n`` parallel units."""
    cls = get_op_class("fake_cuda_embed_mapper")
    return [
        OpEntry(i, cls.name, {"batch_size": 4, "init_s": init_s, "output_columns": [f"emb_{i}"]}, cls) for i in range(n)
    ]


def _overlapping(units: list[dict]) -> list[tuple[dict, dict]]:
    return [
        (a, b)
        for a, b in itertools.combinations(units, 2)
        if a["started_at"] < b["finished_at"] and b["started_at"] < a["finished_at"]
    ]


def test_peak_concurrency_counts_overlapping_intervals():
    units = [
        {"started_at": 0, "finished_at": 2},
        {"started_at": 1, "finished_at": 3},
        {"started_at": 3, "finished_at": 4},
    ]
    assert peak_concurrency(units) == 2  # a finish and a start at the same instant do not overlap
    assert peak_concurrency([{"mode": "ordered"}]) == 0


def test_concurrency_limit_rules():
    assert concurrency_limit("local", 3, use_gpu=False, gpu_count=0) == 3
    assert concurrency_limit("local", 3, use_gpu=True, gpu_count=2) == 2  # one probe per GPU
    assert concurrency_limit("ray", 3, use_gpu=True, gpu_count=1) == 3  # Ray's num_gpus=1 places them
    assert concurrency_limit("inline", 4, use_gpu=False, gpu_count=0) == 1  # threads share one RSS


def test_max_concurrent_gpu_probes_bounds_the_workers_running_at_once(fake_cuda_ops, small_corpus, tmp_path):
    peaks = []
    for run in range(3):
        said: list[str] = []
        report = run_preflight(
            _independent_targets(3, init_s=0.5),
            PreflightSettings(dataset_path=small_corpus, warmup=0, steady=1, max_concurrent_gpu_probes=2),
            str(tmp_path / f"job{run}"),
            executor="local",
            force_cpu=True,  # no device detection (it would import torch to look for CUDA)
            say=said.append,
        )
        units = report["units"]
        assert [u["mode"] for u in units] == ["parallel"] * 3
        assert len({u["worker"]["pid"] for u in units}) == 3  # a fresh process per probe
        observed = peak_concurrency(units)
        assert observed == report["timings"]["peak_concurrent_probes"]
        assert observed <= 2, f"run {run}: {observed} probes ran at once with max_concurrent_gpu_probes=2"
        assert any("3 unit(s), at most 2 at once (max_concurrent_gpu_probes=2" in s for s in said)
        peaks.append(observed)
    assert max(peaks) == 2, f"no run had two probes at once (peaks {peaks}): the probes did not run in parallel"


def test_on_a_gpu_each_probe_holds_its_own_device(fake_cuda_ops, small_corpus, tmp_path, monkeypatch):
    # The seam: run_units is told the device has 2 GPUs (this machine has none), so it pins each probe
    # subprocess to one of them through CUDA_VISIBLE_DEVICES; the ops and the memory probe still run
    # on the CPU path.
    real_run_units = preflight_mod.run_units
    monkeypatch.setattr(
        preflight_mod, "run_units", lambda specs, **kw: real_run_units(specs, **{**kw, "use_gpu": True, "gpu_count": 2})
    )
    cpu = {"kind": "cpu", "gpu_model": None, "gpu_count": 0, "gpu_total_bytes": None, "cpu_count": 2}
    monkeypatch.setattr(preflight_mod, "detect_device", lambda *a, **kw: dict(cpu))  # no torch import
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    report = run_preflight(
        _independent_targets(3, init_s=0.5),
        PreflightSettings(dataset_path=small_corpus, warmup=0, steady=1, max_concurrent_gpu_probes=3),
        str(tmp_path / "job"),
        executor="local",
    )
    units = report["units"]
    assert {u["worker"]["cuda_visible_devices"] for u in units} <= {"0", "1"}
    assert peak_concurrency(units) <= 2  # 3 allowed, 2 GPUs: one probe per GPU
    for a, b in _overlapping(units):
        assert a["worker"]["cuda_visible_devices"] != b["worker"]["cuda_visible_devices"], (a, b)
