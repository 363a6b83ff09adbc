"""GPU preflight orchestration (Airflow-free): targets -> sample -> probes -> report.

``run_preflight`` is what the ``gpu_preflight`` task and ``scripts/gpu_check.sh``
both call.  It decides which ops to probe (single-GPU CUDA Mapper/Filters),
reuses cached figures when nothing that affects them changed, reads one
sample sized by the largest ``batch_size``, plans probe units from field
contracts, runs them (Ray, subprocess or inline), applies the num_gpus
rule and writes ``{job}/gpu_probe_results.json``.  Any failure — empty
input, an op error, OOM, no valid memory peak, a timeout — raises
``PreflightError`` naming the op(s), before any partition starts.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import asdict, dataclass
from typing import Callable

from airflow_provider_dj import settings as dj_settings
from airflow_provider_dj.core.errors import DJError
from airflow_provider_dj.engine.gpu.report import (
    DEFAULT_GPU_WORKERS_PER_DEVICE,
    cache_key,
    cache_key_fields,
    find_cached,
    load_probe_report,
    new_report,
    reusable,
    schedule_num_gpus,
    write_probe_report,
)
from airflow_provider_dj.engine.preflight.contracts import OpNode, contract_of, plan_probe_units
from airflow_provider_dj.engine.preflight.executors import get_ray, resolve_executor, run_units
from airflow_provider_dj.engine.preflight.sampling import read_sample

log = logging.getLogger(__name__)


class PreflightError(DJError, RuntimeError):
    """The GPU preflight failed; the message names every failing op and what to do."""


@dataclass
class OpEntry:
    index: int
    name: str
    args: dict
    cls: type
    text_key: str = "text"


@dataclass
class PreflightSettings:
    dataset_path: str
    skip_op_error: bool = True
    warmup: int = 1
    steady: int = 3
    offset: int = 0
    shuffle: bool = False
    seed: int | None = 42
    max_gpu_workers_per_device: int = DEFAULT_GPU_WORKERS_PER_DEVICE
    max_concurrent_gpu_probes: int = 1
    timeout_s: float | None = None

    @classmethod
    def from_recipe(cls, recipe) -> "PreflightSettings":
        x = recipe.partition.extra
        conc = x.get("max_concurrent_gpu_probes", 1)
        return cls(
            dataset_path=recipe.dataset_path,
            skip_op_error=recipe.skip_op_error,
            warmup=x.get("gpu_probe_warmup_batches", 1),
            steady=x.get("gpu_probe_steady_batches", 3),
            offset=x.get("gpu_probe_sample_offset", 0),
            shuffle=x.get("gpu_probe_sample_shuffle", False),
            seed=x.get("gpu_probe_sample_seed", 42),
            max_gpu_workers_per_device=x.get("max_gpu_workers_per_device", DEFAULT_GPU_WORKERS_PER_DEVICE),
            max_concurrent_gpu_probes=1 if conc in (None, "auto") else int(conc),  # auto = one at a time
            timeout_s=x.get("gpu_probe_timeout_seconds"),
        )


def op_entries_from_recipe(recipe) -> list[OpEntry]:
    from airflow_provider_dj.ops.registry import get_op_class

    return [OpEntry(s.index, s.name, dict(s.args or {}), get_op_class(s.name), recipe.text_key) for s in recipe.process]


def cuda_ops(ops: list[OpEntry]) -> list[OpEntry]:
    return [o for o in ops if o.cls.uses_cuda]


def split_targets(ops: list[OpEntry]) -> tuple[list[OpEntry], list[dict]]:
    """(ops to probe, [{op_index, op_name, reason}] for CUDA ops the preflight does not probe)."""
    targets, skipped = [], []
    for o in cuda_ops(ops):
        explicit = declared_num_gpus(o)
        if o.cls.is_global or o.cls.kind not in ("mapper", "filter"):
            skipped.append({"op_index": o.index, "op_name": o.name, "reason": "dataset-level op: not probed per batch"})
        elif explicit is not None and explicit > 1:
            skipped.append(
                {
                    "op_index": o.index,
                    "op_name": o.name,
                    "reason": f"multi-GPU op (num_gpus={explicit}): only single-GPU ops are probed",
                }
            )
        else:
            targets.append(o)
    return targets, skipped


def declared_num_gpus(o: OpEntry) -> float | None:
    """An explicit GPU share: the recipe's ``num_gpus``, else the op class's declared ``gpu_num_gpus``."""
    value = o.args.get("num_gpus")
    if value is None:
        value = o.cls.gpu_num_gpus
    return None if value is None else float(value)


def batch_size_of(o: OpEntry) -> int:
    size = o.args.get("batch_size")
    if not isinstance(size, int) or size < 1:
        size = o.cls.default_batch_size
    return int(size)


def detect_device(executor: str, *, force_cpu: bool = False, ray_client=None) -> dict:
    """{"kind", "gpu_model", "gpu_count", "gpu_total_bytes", "cpu_count"} of where probes will run."""
    cpu = {"kind": "cpu", "gpu_model": None, "gpu_count": 0, "gpu_total_bytes": None, "cpu_count": os.cpu_count()}
    if force_cpu:
        return {**cpu, "forced_cpu": True}
    if executor == "ray":
        ray = get_ray(ray_client)
        res = ray.cluster_resources()
        cpu["cpu_count"] = int(res.get("CPU", 0)) or cpu["cpu_count"]
        gpus = int(res.get("GPU", 0))
        if not gpus:
            return cpu
        info = ray.get(ray.remote(num_gpus=1, num_cpus=0, max_retries=0)(_device_info_task).remote(), timeout=300)
        return {**info, "gpu_count": gpus, "cpu_count": cpu["cpu_count"]}
    try:
        info = _device_info_task()
    except Exception as exc:  # noqa: BLE001 - no NVML / torch: the CPU path
        log.info("no CUDA device detected (%s): probing on the CPU", exc)
        return cpu
    return {**info, "cpu_count": cpu["cpu_count"]} if info.get("gpu_count") else cpu


def _device_info_task() -> dict:
    from airflow_provider_dj.engine.preflight.memory import CudaMemoryProbe

    try:
        import pynvml

        pynvml.nvmlInit()
        if pynvml.nvmlDeviceGetCount() == 0:
            return {"kind": "cpu", "gpu_count": 0}
    except ImportError:
        import torch

        if not torch.cuda.is_available():
            return {"kind": "cpu", "gpu_count": 0}
    info = CudaMemoryProbe().device_info()
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and visible.strip():
        info["gpu_count"] = len([v for v in visible.split(",") if v.strip()])
    return info


def run_preflight(
    ops: list[OpEntry],
    settings: PreflightSettings,
    job_dir: str,
    *,
    executor: str = "auto",
    force_cpu: bool | None = None,
    heartbeat_s: float = 30.0,
    ray_client=None,
    say: Callable[[str], None] | None = None,
    warn: Callable[[str], None] | None = None,
) -> dict | None:
    """Probe, write the report and return it; None when no op needs probing."""
    say = say or log.info
    warn = warn or log.warning
    t_total = time.perf_counter()
    targets, skipped = split_targets(ops)
    if not targets:
        return None
    executor = resolve_executor(executor)
    if force_cpu is None:
        force_cpu = dj_settings.get("probe_force_cpu")
    device = detect_device(executor, force_cpu=force_cpu, ray_client=ray_client)
    _say_device(say, device, executor, targets)
    by_index = {o.index: o for o in ops}
    units = probe_plan(ops, settings.max_concurrent_gpu_probes)
    batch_sizes = {str(o.index): batch_size_of(o) for o in targets}
    n_rows = max(batch_sizes.values())
    previous = load_probe_report(job_dir)
    report = new_report(
        device=device, settings={**asdict(settings), "probe_executor": executor}, sample=None, executor=executor
    )
    report["not_probed"] = skipped
    report["units"] = [u.to_dict() for u in units]
    keys = _cache_keys(units, by_index, device, settings, _sampling_fields(settings, n_rows))
    cached = {t: find_cached(previous, k) for t, (k, f, _) in keys.items() if reusable(f)}
    cached = {t: e for t, e in cached.items() if e is not None}
    to_run = [u for u in units if any(t not in cached for t in u.targets)]
    results: dict[int, dict] = {}
    errors: list[dict] = []
    if to_run:
        sample = _read_probe_sample(settings, n_rows, report, say, warn)
        specs = _probe_specs(to_run, sample.table, batch_sizes, by_index, job_dir, settings, device)
        outs = run_units(
            specs,
            executor=executor,
            use_gpu=device["kind"] == "cuda",
            max_concurrent=settings.max_concurrent_gpu_probes,
            gpu_count=int(device.get("gpu_count") or 0),
            timeout_s=settings.timeout_s,
            heartbeat_s=heartbeat_s,
            ray_client=ray_client,
            say=say,
        )
        results, errors = _collect_unit_outputs(outs, report, device, warn)
        _record_unit_runs(report, specs, outs)
    elif previous:
        report["sample"] = previous.get("sample")
    for t in sorted(keys):
        entry = _op_entry(t, keys[t], by_index[t], results, cached, previous, settings, device, report, warn)
        if entry is not None:
            report["ops"].append(entry)
    report["timings"] = {
        "total_s": round(time.perf_counter() - t_total, 6),
        "sample_read_s": (report.get("sample") or {}).get("read_s"),
        "peak_concurrent_probes": peak_concurrency(report["units"]),
    }
    _write_final_report(job_dir, report, errors)
    return report


def probe_plan(ops: list[OpEntry], max_concurrent_gpu_probes: int = 1) -> list:
    """The probe units the preflight would run for ``ops`` (``contracts.ProbeUnit``: parallel units,
    then at most one ordered replay), from class attributes and recipe args alone: nothing is read,
    built or imported (a Data-Juicer op through the adapter included)."""
    targets, _skipped = split_targets(ops)
    return plan_probe_units(_op_nodes(ops), [o.index for o in targets], max_concurrent_gpu_probes)


def _say_device(say: Callable[[str], None], device: dict, executor: str, targets: list[OpEntry]) -> None:
    """Tell the user the probe's device, executor and the ops it probes (one line)."""
    say(
        f"GPU preflight: device {device['kind']}"
        + (
            f" ({device['gpu_count']} x {device['gpu_model']}, {device['gpu_total_bytes'] / 2**30:.1f} GiB)"
            if device["kind"] == "cuda"
            else " (no CUDA device: CPU path, memory from process RSS)"
        )
        + f", executor {executor}, {len(targets)} op(s) to probe: {', '.join(o.name for o in targets)}"
    )


