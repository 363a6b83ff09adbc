"""What the job view shows, as plain data, read from the job directory alone.

Why one module apart from the routes and the HTML: the page, its JSON
endpoints and the tests all read the same dicts, and nothing here knows
about HTTP or Airflow's auth.  It reuses the monitor's read side
(``monitor.progress.job_progress``: the summary builder plus events) and
the sensor's failure rule (``engine.job.watch.failures``), so the grid
marks failed exactly the partitions ``CheckpointSensor`` names in its
failure message, and states match ``dj-airflow monitor``.

Everything is read-only: no function here writes to the job directory.
"""

from __future__ import annotations

import json
import time

from airflow_provider_dj.client.monitor.progress import job_progress
from airflow_provider_dj.core import fs as storage
from airflow_provider_dj.core import gc_pause
from airflow_provider_dj.engine.job.watch import failures
from airflow_provider_dj.engine.jobdir import event_cache, ray_jobs
from airflow_provider_dj.engine.jobdir.layout import (
    EXECUTION_PLAN,
    GPU_PROBE_REPORT,
    TRACE_DIR,
    TRACE_REPORT,
    loads_json,
)
from airflow_provider_dj.engine.jobdir.progress_log import partition_log_path, tail_lines
from airflow_provider_dj.engine.observe.tracer import trace_file_name
from airflow_provider_dj.engine.observe.why import failed_sample_files
from airflow_provider_dj.engine.storage import marker_cache
from airflow_provider_dj.engine.storage.context import JobContext
from airflow_provider_dj.ops.columns import (
    FAILED_ERROR_COLUMN,
    FAILED_ERROR_TYPE_COLUMN,
    FAILED_PARTITION_COLUMN,
    INPUT_ROW_COLUMN,
)

#: Points of the throughput chart (events are bucketed into this many time slices at most).
THROUGHPUT_BUCKETS = 60
#: Page size of the failed-samples table.
FAILED_PAGE_SIZE = 20
MAX_FAILED_PAGE_SIZE = 200
#: Bytes of a sample's text shown in tables (the full row is in the JSON endpoint).
TEXT_PREVIEW = 300
#: Lines of a partition's progress log shown.
LOG_LINES = 60
PARTITION_EVENTS = 40

CELL_STATES = ("completed", "running", "failed", "partial", "pending")


def read_plan_doc(job_dir: str) -> dict:
    """The job's execution plan document; ``{}`` while it is not written (or unreadable)."""
    try:
        return loads_json(storage.read_bytes(storage.join(job_dir, EXECUTION_PLAN)))
    except (FileNotFoundError, ValueError):
        return {}


def failed_partition_ids(job_dir: str, job_failures: dict[str, str] | None = None) -> dict[int, str]:
    """partition id -> error, by the rule the sensor uses (``engine.job.watch.failures``)."""
    job_failures = failures(job_dir) if job_failures is None else job_failures
    return {int(k.split()[1]): v for k, v in job_failures.items() if k != "job"}


def _cell_state(p: dict, seg: dict, failed: dict[int, str]) -> str:
    """A partition's state in one segment, from how many ops of its chain are accounted for.

    A segment covers its per-partition ops and, first, the keep mask of the global op before it
    (a segment after the last global op may have no op of its own: it applies the mask only)."""
    start = seg["applies_global"] if seg.get("applies_global") is not None else seg["start"]
    end = max(seg["end"], start + 1)
    done = int(p.get("ops_done") or 0)
    if done >= end:
        return "completed"
    if done >= start and p["partition_id"] in failed:
        return "failed"
    if done >= start and p.get("status") == "running":
        return "running"
    if done > start:
        return "partial"
    return "pending"


def grid(prog: dict, plan_doc: dict, failed: dict[int, str]) -> dict:
    """Partitions x segments: each cell's state, its Airflow task id, map index and grid label."""
    segments = [
        {
            "index": s["index"],
            "start": s["start"],
            "end": s["end"],
            "applies_global": s.get("applies_global"),
            "task_id": s["airflow_task_id"],
        }
        for s in plan_doc.get("segments", [])
    ]
    group_of: dict[int, dict] = {}
    for g in plan_doc.get("execution_groups", []):
        for pid in g["partition_ids"]:
            group_of[pid] = g
    rows = []
    counts = dict.fromkeys(CELL_STATES, 0)
    for p in prog.get("partitions") or []:
        pid = p["partition_id"]
        g = group_of.get(pid)
        cells = []
        for seg in segments:
            st = _cell_state(p, seg, failed)
            counts[st] += 1
            cells.append(st)
        rows.append(
            {
                "partition_id": pid,
                "label": f"p{pid} rows {p['start_row']}-{int(p['end_row']) - 1}",
                "group_label": g["label"] if g else None,
                "map_index": g["airflow_map_index"] if g else None,
                "input_rows": p.get("input_rows"),
                "output_rows": p.get("output_rows"),
                "ops_done": p.get("ops_done", 0),
                "status": "failed" if pid in failed else p.get("status"),
                "error": failed.get(pid) or p.get("error"),
                "cells": cells,
            }
        )
    return {"segments": segments, "rows": rows, "counts": counts}


