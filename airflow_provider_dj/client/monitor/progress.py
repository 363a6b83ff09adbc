"""Job progress from the job directory: per partition and op, throughput, ETA, failures.

Why computed from the summary builder plus events: the builder already
turns checkpoint markers and ``op_complete`` events into a per-partition
op chain, for any job state; the events add what only they know — which
op a partition is in right now, how fast this run goes, the latest
happenings.  Throughput and ETA count only work done since the latest
``job_start`` (a resumed job's earlier work is not speed).
"""

from __future__ import annotations

import sys
import time
from typing import Callable, TextIO

from airflow_provider_dj.core import fs as storage
from airflow_provider_dj.core import gc_pause
from airflow_provider_dj.engine.job.status import job_status, list_jobs, resolve_job_dir
from airflow_provider_dj.engine.job.summary import FINAL_STATUSES, build_job_summary, read_job_summary
from airflow_provider_dj.engine.jobdir.events import read_events

LAST_EVENTS = 8
LAST_EVENTS_DETAILED = 20


def _current_ops(events: list[dict]) -> dict[int, dict]:
    """partition -> the op_start event of the op it is in now (started, not completed or failed)."""
    cur: dict[int, dict] = {}
    for e in events:
        pid = e.get("partition_id")
        if pid is None:
            continue
        kind = e.get("event_type")
        if kind == "op_start":
            cur[pid] = e
        elif kind in ("op_complete", "op_failed", "partition_complete", "partition_failed", "partition_stopped"):
            cur.pop(pid, None)
    return cur


def job_progress(job_dir: str, *, now: float | None = None, events: list[dict] | None = None, markers=None) -> dict:
    """Everything the monitor shows, as data (render.py turns it into text).

    ``events`` may be passed when the caller has read them already (the job view reads them once);
    ``markers``: a long-lived reader's ``engine.storage.marker_cache.MarkerCache``."""
    with gc_pause.paused():  # ~10 acyclic dicts per partition: no full collections meanwhile
        return _job_progress(job_dir, now, events, markers)


def _job_progress(job_dir: str, now: float | None, events: list[dict] | None, markers) -> dict:
    now = now or time.time()
    events = read_events(job_dir) if events is None else events
    written = read_job_summary(job_dir)
    status = job_status(job_dir, summary=written, events=events, with_progress=False)["status"]
    # Always rebuilt from markers and events: a failure summary is a snapshot
    # taken when the first task failed (siblings may have finished since), and
    # a completed summary loses per-partition detail when retention runs.
    view = build_job_summary(
        job_dir, status if status in FINAL_STATUSES else "running", events=events, now=now, markers=markers
    )
    if written and written.get("status") == status:
        for key in ("start_time", "end_time", "duration_s", "error", "stop_request"):
            if written.get(key) is not None:
                view[key] = written[key]
        if status == "completed":
            view["export"] = written.get("export", view.get("export"))
            if not any(p["ops_done"] for p in view.get("partitions") or []):
                view["ops"] = written.get("ops", view.get("ops"))
                view["partitions"] = [
                    dict(p, status="completed", ops_done=len(p.get("accounting", [])))
                    for p in written.get("partitions", [])
                ]
    starts = [e["timestamp"] for e in events if e.get("event_type") == "job_start"]
    run_start = starts[-1] if starts else (events[0]["timestamp"] if events else now)
    this_run = [e for e in events if e.get("timestamp", 0) >= run_start]
    done_now = [e for e in this_run if e.get("event_type") == "op_complete"]
    last_ts = this_run[-1]["timestamp"] if this_run else run_start
    elapsed = max(0.0, (now if status == "running" else last_ts) - run_start)
    rows_this_run = sum(int(e.get("input_rows", 0)) for e in done_now)
    parts = view.get("partitions") or []
    n_ops = len(view.get("ops") or [])
    units_total = len(parts) * n_ops
    units_done = sum(min(p.get("ops_done", 0), n_ops) for p in parts)
    rate_units = len(done_now) / elapsed if elapsed > 0 and done_now else 0.0
    eta = (units_total - units_done) / rate_units if rate_units and status == "running" else None
    current = _current_ops(this_run) if status == "running" else {}
    for p in parts:
        if p["partition_id"] in current and p.get("status") != "completed":
            ev = current[p["partition_id"]]
            p["status"] = "running"
            p["current_op"] = {
                "op_index": ev.get("op_index"),
                "op_name": ev.get("op_name"),
                "input_rows": ev.get("input_rows"),
                "since_s": round(now - ev["timestamp"], 1),
            }
    failures = [e for e in events if e.get("event_type") in ("op_failed", "partition_failed", "job_failed")]
    return {
        "job_id": view.get("job_id") or storage.basename(job_dir),
        "job_dir": job_dir,
        "status": status,
        "project_name": view.get("project_name"),
        "start_time": view.get("start_time"),
        "end_time": view.get("end_time") if status in FINAL_STATUSES else None,
        "duration_s": view.get("duration_s")
        if status in FINAL_STATUSES
        else (round(now - view["start_time"], 1) if view.get("start_time") else None),
        "input": view.get("input"),
        "ops": view.get("ops") or [],
        "partitions": parts,
        "units_done": units_done,
        "units_total": units_total,
        "rows_processed_this_run": rows_this_run,
        "rows_per_s": round(rows_this_run / elapsed, 1) if elapsed > 0 and rows_this_run else None,
        "run_elapsed_s": round(elapsed, 3),
        "eta_s": round(eta, 1) if eta is not None else None,
        "failed_samples": view.get("failed_samples", 0),
        "failures": failures[-10:],
        "error": view.get("error") or (written or {}).get("error"),
        "export": view.get("export"),
        "resume_command": view.get("resume_command"),
        "stop_request": view.get("stop_request"),
        "accounting_errors": view.get("accounting_errors") or [],
        "last_events": events[-LAST_EVENTS_DETAILED:],
        "note": view.get("note"),
        "reuse": view.get("reuse"),
    }