def _op_nodes(ops: list[OpEntry]) -> list[OpNode]:
    """Every op of the recipe as the probe planner sees it (kind, CUDA use, column contract).

    Only class attributes and recipe args are read: an op run through the Data-Juicer adapter is
    planned from its catalogued class, so planning never imports Data-Juicer.  An ``index_key``
    makes an op dataset-level here, as in Data-Juicer's preflight."""
    nodes = []
    for o in ops:
        ins, outs = contract_of(o.cls, o.args)
        nodes.append(
            OpNode(
                o.index,
                o.name,
                o.cls.kind,
                bool(o.cls.uses_cuda),
                bool(o.cls.is_global) or o.args.get("index_key") is not None,
                ins,
                outs,
                o.cls.runtime_env,
            )
        )
    return nodes


def _sampling_fields(settings: PreflightSettings, n_rows: int) -> dict:
    """What of the sampling settings a cached measurement depends on (offset and seed only where used)."""
    return {
        "dataset_path": settings.dataset_path,
        "rows": n_rows,
        "offset": 0 if settings.shuffle else settings.offset,
        "shuffle": settings.shuffle,
        "seed": settings.seed if settings.shuffle else None,
    }


def _cache_keys(
    units: list, by_index: dict[int, OpEntry], device: dict, settings: PreflightSettings, sampling: dict
) -> dict[int, tuple[str, dict, str]]:
    """Per probed op index: (cache key, the fields it hashes, the unit's probe mode)."""
    keys: dict[int, tuple[str, dict, str]] = {}
    for u in units:
        for t in u.targets:
            replayed = [{"index": i, "name": by_index[i].name, "args": by_index[i].args} for i in u.replay if i < t]
            fields = cache_key_fields(
                op={"index": t, "name": by_index[t].name, "args": by_index[t].args, "text_key": by_index[t].text_key},
                replayed=replayed,
                device=device,
                warmup=settings.warmup,
                steady=settings.steady,
                max_gpu_workers_per_device=settings.max_gpu_workers_per_device,
                sampling=sampling,
                skip_op_error=settings.skip_op_error,
            )
            keys[t] = (cache_key(fields), fields, u.mode)
    return keys