def throughput(events: list[dict], buckets: int = THROUGHPUT_BUCKETS) -> list[dict]:
    """Rows through ops per second over time, from ``op_complete`` events (all runs of the job)."""
    done = [e for e in events if e.get("event_type") == "op_complete" and e.get("timestamp")]
    if not done:
        return []
    t0 = min(e["timestamp"] - float(e.get("duration") or 0) for e in done)
    t1 = max(e["timestamp"] for e in done)
    span = max(t1 - t0, 1e-3)
    width = span / buckets
    rows = [0] * buckets
    for e in done:
        i = min(buckets - 1, int((e["timestamp"] - t0) / width))
        rows[i] += int(e.get("input_rows") or 0)
    return [
        {"t": round(t0 + (i + 1) * width, 3), "rows": r, "rows_per_s": round(r / width, 1)} for i, r in enumerate(rows)
    ]


def funnel(prog: dict) -> list[dict]:
    """Per op: rows in -> out, filtered, duplicates, failed (the summary builder's totals)."""
    keys = ("op_index", "op_name", "kind", "is_global", "rows_in", "rows_out", "filtered", "duplicates", "failed")
    return [{k: o.get(k) for k in keys} for o in prog.get("ops") or []]


def gpu_report(job_dir: str) -> dict | None:
    try:
        return json.loads(storage.read_bytes(storage.join(job_dir, GPU_PROBE_REPORT)))
    except (FileNotFoundError, ValueError):
        return None


def job_overview(job_dir: str, *, dag_id: str | None = None, run_id: str | None = None) -> dict:
    """Everything the job page shows at once (the big lists — samples, logs — are fetched per partition)."""
    t0 = time.perf_counter()
    with gc_pause.paused():  # tens of thousands of acyclic dicts: no full collections meanwhile
        return _job_overview(job_dir, dag_id, run_id, t0)


def _job_overview(job_dir: str, dag_id: str | None, run_id: str | None, t0: float) -> dict:
    # Once, and only what was appended since the last page: the big read on a big job (the monitor
    # and the sensor rule share it; engine/jobdir/event_cache.py).
    events = event_cache.shared.read(job_dir)
    prog = job_progress(job_dir, events=events, markers=marker_cache.shared)
    job_failures = failures(job_dir, events)
    failed = failed_partition_ids(job_dir, job_failures)
    plan_doc = read_plan_doc(job_dir)
    return {
        "job_id": prog["job_id"],
        "job_dir": job_dir,
        "dag_id": dag_id,
        "run_id": run_id,
        "status": prog["status"],
        "project_name": prog.get("project_name"),
        "resume_token": prog["job_id"],
        "resume_conf": {"resume": prog["job_id"]},
        "resume_command": prog.get("resume_command"),
        "error": job_failures.get("job") or prog.get("error"),
        "input": prog.get("input"),
        "export": prog.get("export"),
        "start_time": prog.get("start_time"),
        "duration_s": prog.get("duration_s"),
        "eta_s": prog.get("eta_s"),
        "rows_per_s": prog.get("rows_per_s"),
        "failed_samples": prog.get("failed_samples", 0),
        "accounting_errors": prog.get("accounting_errors") or [],
        "grid": grid(prog, plan_doc, failed),
        "funnel": funnel(prog),
        "throughput": throughput(events),
        "gpu_report": gpu_report(job_dir),
        "trace": trace_overview(job_dir),
        "ray_jobs": ray_jobs_overview(job_dir),
        "failures": prog.get("failures") or [],
        "built_in_s": round(time.perf_counter() - t0, 4),
    }


def ray_jobs_overview(job_dir: str) -> list[dict]:
    """Ray Jobs mode: per group, then per global step, then the export, its latest Ray Job as its record
    in the job directory says (the record is the source of truth; the web server never asks the Ray
    dashboard).  ``step`` is ``export`` for the export's row, else None.  ``resubmissions`` is the latest
    submission's attempt number (None when the record has none); [] for a job not run in Ray Jobs mode."""
    out = []
    try:
        export = ray_jobs.read_export_record(job_dir)
    except (OSError, ValueError):  # removed or half-visible meanwhile: shown at the next look
        export = None
    records = ray_jobs.read_records(job_dir) + ray_jobs.read_global_records(job_dir) + ([export] if export else [])
    for record in records:
        entry = ray_jobs.latest_submission(record)
        if entry is None:
            continue
        attempt = entry.get("attempt")
        out.append(
            {
                "segment_index": record.get("segment_index"),
                "group_id": record.get("group_id"),
                "op_index": record.get("op_index"),  # a global step's Ray Job (no segment, no group)
                "step": record.get("step"),  # "export": the export's Ray Job
                "partition_ids": record.get("partition_ids") or [],
                "submission_id": entry.get("submission_id"),
                "state": entry.get("state"),
                "submitted_at": ray_jobs.submitted_at(entry),
                "resubmissions": int(attempt) if isinstance(attempt, int) else None,
                "dashboard_address": entry.get("dashboard_address"),
            }
        )
    return out


