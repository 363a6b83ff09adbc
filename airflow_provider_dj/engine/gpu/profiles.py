"""Probe report -> planner inputs (``StageProfile`` list and ``ClusterResources``).

The planner works on its own small dataclasses so it never depends on how
the probe measures; this module is the one place that knows the report's
field names (``{job}/gpu_probe_results.json``: a ``device`` block and an
``ops`` list, written by ``engine.gpu.report``).

On the CPU probe path (``device.kind == "cpu"``) throughput and output
ratio are real but there is no device memory to plan: stages become CPU
actors (num_gpus 0, memory unmeasured) bounded by CPUs, so the planner
still uses the measured figures.
"""

from __future__ import annotations

import json
from typing import Any

from airflow_provider_dj.core.errors import DJError
from airflow_provider_dj.engine.gpu.planner import ClusterResources, StageProfile
from airflow_provider_dj.engine.jobdir.layout import GPU_PROBE_REPORT

REPORT_FILE = GPU_PROBE_REPORT


class ReportFormatError(DJError, ValueError):
    """The probe report lacks a field the planner needs."""


def load_report(job_dir: str) -> dict | None:
    """The job's probe report, or None.  Prefers the report module's loader (cache rules live there)."""
    try:
        from airflow_provider_dj.engine.gpu.report import load_probe_report
    except ImportError:
        load_probe_report = None
    if load_probe_report is not None:
        return load_probe_report(job_dir)
    from airflow_provider_dj.core import fs as storage

    path = storage.join(job_dir, REPORT_FILE)
    if not storage.exists(path):
        return None
    return json.loads(storage.read_bytes(path))


def _num(op: dict, key: str, where: str, default: Any = ...) -> Any:
    value = op.get(key, default)
    if value is ...:
        raise ReportFormatError(f"{REPORT_FILE}: {where} has no {key!r}; re-run the GPU preflight")
    return value


def startup_seconds(op: dict) -> float:
    """What one actor pays before steady throughput: model init plus the warmup batches' excess.

    Ops that load their model lazily on the first batch (text_embedding_mapper
    does) report a near-zero ``model_init_s`` and a slow warmup batch; the
    warmup's time beyond a steady batch is start-up too, so it is counted.
    """
    init = float(op.get("model_init_s") or 0.0)
    steady = sorted(float(x) for x in op.get("steady_batch_s") or [])
    warm = [float(x) for x in op.get("warmup_batch_s") or ([op["warmup_s"]] if op.get("warmup_s") else [])]
    if not steady or not warm:
        return init
    typical = steady[len(steady) // 2]
    return init + max(0.0, sum(warm) - len(warm) * typical)


def stages_from_report(report: dict) -> list[StageProfile]:
    """One StageProfile per probed op, in process order, with input shares from upstream output ratios."""
    ops = report.get("ops")
    if not isinstance(ops, list) or not ops:
        raise ReportFormatError(f"{REPORT_FILE}: no 'ops' list; re-run the GPU preflight")
    cpu_path = (report.get("device") or {}).get("kind") != "cuda"
    stages = []
    share = 1.0
    for op in sorted(ops, key=lambda o: o.get("op_index", 0)):
        where = f"ops[op_index={op.get('op_index')}, {op.get('op_name')}]"
        rate = op.get("rows_per_s")
        if not isinstance(rate, (int, float)) or isinstance(rate, bool) or not rate > 0:
            raise ReportFormatError(
                f"{REPORT_FILE}: {where} has no measured rows_per_s ({rate!r}); the probe did "
                f"not finish: re-run the GPU preflight"
            )
        num_gpus = 0.0 if cpu_path else float(_num(op, "num_gpus", where))
        num_cpus = float(op.get("num_cpus") or (1.0 if num_gpus == 0 else 0.0))
        mem = None if cpu_path else op.get("memory_fraction")
        ratio = float(op.get("output_ratio", 1.0) or 0.0)
        stages.append(
            StageProfile(
                op_index=int(_num(op, "op_index", where)),
                op_name=str(_num(op, "op_name", where)),
                rows_per_s=float(_num(op, "rows_per_s", where)),
                num_gpus=num_gpus,
                num_cpus=num_cpus,
                memory_fraction=None if mem is None else float(mem),
                model_init_s=startup_seconds(op),
                batch_size=int(op.get("batch_size") or 1),
                output_ratio=ratio,
                input_share=share,
            )
        )
        share *= ratio
    return stages


def cluster_from_report(
    report: dict, *, max_gpu_workers_per_device: int = 5, reserved_cpus: float = 0.0
) -> ClusterResources:
    dev = report.get("device")
    if not isinstance(dev, dict) or not dev.get("cpu_count"):
        raise ReportFormatError(f"{REPORT_FILE}: no 'device' block with cpu_count; re-run the GPU preflight")
    cuda = dev.get("kind") == "cuda"
    return ClusterResources(
        cpus=float(dev["cpu_count"]),
        gpus=int(dev.get("gpu_count") or 0) if cuda else 0,
        device_memory_bytes=dev.get("gpu_total_bytes") if cuda else None,
        max_gpu_workers_per_device=max_gpu_workers_per_device,
        reserved_cpus=reserved_cpus,
    )