def _read_probe_sample(
    settings: PreflightSettings, n_rows: int, report: dict, say: Callable[[str], None], warn: Callable[[str], None]
):
    """Read the probe sample; record its origin, read time and warnings in ``report`` and return it."""
    t0 = time.perf_counter()
    sample = read_sample(
        settings.dataset_path, n_rows, offset=settings.offset, shuffle=settings.shuffle, seed=settings.seed
    )
    sample_s = time.perf_counter() - t0
    for w in sample.warnings:
        warn(w)
    report["warnings"].extend(sample.warnings)
    report["sample"] = {**sample.origin, "read_s": round(sample_s, 6)}
    say(f"probe sample: {sample.table.num_rows} rows ({sample.origin['mode']}) in {sample_s:.2f}s")
    return sample


def _probe_specs(
    to_run: list,
    sample_table,
    batch_sizes: dict[str, int],
    by_index: dict[int, OpEntry],
    job_dir: str,
    settings: PreflightSettings,
    device: dict,
) -> list[dict]:
    """One spec per unit to run: what a probe worker needs (the sample, the ops it replays, the settings)."""
    return [
        {
            "unit": u.to_dict(),
            "sample": sample_table,
            "batch_sizes": batch_sizes,
            "job_dir": job_dir,
            "warmup": settings.warmup,
            "steady": settings.steady,
            "skip_op_error": settings.skip_op_error,
            "memory": "cuda" if device["kind"] == "cuda" else "cpu",
            "hide_gpus": bool(device.get("forced_cpu")),
            "ops": {
                str(i): {
                    "name": by_index[i].name,
                    "args": by_index[i].args,
                    "cls": by_index[i].cls,
                    "text_key": by_index[i].text_key,
                    "kind": by_index[i].cls.kind,
                }
                for i in u.replay
            },
        }
        for u in to_run
    ]