# -- per partition -------------------------------------------------------------------


def _preview(row: dict, text_key: str) -> str:
    text = row.get(text_key)
    if text is None:
        text = json.dumps({k: v for k, v in row.items() if not str(k).startswith("__dj__")}, default=str)
    text = str(text)
    return text if len(text) <= TEXT_PREVIEW else text[:TEXT_PREVIEW] + "…"


def failed_samples(
    job_dir: str, partition_id: int | None = None, *, offset: int = 0, limit: int = FAILED_PAGE_SIZE
) -> dict:
    """One page of the samples ops could not process, with op and reason, in op then input order."""
    limit = max(1, min(int(limit), MAX_FAILED_PAGE_SIZE))
    offset = max(0, int(offset))
    text_key = JobContext(job_dir).plan.text_key
    items: list[dict] = []
    total = 0
    for op_index, op_name, path in failed_sample_files(job_dir, partition_id):
        for line in storage.read_bytes(path).splitlines():
            if not line.strip():
                continue
            if offset <= total < offset + limit:
                row = json.loads(line)
                items.append(
                    {
                        "op_index": op_index,
                        "op_name": op_name,
                        "partition_id": row.get(FAILED_PARTITION_COLUMN),
                        "input_row": row.get(INPUT_ROW_COLUMN),
                        "error_type": row.get(FAILED_ERROR_TYPE_COLUMN),
                        "error": row.get(FAILED_ERROR_COLUMN),
                        "text": _preview(row, text_key),
                    }
                )
            total += 1
    return {"partition_id": partition_id, "offset": offset, "limit": limit, "total": total, "items": items}


def partition_detail(job_dir: str, partition_id: int) -> dict:
    """One partition: its row range, log tail, its latest events and the first page of its failed samples."""
    ctx = JobContext(job_dir)
    try:
        part = ctx.partition(partition_id)
    except IndexError:
        raise KeyError(partition_id) from None
    with gc_pause.paused():
        all_events = event_cache.shared.read(job_dir)
        events = [e for e in all_events if e.get("partition_id") == partition_id]
        failed = failed_partition_ids(job_dir, failures(job_dir, all_events))
    return {
        "partition_id": partition_id,
        "label": f"p{partition_id} rows {part['start_row']}-{int(part['end_row']) - 1}",
        "start_row": part["start_row"],
        "end_row": part["end_row"],
        "num_rows": part["num_rows"],
        "error": failed.get(partition_id),
        "log": tail_lines(partition_log_path(job_dir, partition_id), LOG_LINES),
        "events": [
            {
                k: e[k]
                for k in (
                    "time_utc",
                    "event_type",
                    "op_index",
                    "op_name",
                    "input_rows",
                    "output_rows",
                    "try_number",
                    "airflow_task_id",
                    "airflow_map_index",
                    "error_message",
                )
                if k in e
            }
            for e in events[-PARTITION_EVENTS:]
        ],
        "failed_samples": failed_samples(job_dir, partition_id),
    }


# -- tracer --------------------------------------------------------------------------


def trace_overview(job_dir: str) -> dict:
    """Per traced op: its file and entry count (merged files exist once the job exported)."""
    try:
        report = json.loads(storage.read_bytes(storage.join(job_dir, TRACE_DIR, TRACE_REPORT)))
    except (FileNotFoundError, ValueError):
        report = None
    ops = []
    try:
        plan = JobContext(job_dir).plan
    except Exception:  # noqa: BLE001 - an unplanned job has no trace
        return {"enabled": False, "ops": []}
    for op in plan.ops:
        name = trace_file_name(plan, op.index)
        path = storage.join(job_dir, TRACE_DIR, name)
        if storage.exists(path):
            ops.append({"op_index": op.index, "op_name": op.name, "file": name})
    return {"enabled": bool(ops) or bool(report), "report": report, "ops": ops}


def trace_samples(job_dir: str, op_index: int, *, limit: int = 20) -> dict:
    """The first ``limit`` tracer entries of one op (mapper: before/after; filter: removed; dedup: pairs)."""
    plan = JobContext(job_dir).plan
    if not 0 <= op_index < len(plan.ops):
        raise KeyError(op_index)
    name = trace_file_name(plan, op_index)
    path = storage.join(job_dir, TRACE_DIR, name)
    entries = []
    try:
        for line in storage.read_bytes(path).splitlines()[: max(1, min(limit, 200))]:
            if line.strip():
                entries.append(json.loads(line))
    except FileNotFoundError:
        pass
    return {"op_index": op_index, "op_name": plan.ops[op_index].name, "file": name, "entries": entries}