def show_job_progress(
    job_id: str,
    detailed: bool = True,
    *,
    work_dir: str | None = None,
    job_dir: str | None = None,
    file: TextIO | None | str = "stdout",
    width: int = 30,
) -> str:
    """Print (to ``file``, default stdout; None prints nothing) and return the monitor's text for a job."""
    file = sys.stdout if file == "stdout" else file
    from airflow_provider_dj.client.monitor.render import render_progress

    job_dir = job_dir or resolve_job_dir(job_id, work_dir)
    text = render_progress(job_progress(job_dir), detailed=detailed, width=width)
    if file is not None:
        print(text, file=file, flush=True)
    return text


def watch_job(
    job_id: str,
    *,
    interval: float = 5.0,
    max_iterations: int | None = None,
    detailed: bool = False,
    work_dir: str | None = None,
    file: TextIO | None | str = "stdout",
    clear: bool | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> list[str]:
    """Re-render every ``interval`` seconds until the job is no longer running
    (or ``max_iterations`` renders).  Returns the rendered frames."""
    file = sys.stdout if file == "stdout" else file
    from airflow_provider_dj.client.monitor.render import render_progress

    job_dir = resolve_job_dir(job_id, work_dir)
    clear = (file is not None and hasattr(file, "isatty") and file.isatty()) if clear is None else clear
    frames: list[str] = []
    from airflow_provider_dj.engine.jobdir.event_cache import EventCache
    from airflow_provider_dj.engine.storage.marker_cache import MarkerCache

    # Each frame parses only the events appended since the last, and re-reads only changed markers.
    events, markers = EventCache(max_jobs=1), MarkerCache()
    while True:
        prog = job_progress(job_dir, events=events.read(job_dir), markers=markers)
        text = render_progress(prog, detailed=detailed)
        frames.append(text)
        if file is not None:
            if clear:
                file.write("\x1b[2J\x1b[H")
            print(text, file=file, flush=True)
        if prog["status"] != "running" or (max_iterations is not None and len(frames) >= max_iterations):
            return frames
        sleep(interval)


def list_running_jobs(work_dir: str | None = None) -> list[dict]:
    """Jobs that run now (runner lock held and fresh, no stop requested), as ``{job_id, job_dir,
    status}``: the running ones of ``engine.job.status.list_jobs``."""
    jobs = list_jobs(work_dir, running_only=True, with_progress=False)
    out = [{k: j[k] for k in ("job_id", "job_dir", "status")} for j in jobs if j["status"] == "running"]
    return sorted(out, key=lambda j: j["job_id"])
