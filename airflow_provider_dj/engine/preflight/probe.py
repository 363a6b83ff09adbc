"""The probe worker: replay a few ops on the sample and measure the GPU targets.

``run_probe_unit(spec)`` is one plain function taking and returning plain
data (plus an Arrow table), so the same code runs as a Ray task holding one
GPU, in a spawned subprocess (machines without Ray), or inline.  It imports
neither Airflow nor Ray, and the op classes travel inside ``spec`` so the
worker never has to import the whole op library (whose optional packages a
GPU box may lack).

Per target the sequence is: start the memory probe, build the op (model
init), run ``warmup`` batches, then ``steady`` timed batches, stop the
memory probe.  Every batch goes through ``engine.execution.op_runner.apply_op`` with
the recipe's ``skip_op_error``, exactly as the real run applies it.
"""

from __future__ import annotations

import gc
import os
import socket
import time
import traceback

import pyarrow as pa

from airflow_provider_dj.core.errors import DJError
from airflow_provider_dj.engine.execution.op_runner import apply_op
from airflow_provider_dj.ops.base import Deduplicator, Mapper

#: Zero-argument methods an op may define to load its model eagerly (first found is called).
MODEL_LOAD_HOOKS = ("load_model", "model")


class ProbeFailure(DJError, RuntimeError):
    """One probe failed; ``op_name``/``op_index`` name the op, ``kind`` says how (error, oom, empty, timeout)."""

    def __init__(self, op_index: int | None, op_name: str | None, kind: str, message: str) -> None:
        super().__init__(message)
        self.op_index, self.op_name, self.kind, self.message = op_index, op_name, kind, message

    def __reduce__(self):
        return (type(self), (self.op_index, self.op_name, self.kind, self.message))

    def to_dict(self) -> dict:
        return {"op_index": self.op_index, "op_name": self.op_name, "kind": self.kind, "message": self.message}


