"""Where a job is and what state it is in, read from its directory alone: one API for every caller.

``dj-airflow stop`` / ``jobs`` (``client/control.py``), ``dj-airflow monitor`` and ``JobUtils`` (``client/monitor/``)
all find a job and name its state with these functions, so a job never has two states at once.

Why the look-up order is the given work dir, then ``DJ_WORK_DIR``, then the recent-jobs registry,
then the current directory: a work dir given on the command line is what the user means; the
registry of recent jobs on this machine only helps when they do not remember it.
"""

from __future__ import annotations

from airflow_provider_dj import settings
from airflow_provider_dj.core import fs as storage
from airflow_provider_dj.core.errors import DJError
from airflow_provider_dj.engine.job.summary import FINAL_STATUSES, read_job_summary
from airflow_provider_dj.engine.jobdir import lock as job_lock
from airflow_provider_dj.engine.jobdir import stop_control
from airflow_provider_dj.engine.jobdir.events import read_events
from airflow_provider_dj.engine.jobdir.identity import validate_job_id
from airflow_provider_dj.engine.jobdir.layout import EFFECTIVE_CONFIG, JOB_SUMMARY, PARTITIONING_INFO
from airflow_provider_dj.engine.jobdir.registry import lookup_job, registry_path

#: Every state :func:`job_status` names.  ``interrupted``: work started, nothing runs and no final
#: summary is newer than the last start (a killed run: resume it); ``planned``: no work started yet.
STATES = ("completed", "failed", "stopped", "stopping", "running", "interrupted", "planned")
RUNNING_STATES = ("running", "stopping")


class JobNotFoundError(DJError, LookupError):
    """No job directory for this id: the message says where it looked and what to pass."""


def _is_job_dir(path: str) -> bool:
    return any(
        storage.exists(storage.join(path, *rel.split("/")))
        for rel in (EFFECTIVE_CONFIG, PARTITIONING_INFO, JOB_SUMMARY)
    )


def resolve_job_dir(job_id: str, work_dir: str | None = None) -> str:
    """The job directory of ``job_id``; raises JobNotFoundError naming every place tried."""
    validate_job_id(job_id)
    looked: list[str] = []
    for base, why in ((work_dir, "--work-dir"), (settings.get("work_dir"), "$DJ_WORK_DIR")):
        if base:
            cand = storage.join(base, job_id)
            if _is_job_dir(cand):
                return cand
            looked.append(f"{cand} ({why})")
    try:
        recorded = lookup_job(job_id)
    except Exception:  # noqa: BLE001 - the registry is a convenience: an unreadable one is skipped
        recorded = None
    if recorded and _is_job_dir(recorded):
        return recorded
    looked.append(
        f"the recent-jobs registry {registry_path()}"
        + (f" (recorded {recorded}, which no longer holds the job)" if recorded else " (not recorded)")
    )
    if not work_dir and not settings.get("work_dir"):
        cand = storage.join(".", job_id)
        if _is_job_dir(cand):
            return cand
        looked.append(f"{cand} (the current directory)")
    raise JobNotFoundError(
        f"job {job_id!r} not found; looked in: {'; '.join(looked)}. Pass the recipe's work_dir with "
        f"--work-dir (work_dir= in Python) or set DJ_WORK_DIR"
    )


def live_lock(job_dir: str) -> dict | None:
    """The runner lock when a runner holds it now (fresh, readable), else None."""
    lock = job_lock.read_lock(job_dir)
    if lock and not lock.get("corrupt") and not job_lock.is_stale(lock)[0]:
        return lock
    return None


def _progress(job_dir: str) -> dict | None:
    """Partitions whose final checkpoint is committed, of all partitions."""
    try:
        from airflow_provider_dj.engine.job.resume import completed_checkpoints
        from airflow_provider_dj.engine.storage.context import JobContext

        ctx = JobContext(job_dir)
        done = completed_checkpoints(job_dir, ctx.partitioning_info, ctx.plan)
    except Exception:  # noqa: BLE001 - an unplanned or half-written job has no progress yet
        return None
    final = sum(1 for d in done.values() if d["final"])
    return {
        "partitions_final": final,
        "partitions_total": len(done),
        "percent": round(100.0 * final / len(done), 1) if done else 0.0,
    }


def job_status(
    job_dir: str,
    *,
    summary: dict | None = None,
    events: list[dict] | None = None,
    with_progress: bool = True,
) -> dict:
    """One job's state: ``{"job_id", "job_dir", "status", "progress", "stop_request", "runner"}``.

    ``status`` is one of :data:`STATES`: completed, failed or stopped from a summary newer than the
    last start; stopping or running while a runner holds the lock (stopping: a stop is requested);
    stopped when a stop was requested and nothing runs; otherwise interrupted or planned.
    ``summary`` and ``events`` may be passed when the caller has read them already.
    """
    summary = read_job_summary(job_dir) if summary is None else summary
    events = read_events(job_dir) if events is None else events
    starts = [e["timestamp"] for e in events if e.get("event_type") == "job_start"]
    last_start = starts[-1] if starts else 0.0
    final = None
    if summary and summary.get("status") in FINAL_STATUSES and float(summary.get("end_time") or 0) >= last_start:
        final = summary["status"]
    lock = live_lock(job_dir)
    request = stop_control.read_stop_request(job_dir)
    if final == "completed":
        status = "completed"
    elif lock:
        status = "stopping" if request else "running"
    elif final:
        status = final
    elif request:
        status = "stopped"
    else:
        status = "interrupted" if events else "planned"
    return {
        "job_id": storage.basename(job_dir),
        "job_dir": job_dir,
        "status": status,
        "progress": _progress(job_dir) if with_progress else None,
        "stop_request": request,
        "runner": job_lock.describe(lock) if lock else None,
    }


def find_job_dirs(work_dir: str | None = None) -> list[str]:
    """Every job directory under ``work_dir`` (default ``$DJ_WORK_DIR``, then ``.``), plus, when no
    work dir is given, those in the recent-jobs registry; in that order, each once."""
    root = work_dir or settings.get("work_dir") or "."
    dirs = [storage.join(root, name) for name in sorted(storage.listdir(root))]
    dirs = [d for d in dirs if _is_job_dir(d)]
    if not work_dir:
        try:
            from airflow_provider_dj.engine.jobdir.registry import recent_jobs

            dirs += [e["job_dir"] for e in recent_jobs().values() if e.get("job_dir")]
        except Exception:  # noqa: BLE001 - the registry is a convenience: an unreadable one is skipped
            pass
    return list(dict.fromkeys(dirs))


def list_jobs(work_dir: str | None = None, *, running_only: bool = True, with_progress: bool = True) -> list[dict]:
    """:func:`job_status` of every job :func:`find_job_dirs` finds; by default only running or stopping ones."""
    out = []
    for d in find_job_dirs(work_dir):
        if not storage.exists(d):
            continue
        st = job_status(d, with_progress=with_progress)
        if not running_only or st["status"] in RUNNING_STATES:
            out.append(st)
    return out
