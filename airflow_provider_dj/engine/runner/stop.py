"""The stop protocol around each step, and what a job's final failure leaves in its directory.

A stop is state in the job directory (engine/jobdir/stop_control.py).  Each
step runs inside :func:`stopping` (:func:`stoppable` for a step given as a callable): a request
pending when the step starts ends it before any work, unless this very step was stopped by it before and
is now run again (a resume); a ``StopRequested`` raised by the work is
acknowledged, the summary says ``stopped`` and the runner lock is released.
The caller turns :class:`JobStopped` into its own way of ending (an Airflow
task failing without retry, a CLI's exit code).
"""

from __future__ import annotations

import logging
from contextlib import contextmanager
from typing import Any, Callable, Iterator, TypeVar

from airflow_provider_dj.core import fs as storage
from airflow_provider_dj.core.errors import DJError
from airflow_provider_dj.engine.job.summary import read_job_summary, write_job_summary
from airflow_provider_dj.engine.jobdir import lock as job_lock
from airflow_provider_dj.engine.jobdir import stop_control
from airflow_provider_dj.engine.jobdir.events import EventLog
from airflow_provider_dj.engine.jobdir.identity import resume_command

log = logging.getLogger(__name__)

_T = TypeVar("_T")


class JobStopped(DJError, RuntimeError):
    """A step ended because a stop was requested: committed work is kept; resume to go on."""

    def __init__(self, message: str, request: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.request = dict(request or {})


@contextmanager
def stopping(
    job_dir: str,
    *,
    step_key: str,
    try_number: int | None = None,
    run_id: str | None = None,
    run_pid: int | None = None,
    event_defaults: dict[str, Any] | None = None,
    say: Callable[[str], None] = log.info,
    warn: Callable[[str], None] = log.warning,
) -> Iterator[None]:
    """The job's stop protocol around the body of the ``with``: a stop pending before it ends the step
    before any work, a ``StopRequested`` from it is recorded; either way :class:`JobStopped` is raised.

    ``step_key`` names this step across its tries (an Airflow task instance: dag.run.task.map_index).
    A context manager rather than a wrapper taking the step as a callable, so a job's call path from
    ``run_job`` to an op stays short and reads as the steps themselves (docs/architecture.md)."""
    try:
        cleared = stop_control.handle_pending_stop(job_dir, step_key, try_number)
    except stop_control.StopRequested as exc:
        raise record_stop(job_dir, exc, step_key, try_number, run_id, event_defaults, warn) from None
    if cleared is not None:
        note = job_lock.acquire(job_dir, job_lock.owner_identity(run_id, run_pid=run_pid))
        say(
            f"This task was stopped by the request of {cleared.get('requested_at')} and has been cleared: "
            f"resuming the job (stop request removed; runner lock {note})"
        )
        EventLog(job_dir, storage.basename(job_dir), defaults=event_defaults).emit(
            "stop_cleared", status="resumed", note=f"cleared by a re-run of {step_key}"
        )
    try:
        yield
    except stop_control.StopRequested as exc:
        raise record_stop(job_dir, exc, step_key, try_number, run_id, event_defaults, warn) from None


def stoppable(
    job_dir: str,
    body: Callable[[], _T],
    *,
    step_key: str,
    try_number: int | None = None,
    run_id: str | None = None,
    run_pid: int | None = None,
    event_defaults: dict[str, Any] | None = None,
    say: Callable[[str], None] = log.info,
    warn: Callable[[str], None] = log.warning,
) -> _T:
    """``body()`` under the job's stop protocol (:func:`stopping`); a stop raises :class:`JobStopped`."""
    with stopping(
        job_dir,
        step_key=step_key,
        try_number=try_number,
        run_id=run_id,
        run_pid=run_pid,
        event_defaults=event_defaults,
        say=say,
        warn=warn,
    ):
        return body()


def record_stop(
    job_dir: str,
    exc: stop_control.StopRequested,
    step_key: str,
    try_number: int | None,
    run_id: str | None,
    event_defaults: dict[str, Any] | None,
    warn: Callable[[str], None] = log.warning,
) -> JobStopped:
    """Record a stop (acknowledgement, ``stopped`` summary, lock released) and build the exception to raise."""
    request = getattr(exc, "request", {}) or {}
    stop_control.acknowledge_stop(job_dir, step_key, try_number, request)
    resume = ""
    try:
        summary = write_job_summary(job_dir, "stopped", event_defaults=event_defaults)
        resume = summary.get("resume_command") or ""
    except Exception as err:  # noqa: BLE001 - the stop itself must still end the step cleanly
        warn(f"could not write the stopped job summary: {err}")
    try:
        job_lock.release(job_dir, run_id)
    except Exception as err:  # noqa: BLE001 - a lock left behind goes stale; the stop must still end the step
        warn(f"could not release the runner lock: {err}")
    parts = getattr(exc, "partition_ids", None)
    msg = (
        f"STOPPED on request ({'force' if request.get('force') else 'graceful'}, by "
        f"{request.get('requested_by', 'unknown')} at {request.get('requested_at', '?')})"
        + (f"; partitions {parts} stopped" if parts else "")
        + ". Committed checkpoints are kept; this is not a data failure and is not retried. Resume with: "
        + (resume or resume_command(None, "<job id>"))
        + ', or trigger the DAG with conf {"resume": "<job id>"}, or clear this task in the UI.'
    )
    warn(msg)
    return JobStopped(msg, request)


def record_job_failure(
    job_dir: str,
    where: str,
    exc: BaseException | str | None,
    *,
    stopped: bool = False,
    event_defaults: dict[str, Any] | None = None,
) -> None:
    """The job's final failure: ``job_failed`` and a failed ``job_summary.json``; a job ending because of
    a stop (``stopped``, a :class:`JobStopped`, or a request still pending) is left ``stopped`` instead.
    ``exc``: what ended it, as the runner caught it or as Airflow's context holds it (an exception, or its
    text).  Never raises: it runs on the way out of a failure."""
    try:
        ended_by_stop = stopped or isinstance(exc, JobStopped) or stop_control.read_stop_request(job_dir) is not None
        if ended_by_stop:
            existing = read_job_summary(job_dir) or {}
            if existing.get("status") != "stopped":
                write_job_summary(
                    job_dir, "stopped", error=f"{where} stopped on request", event_defaults=event_defaults
                )
            return
        error = f"{where} failed: {type(exc).__name__}: {exc}" if exc is not None else f"{where} failed"
        write_job_summary(job_dir, "failed", error=error[:4000], event_defaults=event_defaults)
    except Exception as err:  # noqa: BLE001 - a failure handler must never raise
        log.warning("could not record the job failure in %s: %s", job_dir, err)
