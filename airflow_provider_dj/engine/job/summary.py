"""``job_summary.json`` for every way a job ends: completed, failed, stopped.

Why one builder reads the job directory instead of each caller keeping
counts: the task that ends a job (the export, a failing partition task's
failure callback, a stop) is rarely the one that did the work, and an
Airflow clear deletes XComs.  The durable facts are the checkpoint commit
markers (each carries its partition's op-by-op accounting) and the event
files; both are read here, so a failed or stopped job gets the same
accounting, timings and resume command as a completed one.

``status`` is one of ``completed``, ``failed``, ``stopped`` (final) or
``running`` (a view built by the monitor; written only on request).  A
``completed`` summary is never replaced by a later failure or stop: the
resume path and ``verify_completed_export`` rely on it.

Row accounting (invariant 6) is re-checked per partition here too: for a
completed job a mismatch has already failed the export
(``export.check_accounting``); for a failed or stopped one it is reported in
``accounting_errors`` so a person sees it.
"""

from __future__ import annotations

import logging
import time
from datetime import datetime, timezone
from typing import Callable

from airflow_provider_dj.core import fs as storage
from airflow_provider_dj.core.errors import DJError
from airflow_provider_dj.engine.jobdir.doc_cache import read_partitioning_info
from airflow_provider_dj.engine.jobdir.identity import resume_command
from airflow_provider_dj.engine.jobdir.layout import (
    CHECKPOINTS_DIR,
    DEDUP_KEYS_STORE,
    DEDUP_MASK_STORE,
    EFFECTIVE_CONFIG,
    FAILED_DIR,
    JOB_SUMMARY,
    read_json,
    write_json,
)
from airflow_provider_dj.engine.output.accounting import check_partition_chain
from airflow_provider_dj.engine.storage.checkpoints import MARKER_SUFFIX, CheckpointStore, StorageFormat

log = logging.getLogger(__name__)

FINAL_STATUSES = ("completed", "failed", "stopped")
STATUSES = FINAL_STATUSES + ("running",)
_COUNT_KEYS = ("rows_in", "rows_out", "filtered", "duplicates", "failed")
MAX_ERRORS = 20


class SummaryStatusError(DJError, ValueError):
    pass


def _iso(ts: float | None) -> str | None:
    return datetime.fromtimestamp(ts, tz=timezone.utc).isoformat() if ts else None


def _read_optional(path: str):
    try:
        return read_json(path)
    except (FileNotFoundError, ValueError):
        return None


def read_job_summary(job_dir: str) -> dict | None:
    """The written summary, or None (absent or unreadable)."""
    return _read_optional(storage.join(job_dir, JOB_SUMMARY))


def _committed_pids(store: CheckpointStore, op_index: int, op_name: str) -> set[int]:
    out = set()
    for name in storage.listdir(store.op_dir(op_index, op_name)):
        if name.startswith("partition_") and name.endswith(MARKER_SUFFIX):
            try:
                out.add(int(name[len("partition_") : -len(MARKER_SUFFIX)]))
            except ValueError:
                continue
    return out


def _latest_op_events(events: list[dict]) -> dict[tuple[int, int], dict]:
    """(partition, op) -> the latest op_complete event: measured rows and duration of that op run."""
    out: dict[tuple[int, int], dict] = {}
    for ev in events:
        if ev.get("event_type") == "op_complete" and "partition_id" in ev and "op_index" in ev:
            out[(ev["partition_id"], ev["op_index"])] = ev
    return out


def _from_event(ev: dict) -> dict:
    rows_in, rows_out = int(ev.get("input_rows", 0)), int(ev.get("output_rows", 0))
    return {
        "op_index": ev["op_index"],
        "op_name": ev.get("op_name"),
        "rows_in": rows_in,
        "rows_out": rows_out,
        "filtered": int(ev.get("filtered", 0)),
        "duplicates": int(ev.get("duplicates", 0)),
        "failed": int(ev.get("failed", 0)),
        "duration_s": float(ev.get("duration", 0.0)),
        "source": "events",
    }


