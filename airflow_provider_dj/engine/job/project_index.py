"""The latest completed job of each project in a work dir, so a job finds its predecessor in one read.

The review gate compares a job's funnel with the previous successful job of the same recipe
(``project_name``) in the same work dir.  A nightly work dir holds a job a night, and each summary
lists every partition, so reading them all on every review grows without bound.  When a job's
summary says ``completed``, its job id and end time are written to the project's pointer file
(``jobdir/layout.latest_completed_file``); the reader trusts the pointer only when the job it names
still has a completed summary of that project, and otherwise scans the work dir as before (work
dirs written before the pointer, a job removed by ``dj-airflow gc``).

Two jobs of one project completing at the same instant may both write the pointer; the one with
the later end time is meant to win, and a lost race leaves the pointer naming the other completed
job (still a completed job of the project), never a wrong or half-written file (atomic writes).
"""

from __future__ import annotations

import json
import logging

from airflow_provider_dj.core import fs as storage
from airflow_provider_dj.engine.jobdir.layout import latest_completed_file, write_json

log = logging.getLogger(__name__)


def record_completed(job_dir: str, summary: dict) -> None:
    """Point the project's pointer at this completed job unless it names a job that ended later.
    Never raises: the pointer is an index, the summaries are the truth."""
    project = summary.get("project_name")
    if summary.get("status") != "completed" or not project:
        return
    try:
        path = latest_completed_file(storage.dirname(job_dir), project)
        current = _read(path)
        end = float(summary.get("end_time") or 0)
        if current and float(current.get("end_time") or 0) > end:
            return
        job_id = summary.get("job_id") or storage.basename(job_dir)
        write_json(path, {"project_name": project, "job_id": job_id, "end_time": end})
    except Exception as exc:  # noqa: BLE001 - the scan still finds the job
        log.warning("could not record %s as the latest completed job of %s: %s", job_dir, project, exc)


def latest_completed(work_dir: str, project_name: str) -> str | None:
    """The job id the project's pointer names, or None when there is no readable pointer."""
    pointer = _read(latest_completed_file(work_dir, project_name))
    if not pointer or pointer.get("project_name") != project_name:
        return None
    job_id = pointer.get("job_id")
    return job_id if isinstance(job_id, str) and job_id else None


def _read(path: str) -> dict | None:
    try:
        data = json.loads(storage.read_bytes(path))
    except (FileNotFoundError, OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None
