"""Small helpers shared by the operators: Airflow context -> engine arguments."""

from __future__ import annotations

from typing import Any, Callable

from airflow_provider_dj.hooks.host_services import install_airflow_host


def event_defaults(context: Any) -> dict:
    """Fields every event written on behalf of this task instance carries."""
    ti = context.get("ti") or context.get("task_instance")
    out: dict = {}
    if ti is not None:
        out.update(
            {
                "airflow_dag_id": getattr(ti, "dag_id", None),
                "airflow_run_id": getattr(ti, "run_id", None),
                "airflow_task_id": getattr(ti, "task_id", None),
                "airflow_map_index": getattr(ti, "map_index", None),
                "try_number": getattr(ti, "try_number", None),
            }
        )
    return {k: v for k, v in out.items() if v is not None}


def try_number(context: Any) -> int | None:
    ti = context.get("ti") or context.get("task_instance")
    return getattr(ti, "try_number", None)


def release_lock_on_failure(context: Any) -> None:
    """Task ``on_failure_callback`` (final failure only, not retries): the run is
    failing, so it no longer holds the job — a new run may resume it at once."""
    from airflow_provider_dj.engine.jobdir import lock as job_lock

    ti = context.get("ti") or context.get("task_instance")
    dag_run = context.get("dag_run")
    try:
        job_dir = ti.xcom_pull(task_ids="validate", key="job_dir") if ti is not None else None
    except Exception:  # noqa: BLE001 - a callback must never raise
        job_dir = None
    if job_dir and dag_run is not None:
        try:
            job_lock.release(job_dir, dag_run.run_id)
        except Exception:  # noqa: BLE001
            pass
    if job_dir:
        record_final_failure(context, job_dir)


def record_final_failure(context: Any, job_dir: str) -> None:
    """Emit ``job_failed`` and write the failed ``job_summary.json`` (final failure of
    any task of the run).  A task that ended because of a stop request leaves the
    job ``stopped`` instead (its operator wrote that summary).  Never raises."""
    import logging

    log = logging.getLogger(__name__)
    try:
        from airflow_provider_dj.engine.job.summary import read_job_summary, write_job_summary
        from airflow_provider_dj.engine.jobdir import stop_control

        exc = context.get("exception")
        ti = context.get("ti") or context.get("task_instance")
        where = f"task {getattr(ti, 'task_id', '?')}" + (
            f" (map index {ti.map_index})" if getattr(ti, "map_index", -1) not in (-1, None) else ""
        )
        stopping = isinstance(exc, JobStoppedError) or stop_control.read_stop_request(job_dir) is not None
        if stopping:
            existing = read_job_summary(job_dir) or {}
            if existing.get("status") != "stopped":
                write_job_summary(
                    job_dir, "stopped", error=f"{where} stopped on request", event_defaults=event_defaults(context)
                )
            return
        error = f"{where} failed: {type(exc).__name__}: {exc}" if exc is not None else f"{where} failed"
        write_job_summary(job_dir, "failed", error=error[:4000], event_defaults=event_defaults(context))
    except Exception as err:  # noqa: BLE001 - a callback must never raise
        log.warning("could not record the job failure in %s: %s", job_dir, err)


# -- stop requests (engine.jobdir.stop_control) -----------------------------------------

try:  # Airflow 3 task SDK; the engine never imports this module
    from airflow.sdk.exceptions import AirflowFailException
except ImportError:  # pragma: no cover
    from airflow.exceptions import AirflowFailException  # type: ignore[no-redef]


class JobStoppedError(AirflowFailException):
    """The task ended because a stop was requested: not a crash, never retried.

    An AirflowFailException on purpose: the task is *failed without retry*,
    so the DAG run ends failed — not success, which a skip would give, and
    which would be a lie about a job that has not exported — and the export
    (trigger rule none_failed) never runs.  The job summary says
    ``stopped``; clearing the task or re-triggering with ``resume`` resumes.
    """