def _partition_state(
    ctx_plan,
    read_marker: Callable[[int, str, int], dict | None],
    committed: dict[int, set[int]],
    part: dict,
    op_events: dict,
    running: set[int],
    failed: dict[int, str],
) -> dict:
    """One partition's accounting: its latest committed marker, extended by op_complete
    events for ops after it that were not checkpointed (measured, not durable)."""
    pid = part["partition_id"]
    acct: list[dict] = []
    last_cp = None
    for i in sorted(committed, reverse=True):
        if pid in committed[i]:
            marker = read_marker(i, ctx_plan.ops[i].name, pid)
            if (
                marker
                and marker.get("partition_hash") == part["content_hash"]
                and marker.get("pipeline_fingerprint") == ctx_plan.ops[i].fingerprint
            ):
                acct = [dict(a, source="checkpoint") for a in marker.get("accounting", [])]
                last_cp = i
                break
    nxt = len(acct)
    while (pid, nxt) in op_events and nxt < len(ctx_plan.ops):
        ev = op_events[(pid, nxt)]
        if acct and ev.get("input_rows") != acct[-1]["rows_out"]:
            break  # an event from another attempt whose input differs: not part of this chain
        acct.append(_from_event(ev))
        nxt += 1
    n_ops = len(ctx_plan.ops)
    if len(acct) == n_ops:
        status = "completed"
    elif pid in failed:
        status = "failed"
    elif pid in running:
        status = "running"
    else:
        status = "pending" if not acct else "partial"
    out = {
        "partition_id": pid,
        "start_row": part["start_row"],
        "end_row": part["end_row"],
        "input_rows": part["num_rows"],
        "status": status,
        "ops_done": len(acct),
        "last_checkpoint_op": last_cp,
        "output_rows": acct[-1]["rows_out"] if acct else None,
        "accounting": acct,
    }
    if pid in failed:
        out["error"] = failed[pid]
    return out


def _per_op_totals(plan, partitions: list[dict]) -> list[dict]:
    totals = []
    for op in plan.ops:
        t = {
            "op_index": op.index,
            "op_name": op.name,
            "kind": op.kind,
            "is_global": op.is_global,
            "partitions_done": 0,
            **{k: 0 for k in _COUNT_KEYS},
            "duration_s": 0.0,
        }
        for p in partitions:
            if op.index < len(p["accounting"]):
                a = p["accounting"][op.index]
                t["partitions_done"] += 1
                for k in _COUNT_KEYS:
                    t[k] += int(a.get(k, 0))
                t["duration_s"] = round(t["duration_s"] + float(a.get("duration_s", 0.0)), 6)
        t["rows_per_s"] = round(t["rows_in"] / t["duration_s"], 1) if t["duration_s"] > 0 else None
        totals.append(t)
    return totals


def _checkpoint_inventory(job_dir: str, plan, committed: dict[int, set[int]]) -> dict:
    keys, masks = CheckpointStore(job_dir, prefix=DEDUP_KEYS_STORE), CheckpointStore(job_dir, prefix=DEDUP_MASK_STORE)
    per_op = []
    for op in plan.ops:
        entry = {
            "op_index": op.index,
            "op_name": op.name,
            "checkpoint_point": op.index in plan.checkpoint_points,
            "committed_partitions": len(committed.get(op.index, ())),
            "dir": storage.join(CHECKPOINTS_DIR, storage.basename(CheckpointStore(job_dir).op_dir(op.index, op.name))),
        }
        if op.is_global:
            entry["dedup_keys_partitions"] = len(_committed_pids(keys, op.index, op.name))
            entry["dedup_mask_partitions"] = len(_committed_pids(masks, op.index, op.name))
        per_op.append(entry)
    return {"strategy": plan.strategy, "points": plan.checkpoint_points, "per_op": per_op}


def _failed_sample_files(job_dir: str) -> list[str]:
    root = storage.join(job_dir, FAILED_DIR)
    out = []
    for d in storage.listdir(root):
        for f in storage.listdir(storage.join(root, d)):
            out.append(f"{FAILED_DIR}/{d}/{f}")
    return out