def cycle_to(table: pa.Table, n: int) -> pa.Table:
    """Exactly ``n`` rows: the first ``n``, or the rows repeated when fewer survive upstream filters."""
    if table.num_rows >= n:
        return table.slice(0, n)
    reps = -(-n // table.num_rows)
    return pa.concat_tables([table] * reps).slice(0, n).combine_chunks()


def make_memory_probe(kind: str, device_index: int = 0):
    from airflow_provider_dj.engine.preflight.memory import CpuRssMemoryProbe, CudaMemoryProbe

    return CudaMemoryProbe(device_index=device_index) if kind == "cuda" else CpuRssMemoryProbe()


def _build(info: dict):
    kwargs = dict(info.get("args") or {})
    kwargs.pop("input_columns", None)  # contracts are read by the planner, not by the op
    kwargs.pop("output_columns", None)
    kwargs.setdefault("text_key", info.get("text_key", "text"))
    return info["cls"](**kwargs)


def _replay_global(op: Deduplicator, table: pa.Table) -> pa.Table:
    """Dataset-level ops on a sample: exact keys keep first occurrences; other forms pass through."""
    keys = op.compute_hash(table)
    if isinstance(keys, pa.Table):
        return table
    seen: set = set()
    mask = []
    for k in keys.to_pylist():
        mask.append(k not in seen)
        seen.add(k)
    return table.filter(pa.array(mask))


def _is_oom(exc: BaseException) -> bool:
    return type(exc).__name__ == "OutOfMemoryError" or "out of memory" in str(exc).lower()


def _probe_target(
    idx: int, info: dict, table: pa.Table, raw: pa.Table, spec: dict, mem, warnings: list[str]
) -> tuple[dict, pa.Table]:
    """Measure one op on a batch of the sample: model load, warmup and steady batches, and the memory
    ``mem`` saw; return (its result entry, the table the next op is probed on).  Raises ProbeFailure
    when a mapper returns an empty batch; what the result should be read with goes to ``warnings``."""
    name = info["name"]
    batch_size = int(spec["batch_sizes"][str(idx)])
    batch = _probe_batch(idx, name, table, raw, batch_size, warnings)
    t_all = time.perf_counter()
    mem.start()
    t0 = time.perf_counter()
    op = _loaded_op(idx, info, spec)
    init_s = time.perf_counter() - t0
    warm, steady, outcome = _timed_batches(op, idx, name, batch, spec)
    measured = mem.finish()
    del op
    gc.collect()
    mem.release()
    assert outcome is not None
    rows_out = outcome.table.num_rows
    if rows_out == 0:
        warnings.append(
            f"{name} (process[{idx}]) filtered out every row of the probe batch; its throughput is "
            f"a worst case and later ops are probed on its input"
        )
    steady_total = sum(steady)
    rows_per_s = (batch.num_rows * len(steady) / steady_total) if steady_total > 0 else None
    result = {
        "op_index": idx,
        "op_name": name,
        "kind": info.get("kind"),
        "batch_size": batch_size,
        "rows_in": batch.num_rows,
        "rows_out": rows_out,
        "failed_rows": outcome.accounting.get("failed", 0),
        "model_init_s": round(init_s, 6),
        "warmup_s": round(sum(warm), 6),
        "warmup_batch_s": [round(x, 6) for x in warm],
        "steady_batch_s": [round(x, 6) for x in steady],
        "rows_per_s": round(rows_per_s, 3) if rows_per_s else None,
        "output_ratio": round(rows_out / batch.num_rows, 6),
        "peak_memory_bytes": measured["peak_bytes"],
        "memory_fraction": measured["memory_fraction"],
        "memory_source": measured["memory_source"],
        "memory_detail": measured,
        "stage_timings": {
            "model_init_s": round(init_s, 6),
            "warmup_s": round(sum(warm), 6),
            "steady_s": round(steady_total, 6),
            "total_s": round(time.perf_counter() - t_all, 6),
        },
    }
    return result, (outcome.table if rows_out else batch)


def _probe_batch(idx: int, name: str, table: pa.Table, raw: pa.Table, batch_size: int, warnings: list[str]) -> pa.Table:
    """The batch an op is probed on: the rows its upstream ops left (the raw sample when none), cycled
    to ``batch_size`` rows; each fallback is said in ``warnings``."""
    source = table
    if table.num_rows == 0:
        warnings.append(
            f"{name} (process[{idx}]): upstream filters left no rows of the sample; probing on the "
            f"raw sample instead, so its throughput is a worst case"
        )
        source = raw
    elif table.num_rows < batch_size:
        warnings.append(
            f"{name} (process[{idx}]): {table.num_rows} rows survive upstream ops; cycling them to "
            f"fill a batch of {batch_size}"
        )
    return cycle_to(source, batch_size)


def _loaded_op(idx: int, info: dict, spec: dict):
    """The op built and bound to the job, with its model loaded now where the op loads it lazily."""
    op = _build(info)
    op.bind_run_context(job_dir=spec.get("job_dir") or "", op_index=idx, partition_id=-1)
    # Ops that load their model lazily (on the first batch) expose the loader; calling it here
    # puts the load in model_init_s rather than in the warmup.
    for hook in MODEL_LOAD_HOOKS:
        loader = getattr(op, hook, None)
        if callable(loader):
            loader()
            break
    return op


def _timed_batches(op, idx: int, name: str, batch: pa.Table, spec: dict) -> tuple[list[float], list[float], object]:
    """Apply the op to ``batch`` for the warmup then the steady count; return (warmup seconds, steady
    seconds, the last outcome).  Raises ProbeFailure when a mapper returns an empty batch."""
    skip = bool(spec["skip_op_error"])
    warm: list[float] = []
    steady: list[float] = []
    outcome = None
    for _phase, count, sink in (("warmup", int(spec["warmup"]), warm), ("steady", int(spec["steady"]), steady)):
        for _ in range(count):
            t = time.perf_counter()
            outcome = apply_op(op, idx, batch, skip)
            sink.append(time.perf_counter() - t)
            if isinstance(op, Mapper) and outcome.table.num_rows == 0:
                reasons = "; ".join(dict.fromkeys(outcome.failed_reasons))[:500]
                raise ProbeFailure(
                    idx,
                    name,
                    "empty",
                    f"{name} (process[{idx}]) returned an empty batch for "
                    f"{batch.num_rows} input rows in the probe{': ' + reasons if reasons else ''}; "
                    f"fix the op or its arguments before running the job",
                )
    return warm, steady, outcome


def run_probe_unit(spec: dict) -> dict:
    """Run one probe unit; never raises for an op failure (it is returned, naming the op).

    ``started_at``/``finished_at`` (epoch seconds, read in the worker) say when the worker itself was
    busy, so the report can show how many probes really ran at once."""
    started_at = time.time()
    t_unit = time.perf_counter()
    if spec.get("hide_gpus"):  # forced CPU path on a GPU machine: ops with device "auto" must pick the CPU
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
    unit = spec["unit"]
    targets = set(unit["targets"])
    raw: pa.Table = spec["sample"]
    table = raw
    warnings: list[str] = []
    results: list[dict] = []
    replayed: list[dict] = []
    device: dict = {}
    replay_s = 0.0
    current: tuple[int, str] | None = None
    try:
        mem = make_memory_probe(spec["memory"], int(spec.get("device_index", 0)))
        device = mem.device_info()
        for idx in unit["replay"]:
            info = spec["ops"][str(idx)]
            current = (idx, info["name"])
            if idx in targets:
                res, table = _probe_target(idx, info, table, raw, spec, mem, warnings)
                res["replay_s"] = round(replay_s, 6)
                res["stage_timings"]["replay_s"] = round(replay_s, 6)
                res["replayed"] = list(replayed)
                results.append(res)
                replayed.append({"op_index": idx, "op_name": info["name"], "probed": True})
                continue
            t = time.perf_counter()
            op = _build(info)
            if isinstance(op, Deduplicator):
                table = _replay_global(op, table)
            elif table.num_rows:
                table = apply_op(op, idx, table, bool(spec["skip_op_error"])).table
            replay_s += time.perf_counter() - t
            replayed.append({"op_index": idx, "op_name": info["name"], "probed": False})
        error = None
    except ProbeFailure as exc:
        error = exc.to_dict()
    except Exception as exc:  # noqa: BLE001 - reported naming the op
        idx, name = current if current else (None, None)
        kind = "oom" if _is_oom(exc) else ("no_valid_peak" if type(exc).__name__ == "NoValidPeakError" else "error")
        where = f"{name} (process[{idx}])" if name else "the probe worker"
        error = {
            "op_index": idx,
            "op_name": name,
            "kind": kind,
            "message": f"{where} failed in the GPU probe: {type(exc).__name__}: {exc}",
            "traceback": traceback.format_exc(limit=8),
        }
    return {
        "targets": sorted(targets),
        "results": results,
        "error": error,
        "warnings": warnings,
        "device": device,
        "ran": replayed,  # every op this worker built, in order: replayed ancestors and probed targets
        "worker": {
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        },
        "unit_s": round(time.perf_counter() - t_unit, 6),
        "started_at": started_at,
        "finished_at": time.time(),
    }
