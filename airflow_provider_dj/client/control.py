"""Python API to stop jobs and list the running ones (``dj-airflow stop`` / ``jobs``).

Why a module of its own, above the engine: it is what a notebook, a
script or the CLI calls, and it only reads and writes the job directory —
the same state the workers read — so it works from any machine that sees
the work dir, without Airflow's API or the Ray cluster (Ray Jobs mode's
stop also asks the Ray dashboard, and still works when it does not answer).

    from airflow_provider_dj.client.control import stop_job, list_jobs
    stop_job("20250101_120000_ab12cd", work_dir="/data/work")            # graceful, waits up to 60 s
    stop_job("20250101_120000_ab12cd", force=True, work_dir="/data/work")  # cancel the Ray work now

In Ray Jobs mode a forced stop also reaches the groups' Ray Jobs through
the dashboard their records name (``StopResult.ray_jobs`` says how each went).

A job is found by ``work_dir/job_id``; without a work dir, in the
recent-jobs registry (``engine.jobdir.registry``) and then under
``$DJ_WORK_DIR`` (default ``.``).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

from airflow_provider_dj.core import fs as storage
from airflow_provider_dj.engine.job.status import (  # noqa: F401 - the public API, re-exported
    RUNNING_STATES,
    JobNotFoundError,
    job_status,
    list_jobs,
    resolve_job_dir,
)
from airflow_provider_dj.engine.job.status import (
    live_lock as _live_lock,
)
from airflow_provider_dj.engine.job.summary import read_job_summary
from airflow_provider_dj.engine.jobdir import stop_control
from airflow_provider_dj.engine.jobdir.layout import JOB_SUMMARY


@dataclass
class StopResult:
    job_id: str
    job_dir: str
    state: str  # stopped | completed | not_running | stop_pending
    message: str
    request: dict | None = None
    waited_s: float = 0.0
    summary: dict | None = field(default=None, repr=False)
    #: Ray Jobs mode: what the stop did to each group's running Ray Job (``hooks.ray_jobs_stop.RayJobStop``).
    ray_jobs: list[dict] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k != "summary"}


def stop_job(
    job_id: str,
    force: bool = False,
    timeout: float = 60,
    *,
    work_dir: str | None = None,
    requested_by: str | None = None,
    poll_s: float = 0.5,
    ray_address: str | None = None,
) -> StopResult:
    """Ask a job to stop, and wait up to ``timeout`` seconds until it has.

    Graceful: workers finish the op or batch they are in, commit it, and
    end; the summary says ``stopped``.  ``force``: in-flight Ray tasks are
    cancelled at once (their uncommitted batch is lost; committed ones are
    kept).  ``timeout=0`` only writes the request.  A completed job is left
    alone.  Resume with ``dj-airflow run RECIPE --resume JOB_ID`` (or
    trigger the DAG with ``{"resume": JOB_ID}``, or clear the stopped tasks).

    Ray Jobs mode, with ``force``: after the request is written, each group
    whose record says its Ray Job runs is stopped through Ray's dashboard
    too (at the address its record names, or ``ray_address``), so a driver
    stuck inside an op ends as well; ``ray_jobs`` says what happened to
    each, and a dashboard that does not answer leaves the request in place
    for the drivers to read.  The ``stop_requested`` event lists them.  A
    graceful stop asks nothing of Ray: the drivers read the request.
    """
    job_dir = resolve_job_dir(job_id, work_dir)
    summary = read_job_summary(job_dir)
    if summary and summary.get("status") == "completed":
        return StopResult(
            job_id, job_dir, "completed", f"job {job_id} already completed; nothing to stop", summary=summary
        )
    who = requested_by or f"stop_job (pid {os.getpid()})"
    running = _live_lock(job_dir) is not None
    request = stop_control.request_stop(job_dir, force=force, requested_by=who)
    # Graceful: the drivers read the request and stop at their next committed boundary, in every
    # mode.  Force: in Ray Jobs mode Ray ends each running group's driver now (a hung op included).
    ray_stops = _stop_ray_jobs(job_dir, ray_address) if force else []
    from airflow_provider_dj.engine.jobdir.events import EventLog

    EventLog(job_dir, job_id).emit(
        "stop_requested", status="requested", force=bool(force), requested_by=who, ray_jobs=ray_stops or None
    )
    if not running:
        res = StopResult(
            job_id,
            job_dir,
            "not_running",
            f"job {job_id} has no live runner: the request is recorded; a worker still running "
            f"stops at its next boundary, and the next resume clears it",
            request,
        )
    else:
        res = _wait_for_stop(job_id, job_dir, request, timeout=timeout, poll_s=poll_s)
    res.ray_jobs = ray_stops
    return res


def _stop_ray_jobs(job_dir: str, address: str | None) -> list[dict]:
    """Ray Jobs mode: stop the groups' running Ray Jobs (``hooks.ray_jobs_stop.stop_running_groups``); [] when
    no record says one runs, without importing the Ray client."""
    from airflow_provider_dj.engine.jobdir import ray_jobs

    if not ray_jobs.running_submissions(job_dir):
        return []
    from airflow_provider_dj.hooks.ray_jobs_stop import stop_running_groups

    return [s.to_dict() for s in stop_running_groups(job_dir, address=address)]


def _wait_for_stop(job_id: str, job_dir: str, request: dict, *, timeout: float, poll_s: float) -> StopResult:
    """Poll the job every ``poll_s`` seconds until it completed, stopped after ``request``, lost its
    runner, or ``timeout`` seconds passed (``stop_pending``); return how it ended."""
    t0 = time.time()
    since = stop_control.request_time(request)
    while True:
        summary = read_job_summary(job_dir) or {}
        status = summary.get("status")
        if status == "completed":
            return StopResult(
                job_id,
                job_dir,
                "completed",
                f"job {job_id} completed before the stop took effect",
                request,
                time.time() - t0,
                summary,
            )
        if status == "stopped" and float(summary.get("end_time") or 0) >= since:
            return StopResult(
                job_id,
                job_dir,
                "stopped",
                f"job {job_id} stopped; committed work kept. Resume with: {summary.get('resume_command')}",
                request,
                time.time() - t0,
                summary,
            )
        if _live_lock(job_dir) is None:
            return StopResult(
                job_id,
                job_dir,
                "stopped",
                f"job {job_id} no longer has a runner (stopped or failed); see {storage.join(job_dir, JOB_SUMMARY)}",
                request,
                time.time() - t0,
                summary or None,
            )
        if time.time() - t0 >= timeout:
            return StopResult(
                job_id,
                job_dir,
                "stop_pending",
                f"job {job_id} has not stopped within {timeout:g}s; "
                f"workers stop at their next committed boundary (use force=True to cancel now)",
                request,
                time.time() - t0,
            )
        time.sleep(poll_s)