def _runs(events: list[dict]) -> list[dict]:
    return [
        {"started_at": _iso(e["timestamp"]), "status": e.get("status"), "airflow_run_id": e.get("airflow_run_id")}
        for e in events
        if e.get("event_type") == "job_start"
    ]


def _errors(events: list[dict], since: float) -> list[dict]:
    errs = []
    for e in events:
        if (
            e.get("timestamp", 0) >= since
            and e.get("event_type") in ("op_failed", "partition_failed", "job_failed")
            and e.get("error_message")
        ):
            errs.append(
                {
                    k: e[k]
                    for k in (
                        "event_type",
                        "time_utc",
                        "partition_id",
                        "op_index",
                        "op_name",
                        "airflow_task_id",
                        "airflow_map_index",
                        "try_number",
                        "error_message",
                    )
                    if k in e
                }
            )
    return errs[-MAX_ERRORS:]


def build_job_summary(
    job_dir: str,
    status: str,
    *,
    error: str | None = None,
    events: list[dict] | None = None,
    now: float | None = None,
    markers=None,
) -> dict:
    """The summary of a job in whatever state its directory is in.  Reads only.

    ``markers``: a long-lived reader's ``engine.storage.marker_cache.MarkerCache`` (the job view);
    without one every commit marker is read from the job directory."""
    from airflow_provider_dj.engine.jobdir.events import read_events
    from airflow_provider_dj.engine.storage.context import JobContext

    if status not in STATUSES:
        raise SummaryStatusError(f"status {status!r} is not one of {', '.join(STATUSES)}")
    now = now or time.time()
    events = read_events(job_dir) if events is None else events
    starts = [e for e in events if e.get("event_type") == "job_start"]
    started_at = starts[0]["timestamp"] if starts else (events[0]["timestamp"] if events else None)
    last_start = starts[-1]["timestamp"] if starts else (started_at or 0)
    summary: dict = {
        "job_id": storage.basename(job_dir),
        "status": status,
        "job_dir": job_dir,
        "start_time": started_at,
        "end_time": now if status in FINAL_STATUSES else None,
        "start_time_utc": _iso(started_at),
        "end_time_utc": _iso(now) if status in FINAL_STATUSES else None,
        "duration_s": round(now - started_at, 3) if started_at else None,
        "runs": _runs(events),
    }
    if error:
        summary["error"] = error
    cfg = _read_optional(storage.join(job_dir, *EFFECTIVE_CONFIG.split("/")))
    try:
        info = read_partitioning_info(job_dir)
    except (FileNotFoundError, ValueError):
        info = None
    summary["errors"] = _errors(events, last_start)
    if cfg is None or info is None:
        summary["note"] = "the job was never planned (no effective config or partitioning info); nothing ran"
        return summary
    ctx = JobContext(job_dir)
    recipe, plan = ctx.recipe, ctx.plan
    summary["job_id"] = ctx.job_id
    summary["project_name"] = recipe.project_name
    summary["recipe_file"] = recipe.source_file
    summary["effective_config"] = cfg
    summary["input"] = {
        "dataset_path": recipe.dataset_path,
        "total_rows": info["total_rows"],
        "partitions": len(info["partitions"]),
        "hash_algorithm": info.get("algorithm"),
    }
    parts = _add_partition_sections(summary, job_dir, plan, info, events, last_start, markers)
    summary["checkpoint_strategy"] = plan.strategy
    summary["checkpoint_points"] = plan.checkpoint_points
    if recipe.intermediate_storage.reuse_across_jobs:  # nightly reuse: what came from earlier jobs
        from airflow_provider_dj.engine.execution.reuse import reuse_off_reason, reuse_summary

        summary["reuse"] = reuse_summary(events, plan, len(parts))
        if reuse_off_reason(recipe):
            summary["reuse"]["off"] = reuse_off_reason(recipe)
    summary["export"] = {"path": recipe.export_path, "written": False}
    summary["resume_command"] = resume_command(recipe.source_file, ctx.job_id)
    summary["resume_airflow_conf"] = {"resume": ctx.job_id}
    if status == "stopped":
        from airflow_provider_dj.engine.jobdir.stop_control import read_stop_request

        summary["stop_request"] = read_stop_request(job_dir)
    return summary