def _collect_unit_outputs(
    outs: list[dict], report: dict, device: dict, warn: Callable[[str], None]
) -> tuple[dict[int, dict], list[dict]]:
    """Gather the units' results (by op index, each naming its worker) and errors.

    Their warnings go to ``warn`` and the report; a CUDA device's model and memory, when the driver
    side did not know them, are taken from the first worker that reports them."""
    results: dict[int, dict] = {}
    errors: list[dict] = []
    for out in outs:
        for w in out.get("warnings", []):
            warn(w)
        report["warnings"].extend(out.get("warnings", []))
        if out.get("error"):
            errors.append(out["error"])
        if out.get("device") and device["kind"] == "cuda" and not device.get("gpu_model"):
            device.update({k: v for k, v in out["device"].items() if k in ("gpu_model", "gpu_total_bytes")})
        for r in out.get("results", []):
            r["worker"] = out.get("worker")
            results[r["op_index"]] = r
    return results, errors


def _record_unit_runs(report: dict, specs: list[dict], outs: list[dict]) -> None:
    """Add to each unit of the report that ran: its worker, when that worker was busy (its own clock)
    and every op it built, in order (``ran``: the replayed ancestors and the probed targets)."""
    by_targets = {tuple(u["targets"]): u for u in report["units"]}
    for spec, out in zip(specs, outs):
        unit = by_targets.get(tuple(spec["unit"]["targets"]))
        if unit is None:  # pragma: no cover - every spec comes from a unit
            continue
        unit.update(
            worker=out.get("worker"),
            started_at=out.get("started_at"),
            finished_at=out.get("finished_at"),
            unit_s=out.get("unit_s"),
            ran=out.get("ran", []),
        )


