"""``JobUtils``: find a job by id and read what its directory holds.

Why lookup order is work dir first, then the registry: a work dir given on
the command line (or ``DJ_WORK_DIR``) is what the user means; the registry
of recent jobs on this machine only helps when they do not remember it.
"""

from __future__ import annotations

from airflow_provider_dj import settings
from airflow_provider_dj.engine.jobdir import lock as job_lock
from airflow_provider_dj.engine.jobdir.layout import EXECUTION_PLAN, PARTITIONING_INFO, read_json, validate_job_id
from airflow_provider_dj.engine.jobdir.registry import lookup_job, registry_path
from airflow_provider_dj.engine.jobdir.summary import FINAL_STATUSES, read_job_summary
from airflow_provider_dj.engine.observe.events import read_events
from airflow_provider_dj.engine.observe.progress_log import partition_log_path, tail_lines
from airflow_provider_dj.engine.storage import fs as storage


class JobNotFoundError(LookupError):
    pass


def resolve_job_dir(job_id: str, work_dir: str | None = None) -> str:
    validate_job_id(job_id)
    looked = []
    for base, why in ((work_dir, "--work-dir"), (settings.get("work_dir"), "$DJ_WORK_DIR")):
        if base:
            cand = storage.join(base, job_id)
            if storage.exists(cand):
                return cand
            looked.append(f"{cand} ({why})")
    recorded = lookup_job(job_id)
    if recorded and storage.exists(recorded):
        return recorded
    looked.append(
        f"the recent-jobs registry {registry_path()}"
        + (f" (recorded {recorded}, which no longer exists)" if recorded else " (not recorded)")
    )
    raise JobNotFoundError(
        f"job {job_id!r} not found; looked in: {'; '.join(looked)}. Pass the recipe's "
        f"work_dir with --work-dir (or set DJ_WORK_DIR)"
    )


def job_status(job_dir: str, summary: dict | None = None, events: list[dict] | None = None) -> str:
    """completed | failed | stopped (from a summary newer than the last start),
    running (the runner lock is held and fresh), or interrupted (work started
    but nothing runs and no final summary: a killed run; resume it)."""
    summary = read_job_summary(job_dir) if summary is None else summary
    events = read_events(job_dir) if events is None else events
    starts = [e["timestamp"] for e in events if e.get("event_type") == "job_start"]
    last_start = starts[-1] if starts else 0.0
    if summary and summary.get("status") in FINAL_STATUSES and float(summary.get("end_time") or 0) >= last_start:
        return summary["status"]
    lock = job_lock.read_lock(job_dir)
    if lock and not job_lock.is_stale(lock)[0]:
        return "running"
    return "interrupted" if events else "planned"


class JobUtils:
    """Read-only access to one job: ``JobUtils(job_id).load_job_summary()``."""

    def __init__(self, job_id: str, work_dir: str | None = None, *, job_dir: str | None = None) -> None:
        self.job_id = job_id
        self.job_dir = job_dir or resolve_job_dir(job_id, work_dir)

    def load_job_summary(self) -> dict | None:
        """The written job_summary.json (None while a first run is still going)."""
        return read_job_summary(self.job_dir)

    def load_event_logs(self, event_type: str | None = None, since: float | None = None) -> list[dict]:
        """All events, merged across writer files, in time order."""
        return read_events(self.job_dir, event_type, since)

    def load_execution_plan(self) -> dict | None:
        try:
            return read_json(storage.join(self.job_dir, EXECUTION_PLAN))
        except (FileNotFoundError, ValueError):
            return None

    def load_partitioning_info(self) -> dict | None:
        try:
            return read_json(storage.join(self.job_dir, *PARTITIONING_INFO.split("/")))
        except (FileNotFoundError, ValueError):
            return None

    def partition_log(self, partition_id: int, lines: int = 20) -> list[str]:
        return tail_lines(partition_log_path(self.job_dir, partition_id), lines)

    def status(self) -> str:
        return job_status(self.job_dir)

    def progress(self) -> dict:
        from airflow_provider_dj.monitor.progress import job_progress

        return job_progress(self.job_dir)