def _add_partition_sections(
    summary: dict, job_dir: str, plan, info: dict, events: list[dict], last_start: float, markers=None
) -> list[dict]:
    """Add each partition's state and what follows from them (per-op totals, progress, accounting,
    failed samples, checkpoint inventory) to ``summary``; return the partitions' states.

    ``last_start``: when this run started; only its events say which partitions run or failed."""
    store = CheckpointStore(job_dir, StorageFormat())
    read_marker = markers.reader(store) if markers is not None else store.read_marker
    committed = {i: _committed_pids(store, i, plan.ops[i].name) for i in plan.checkpoint_points if i < len(plan.ops)}
    running, failed = _partition_run_states(events, last_start)
    op_events = _latest_op_events(events)
    parts = [_partition_state(plan, read_marker, committed, p, op_events, running, failed) for p in info["partitions"]]
    problems = [
        msg for p in parts for msg in check_partition_chain(p["partition_id"], p["input_rows"], p["accounting"])
    ]
    per_op = _per_op_totals(plan, parts)
    summary["ops"] = per_op
    summary["partitions"] = parts
    summary["progress"] = {
        "partitions_total": len(parts),
        "partitions_completed": sum(1 for p in parts if p["status"] == "completed"),
        "partitions_failed": sum(1 for p in parts if p["status"] == "failed"),
        "op_units_done": sum(p["ops_done"] for p in parts),
        "op_units_total": len(parts) * len(plan.ops),
    }
    summary["accounting_ok"] = not problems
    summary["accounting_errors"] = problems[:MAX_ERRORS]
    summary["failed_samples"] = sum(o["failed"] for o in per_op)
    summary["failed_samples_by_op"] = {o["op_name"]: o["failed"] for o in per_op if o["failed"]}
    summary["failed_sample_files"] = _failed_sample_files(job_dir)
    summary["checkpoints"] = _checkpoint_inventory(job_dir, plan, committed)
    return parts


def _partition_run_states(events: list[dict], last_start: float) -> tuple[set[int], dict[int, str]]:
    """The partitions running and those failed (with their error) in the run started at ``last_start``."""
    recent = [e for e in events if e.get("timestamp", 0) >= last_start]
    # The latest partition_* event of each partition (this run) says whether it runs or failed.
    running: set[int] = set()
    failed: dict[int, str] = {}
    for e in recent:
        pid, kind = e.get("partition_id"), e.get("event_type")
        # partition_stopped ends a partition's run too: a stopped job's
        # partitions are not "running".
        if pid is None or kind not in (
            "partition_start",
            "partition_complete",
            "partition_failed",
            "partition_stopped",
        ):
            continue
        running.discard(pid)
        failed.pop(pid, None)
        if kind == "partition_start":
            running.add(pid)
        elif kind == "partition_failed":
            failed[pid] = e.get("error_message", "")
    return running, failed


def enrich_completed_summary(job_dir: str, summary: dict) -> dict:
    """Add the builder's sections (per-op throughput, checkpoint inventory, runs,
    failed-sample files) to the export's completed summary.  The export's own
    keys win: resume and ``verify_completed_export`` read them."""
    try:
        built = build_job_summary(job_dir, "completed", now=summary.get("end_time"))
    except Exception as exc:  # noqa: BLE001 - the export's summary is complete without these extras
        log.warning("could not build the extra summary sections: %s", exc)
        return summary
    merged = {k: v for k, v in built.items() if k not in ("partitions", "ops", "export")}
    merged.update({k: v for k, v in summary.items() if v is not None or k not in merged})
    by_op = {o["op_index"]: o for o in built.get("ops", [])}
    merged["ops"] = [dict(o, rows_per_s=by_op.get(o["op_index"], {}).get("rows_per_s")) for o in summary.get("ops", [])]
    merged["export"] = dict(summary.get("export", {}), written=True)
    return merged