def peak_concurrency(units: list[dict]) -> int:
    """The most probe units whose workers were busy at one moment, from their own start/finish times
    (0 when none ran).  A finish and a start at the same instant do not overlap."""
    edges = []
    for u in units:
        if u.get("started_at") is not None and u.get("finished_at") is not None:
            edges += [(u["started_at"], 1), (u["finished_at"], -1)]
    peak = now = 0
    for _t, step in sorted(edges, key=lambda e: (e[0], e[1])):
        now += step
        peak = max(peak, now)
    return peak


def _op_entry(
    t: int,
    key_entry: tuple[str, dict, str],
    o: OpEntry,
    results: dict[int, dict],
    cached: dict[int, dict],
    previous: dict | None,
    settings: PreflightSettings,
    device: dict,
    report: dict,
    warn: Callable[[str], None],
) -> dict | None:
    """The report's entry for probed op ``t``, measured now or reused from the cache, with its
    scheduling (GPUs, CPUs); None when its probe failed (it is listed in the errors).

    A scheduling warning goes to ``warn``, the entry and the report."""
    key, fields, mode = key_entry
    if t in results:
        entry = dict(results[t])
        entry["reused"] = False
    elif t in cached:
        entry = {k: v for k, v in cached[t].items() if k not in ("num_gpus", "warnings")}
        entry["reused"] = True
        entry["reused_from"] = previous.get("created_at") if previous else None
    else:
        return None  # failed: listed in errors
    explicit_gpus = declared_num_gpus(o)
    num_gpus, raise_warning = schedule_num_gpus(
        entry.get("memory_fraction"), explicit_gpus, settings.max_gpu_workers_per_device, device["kind"]
    )
    entry["warnings"] = []
    if raise_warning:
        warn(f"{o.name} (process[{t}]): {raise_warning}")
        entry["warnings"].append(raise_warning)
        report["warnings"].append(f"{o.name} (process[{t}]): {raise_warning}")
    explicit_cpus = o.args.get("num_cpus")
    entry.update(
        num_gpus=num_gpus,
        num_gpus_explicit=explicit_gpus,
        num_cpus=float(explicit_cpus) if explicit_cpus else 1.0,
        memory_explicit=o.args.get("memory"),
        probe_mode=mode,
        cache_key=key,
        cache_key_fields=fields,
        cache_reusable=reusable(fields),
        sample_origin={k: (report.get("sample") or {}).get(k) for k in ("mode", "offset", "seed", "rows")},
    )
    entry.setdefault("replayed", [])
    return entry


def _write_final_report(job_dir: str, report: dict, errors: list[dict]) -> None:
    """Write the report with its status; raise PreflightError listing every failed probe when any failed."""
    if errors:
        report["status"] = "failed"
        report["errors"] = errors
        write_probe_report(job_dir, report)
        lines = [f"  - {e.get('op_name') or 'probe'} [{e.get('kind')}]: {e.get('message')}" for e in errors]
        raise PreflightError(
            "GPU preflight failed before any partition started:\n"
            + "\n".join(lines)
            + f"\nDetails in {job_dir}/gpu_probe_results.json"
        )
    report["status"] = "ok"
    write_probe_report(job_dir, report)
