"""Stop requests as state in the job directory.

A stop is a file, ``{job}/control/stop_request.json``, not a signal: every
worker on every node reads the same job directory, so one write reaches all
of them, survives restarts, and leaves a record of who asked and when.
Workers call :func:`check_stop` at batch and op boundaries; it raises
:class:`StopRequested` after the caller has committed what it holds.

Who clears a request (a stopped job is resumed, not restarted):

* the ``validate`` task of any run that starts after the request (a new
  trigger with ``resume``, ``dj-airflow run --resume``, a clear of the whole
  DAG run) — :func:`clear_stop_request_before`;
* a task instance that was itself stopped by the request and is now run
  again by a UI clear (its try number went up) — :func:`handle_pending_stop`
  with the acknowledgement files under ``control/stopped/``.

Every other task that starts while a request is pending stops at once,
acknowledging the request first, so the siblings of a stopped task in the
same run stop too instead of doing work nobody asked for.
"""

from __future__ import annotations

import json
import re
import time
from datetime import datetime, timezone
from typing import Any

from airflow_provider_dj.core import fs as storage
from airflow_provider_dj.core.errors import DJError
from airflow_provider_dj.engine.jobdir.layout import STOP_REQUEST

STOP_FILE = tuple(STOP_REQUEST.split("/"))
ACK_DIR = ("control", "stopped")


class StopRequested(DJError):
    """A stop was requested for this job; committed work is kept.

    Not a failure: the operator turns it into a task that ends without a
    retry, and the job summary says ``stopped``.
    """

    def __init__(self, job_dir: str, request: dict, *, partition_ids: list[int] | None = None) -> None:
        super().__init__(f"stop requested for job dir {job_dir} ({request.get('requested_by', 'unknown')})")
        self.job_dir = job_dir
        self.request = request
        self.partition_ids = list(partition_ids or [])
        #: A dispatcher's stop: the results of the group's partitions that completed before it.
        self.completed: list[Any] = []

    def __reduce__(self):
        # Crosses process boundaries (Ray) intact, with its request.
        return (_rebuild_stop, (self.job_dir, self.request, self.partition_ids))

    @property
    def force(self) -> bool:
        return bool(self.request.get("force"))


def _rebuild_stop(job_dir: str, request: dict, partition_ids: list[int]) -> StopRequested:
    return StopRequested(job_dir, request, partition_ids=partition_ids)


def stop_path(job_dir: str) -> str:
    return storage.join(job_dir, *STOP_FILE)


def read_stop_request(job_dir: str) -> dict | None:
    """The pending stop request, or None."""
    path = stop_path(job_dir)
    if not storage.exists(path):
        return None
    try:
        return json.loads(storage.read_bytes(path))
    except FileNotFoundError:
        return None  # cleared between the two calls
    except (OSError, ValueError):
        # A half-visible file on an object store: treat it as a request anyway.
        return {"force": False, "requested_by": "unreadable request file"}


def request_stop(job_dir: str, *, force: bool = False, requested_by: str = "cli") -> dict:
    """Write (or replace) the job's stop request.  A later ``force`` upgrades a graceful one."""
    now = time.time()
    request = {
        "force": bool(force),
        "requested_by": requested_by,
        "requested_at": datetime.fromtimestamp(now, tz=timezone.utc).isoformat(),
        "requested_at_epoch": now,
    }
    storage.atomic_write_bytes(stop_path(job_dir), json.dumps(request, indent=2).encode())
    return request


def clear_stop_request(job_dir: str) -> bool:
    """Remove a stop request and its acknowledgements (a resume does this before it starts)."""
    path = stop_path(job_dir)
    ack_dir = storage.join(job_dir, *ACK_DIR)
    for name in storage.listdir(ack_dir):
        storage.remove(storage.join(ack_dir, name))
    if storage.exists(path):
        storage.remove(path)
        return True
    return False


def request_time(request: dict) -> float:
    """Epoch seconds of a request (0 when unknown: an unreadable or hand-written file)."""
    if isinstance(request.get("requested_at_epoch"), (int, float)):
        return float(request["requested_at_epoch"])
    try:
        return datetime.fromisoformat(str(request.get("requested_at"))).timestamp()
    except ValueError:
        return 0.0


def clear_stop_request_before(job_dir: str, started_at: float) -> dict | None:
    """Clear a request made before ``started_at`` (the start of a run's validate
    task); return it.  A request made after that belongs to this run: kept."""
    request = read_stop_request(job_dir)
    if request is None or request_time(request) >= started_at:
        return None
    clear_stop_request(job_dir)
    return request


def check_stop(job_dir: str) -> None:
    """Raise StopRequested when a stop is pending.  Call only at a committed boundary."""
    request = read_stop_request(job_dir)
    if request is not None:
        raise StopRequested(job_dir, request)


# -- acknowledgements: which task instances a request has stopped ------------

_UNSAFE = re.compile(r"[^A-Za-z0-9_.\-]+")


def _ack_path(job_dir: str, task_key: str) -> str:
    return storage.join(job_dir, *ACK_DIR, _UNSAFE.sub("_", task_key)[:200] + ".json")


def acknowledge_stop(job_dir: str, task_key: str, try_number: int | None, request: dict) -> None:
    """Record that ``task_key`` (one Airflow task instance) ended stopped at ``try_number``."""
    ack = {
        "task_key": task_key,
        "try_number": try_number,
        "stopped_at": time.time(),
        "request_requested_at": request.get("requested_at"),
    }
    storage.atomic_write_bytes(_ack_path(job_dir, task_key), json.dumps(ack).encode())


def stopped_at_earlier_try(job_dir: str, task_key: str, try_number: int | None) -> bool:
    """True when this task instance was stopped by the pending request at an earlier
    try: it is being run again on purpose (a UI clear), which means 'resume'."""
    try:
        ack = json.loads(storage.read_bytes(_ack_path(job_dir, task_key)))
    except (FileNotFoundError, ValueError):
        return False
    earlier = ack.get("try_number")
    return try_number is not None and isinstance(earlier, int) and earlier < try_number


def handle_pending_stop(job_dir: str, task_key: str, try_number: int | None) -> dict | None:
    """Called when a task starts.  No request: returns None.  A request that
    stopped this very task instance before (now cleared in the UI): the
    request is cleared and returned — the job resumes.  Any other pending
    request: acknowledged, then raised as StopRequested — nothing has run."""
    request = read_stop_request(job_dir)
    if request is None:
        return None
    if stopped_at_earlier_try(job_dir, task_key, try_number):
        clear_stop_request(job_dir)
        return request
    acknowledge_stop(job_dir, task_key, try_number, request)
    raise StopRequested(job_dir, request)