def fail_fast_on_guard(body: Callable[[], Any]) -> Any:
    """Run ``body``; a failure-rate guard trip fails the task *without retry*.

    A retry would re-run the same op on the same rows and trip the same guard,
    costing the whole op again before the job stops anyway.  The message is
    the guard's (op, partition, count, reasons, what to raise and resume).
    """
    from airflow_provider_dj.engine.execution.failure_guard import FailureRateExceededError
    from airflow_provider_dj.engine.execution.ray_dispatch import PartitionFailedError

    try:
        return body()
    except FailureRateExceededError as exc:
        raise AirflowFailException(str(exc)) from exc
    except PartitionFailedError as exc:
        if isinstance(exc.cause, FailureRateExceededError):
            raise AirflowFailException(str(exc)) from exc
        raise


def task_key(context: Any) -> str:
    """One Airflow task instance, across its tries: dag.run.task.map_index."""
    ti = context.get("ti") or context.get("task_instance")
    return ".".join(str(getattr(ti, k, None)) for k in ("dag_id", "run_id", "task_id", "map_index"))


def _stopped(operator: Any, context: Any, job_dir: str, exc: Exception) -> JobStoppedError:
    """Record the stop (acknowledgement, summary, lock) and build the task's exception."""
    from airflow_provider_dj.engine.jobdir import lock as job_lock
    from airflow_provider_dj.engine.jobdir import stop_control

    request = getattr(exc, "request", {}) or {}
    stop_control.acknowledge_stop(job_dir, task_key(context), try_number(context), request)
    resume = ""
    try:
        from airflow_provider_dj.engine.job.summary import write_job_summary

        summary = write_job_summary(job_dir, "stopped", event_defaults=event_defaults(context))
        resume = summary.get("resume_command") or ""
    except Exception as err:  # noqa: BLE001 - the stop itself must still end the task cleanly
        operator.log.warning("could not write the stopped job summary: %s", err)
    dag_run = context.get("dag_run")
    try:
        job_lock.release(job_dir, getattr(dag_run, "run_id", None))
    except Exception as err:  # noqa: BLE001
        operator.log.warning("could not release the runner lock: %s", err)
    parts = getattr(exc, "partition_ids", None)
    msg = (
        f"STOPPED on request ({'force' if request.get('force') else 'graceful'}, by "
        f"{request.get('requested_by', 'unknown')} at {request.get('requested_at', '?')})"
        + (f"; partitions {parts} stopped" if parts else "")
        + ". Committed checkpoints are kept; this is not a data failure and is not retried. Resume with: "
        + (resume or "dj-airflow run <recipe> --resume <job id>")
        + ', or trigger the DAG with conf {"resume": "<job id>"}, or clear this task in the UI.'
    )
    operator.log.warning("%s", msg)
    return JobStoppedError(msg)


def run_stoppable(operator: Any, context: Any, job_dir: str, body: Callable[[], Any]) -> Any:
    """Run ``body`` under the job's stop protocol.

    A request pending when the task starts stops it before any work, unless
    this very task instance was stopped by it before and has been cleared
    in the UI since (a resume: the request is cleared and the runner lock
    taken again).  A StopRequested raised by the work becomes JobStoppedError.
    """
    from airflow_provider_dj.engine.jobdir import lock as job_lock
    from airflow_provider_dj.engine.jobdir import stop_control
    from airflow_provider_dj.operators.local_run import owner_pid

    try:
        cleared = stop_control.handle_pending_stop(job_dir, task_key(context), try_number(context))
    except stop_control.StopRequested as exc:
        raise _stopped(operator, context, job_dir, exc) from None
    if cleared is not None:
        run_id = getattr(context.get("dag_run"), "run_id", None)
        operator.log.info(
            "This task was stopped by the request of %s and has been cleared: resuming the job "
            "(stop request removed; runner lock %s)",
            cleared.get("requested_at"),
            job_lock.acquire(
                job_dir, job_lock.owner_identity(run_id, run_pid=owner_pid(getattr(operator, "local_run", None)))
            ),
        )
        from airflow_provider_dj.engine.jobdir.events import EventLog

        EventLog(job_dir, storage_basename(job_dir), defaults=event_defaults(context)).emit(
            "stop_cleared", status="resumed", note=f"cleared by a re-run of {task_key(context)}"
        )
    try:
        return body()
    except stop_control.StopRequested as exc:
        raise _stopped(operator, context, job_dir, exc) from None


def storage_basename(job_dir: str) -> str:
    from airflow_provider_dj.core import fs as storage

    return storage.basename(job_dir)


# The engine reads connections and masks secrets through core/host.py; in a task process the
# operators install Airflow's implementation as soon as they are imported.
install_airflow_host()