def write_job_summary(
    job_dir: str, status: str, error: str | None = None, *, event_defaults: dict | None = None, emit_event: bool = True
) -> dict:
    """Build and atomically write ``job_summary.json``; return it.

    For ``failed`` and ``stopped`` it also emits ``job_failed`` /
    ``job_stopped`` (unless ``emit_event`` is False), appends a line to
    ``logs/job.log`` and updates the recent-jobs registry.  A ``completed``
    summary already on disk is kept as it is (and returned): a task failing
    after the export, e.g. a re-verification, must not turn a finished job
    into a failed one that a resume would redo.
    """
    existing = read_job_summary(job_dir)
    if existing and existing.get("status") == "completed" and status != "completed":
        log.warning("job %s already completed; keeping its summary (not marking it %s)", existing.get("job_id"), status)
        return existing
    summary = build_job_summary(job_dir, status, error=error)
    write_json(storage.join(job_dir, JOB_SUMMARY), summary)
    if emit_event and status in ("failed", "stopped"):
        from airflow_provider_dj.engine.jobdir.events import EventLog

        EventLog(job_dir, summary["job_id"], defaults=event_defaults).emit(
            "job_failed" if status == "failed" else "job_stopped",
            status=status,
            error_message=error,
            duration=summary.get("duration_s"),
            summary_path=storage.join(job_dir, JOB_SUMMARY),
        )
    after_summary_written(job_dir, summary)
    return summary


def after_summary_written(job_dir: str, summary: dict) -> None:
    """Side effects every final summary gets: a job.log line, the registry entry and, for a completed
    job, its project's latest-completed pointer. Never raises."""
    try:
        from airflow_provider_dj.engine.jobdir.progress_log import append_job_log

        prog = summary.get("progress") or {}
        line = f"job {summary.get('status')}"
        if prog:
            line += f": {prog.get('partitions_completed')}/{prog.get('partitions_total')} partitions complete"
        if summary.get("export", {}).get("written"):
            line += f", exported {summary['export'].get('rows')} rows to {summary['export'].get('path')}"
        if summary.get("error"):
            line += f"; error: {summary['error']}"
        if summary.get("status") != "completed" and summary.get("resume_command"):
            line += f"; resume with: {summary['resume_command']}"
        append_job_log(job_dir, line)
    except Exception as exc:  # noqa: BLE001
        log.warning("could not append to logs/job.log: %s", exc)
    try:
        from airflow_provider_dj.engine.jobdir.registry import register_job

        register_job(summary.get("job_id") or storage.basename(job_dir), job_dir, status=summary.get("status"))
    except Exception as exc:  # noqa: BLE001 - the registry is a convenience
        log.warning("could not update the recent-jobs registry: %s", exc)
    from airflow_provider_dj.engine.job.project_index import record_completed

    record_completed(job_dir, summary)  # the review gate's "previous successful job" (never raises)


def mark_resumed(job_dir: str) -> dict | None:
    """A new run resumes a failed or stopped job: its summary becomes ``running``.

    Why: a ``failed`` summary left in place would tell every reader — the
    monitor, ``CheckpointSensor`` (engine.job.watch), people — that the job
    is failed while the resume is working on it.  The previous outcome is
    kept under ``previous``.  Jobs without a summary (a first run, a killed
    run) are left without one; a completed summary is never touched.
    Returns the new summary, or None when nothing was written.
    """
    existing = read_job_summary(job_dir)
    if not existing or existing.get("status") not in ("failed", "stopped"):
        return None
    summary = build_job_summary(job_dir, "running")
    summary["previous"] = {k: existing.get(k) for k in ("status", "error", "end_time", "end_time_utc")}
    write_json(storage.join(job_dir, JOB_SUMMARY), summary)
    return summary
