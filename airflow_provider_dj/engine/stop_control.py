"""Stop requests as state in the job directory.

A stop is a file, ``{job}/control/stop_request.json``, not a signal: every
worker on every node reads the same job directory, so one write reaches all
of them, survives restarts, and leaves a record of who asked and when.
Workers call :func:`check_stop` at batch and op boundaries; it raises
:class:`StopRequested` after the caller has committed what it holds.

(Shared seam: the observability work owns the rest of this module.)
"""

from __future__ import annotations

import json
from datetime import datetime, timezone

from airflow_provider_dj.engine import storage

STOP_FILE = ("control", "stop_request.json")


class StopRequested(Exception):
    """A stop was requested for this job; committed work is kept.

    Not a failure: the operator turns it into a task that ends without a
    retry, and the job summary says ``stopped``.
    """

    def __init__(self, job_dir: str, request: dict) -> None:
        super().__init__(f"stop requested for job dir {job_dir} ({request.get('requested_by', 'unknown')})")
        self.job_dir = job_dir
        self.request = request


def stop_path(job_dir: str) -> str:
    return storage.join(job_dir, *STOP_FILE)


def read_stop_request(job_dir: str) -> dict | None:
    """The pending stop request, or None."""
    path = stop_path(job_dir)
    if not storage.exists(path):
        return None
    try:
        return json.loads(storage.read_bytes(path))
    except (OSError, ValueError):
        # A half-visible file on an object store: treat it as a request anyway.
        return {"force": False, "requested_by": "unreadable request file"}


def request_stop(job_dir: str, *, force: bool = False, requested_by: str = "cli") -> dict:
    request = {
        "force": bool(force),
        "requested_by": requested_by,
        "requested_at": datetime.now(timezone.utc).isoformat(),
    }
    storage.atomic_write_bytes(stop_path(job_dir), json.dumps(request, indent=2).encode())
    return request


def clear_stop_request(job_dir: str) -> bool:
    """Remove a stop request (a resume does this before it starts)."""
    path = stop_path(job_dir)
    if storage.exists(path):
        storage.remove(path)
        return True
    return False


def check_stop(job_dir: str) -> None:
    """Raise StopRequested when a stop is pending.  Call only at a committed boundary."""
    request = read_stop_request(job_dir)
    if request is not None:
        raise StopRequested(job_dir, request)
