"""DJBaseOperator: what every operator of a recipe DAG shares when it turns Airflow's context into one engine call.

Airflow's side of each step: the task instance's identity for events and
the stop protocol, the task's try number, Airflow's way of failing without
retry, and Airflow's connections and secret masker installed as the
engine's host (``core/host.py``) before the task runs.  Importing this module
has no side effect.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Iterator

from airflow.sdk import BaseOperator

from airflow_provider_dj.engine.runner.stop import JobStopped, record_job_failure, stopping
from airflow_provider_dj.operators.openlineage import OpenLineageMixin

if TYPE_CHECKING:
    from airflow.sdk import Context

try:  # Airflow 3 task SDK
    from airflow.sdk.exceptions import AirflowFailException
except ImportError:  # pragma: no cover - older task SDKs
    from airflow.exceptions import AirflowFailException  # type: ignore[no-redef]


class JobStoppedError(AirflowFailException):
    """The task ended because a stop was requested: not a crash, never retried.

    An AirflowFailException on purpose: the task is *failed without retry*,
    so the DAG run ends failed — not success, which a skip would give, and
    which would be a lie about a job that has not exported — and the export
    (trigger rule none_failed) never runs.  The job summary says
    ``stopped``; clearing the task or re-triggering with ``resume`` resumes.
    """


def _ti(context: Context) -> Any:
    return context.get("ti") or context.get("task_instance")


def event_defaults(context: Context) -> dict:
    """Fields every event written on behalf of this task instance carries."""
    ti = _ti(context)
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


def try_number(context: Context) -> int | None:
    return getattr(_ti(context), "try_number", None)


def task_key(context: Context) -> str:
    """One Airflow task instance, across its tries: dag.run.task.map_index."""
    ti = _ti(context)
    return ".".join(str(getattr(ti, k, None)) for k in ("dag_id", "run_id", "task_id", "map_index"))


def run_id_of(context: Context) -> str | None:
    return getattr(context.get("dag_run"), "run_id", None)


@contextmanager
def guard_fails_fast() -> Iterator[None]:
    """A failure-rate guard trip inside the ``with`` fails the task *without retry*.

    A retry would re-run the same op on the same rows and trip the same guard,
    costing the whole op again before the job stops anyway.  The message is
    the guard's (op, partition, count, reasons, what to raise and resume).
    """
    from airflow_provider_dj.engine.execution.failure_guard import FailureRateExceededError
    from airflow_provider_dj.engine.execution.ray_dispatch import PartitionFailedError

    try:
        yield
    except FailureRateExceededError as exc:
        raise AirflowFailException(str(exc)) from exc
    except PartitionFailedError as exc:
        if isinstance(exc.cause, FailureRateExceededError):
            raise AirflowFailException(str(exc)) from exc
        raise


def release_lock_on_failure(context: Context) -> None:
    """Task ``on_failure_callback`` (final failure only, not retries): the run is failing, so it no
    longer holds the job — a new run may resume it at once — and the job records its failure."""
    from airflow_provider_dj.engine.jobdir import lock as job_lock

    ti = _ti(context)
    try:
        job_dir = ti.xcom_pull(task_ids="validate", key="job_dir") if ti is not None else None
    except Exception:  # noqa: BLE001 - a callback must never raise
        job_dir = None
    if not job_dir:
        return
    try:
        job_lock.release(job_dir, run_id_of(context))
    except Exception:  # noqa: BLE001 - a callback must never raise; a lock left behind goes stale
        pass
    exc = context.get("exception")
    where = f"task {getattr(ti, 'task_id', '?')}" + (
        f" (map index {ti.map_index})" if getattr(ti, "map_index", -1) not in (-1, None) else ""
    )
    record_job_failure(
        job_dir, where, exc, stopped=isinstance(exc, JobStoppedError), event_defaults=event_defaults(context)
    )


class DJBaseOperator(OpenLineageMixin, BaseOperator):
    """The base of the provider's operators: Airflow context in, one engine step, Airflow's outcome out.

    With Airflow's OpenLineage provider installed and enabled, an operator whose class sets
    ``lineage_step`` reports its datasets and its job to it (``operators/openlineage.py``).

    :param kwargs: Airflow's own operator arguments (``task_id``, ``retries``, ``pool``, ...), passed
        to ``BaseOperator`` unchanged; each subclass documents the arguments it adds.
    """

    def __init__(self, **kwargs: Any) -> None:
        # Declared so that Airflow's operator metaclass sees a signature of our own.  Without it the
        # metaclass wraps the inherited BaseOperator.__init__ (the mixin comes first in the bases), and
        # ``.partial()`` (Airflow >= 3.3.2) takes that wrapper's raw defaults (``inlets=None``,
        # ``outlets=None``, callbacks None) in place of Airflow's operator defaults, which a mapped
        # task's start-up cannot iterate.
        super().__init__(**kwargs)

    def pre_execute(self, context: Context) -> None:
        """Airflow's connections and secret masker become the engine's host for this task."""
        from airflow_provider_dj.hooks.host_services import install_airflow_host

        install_airflow_host()
        super().pre_execute(context)

    @contextmanager
    def stop_protocol(self, context: Context, job_dir: str) -> Iterator[None]:
        """The job's stop protocol around the ``with`` (engine/runner/stop.py ``stopping``); a stop fails
        the task without retry (JobStoppedError)."""
        from airflow_provider_dj.operators.local_run import owner_pid

        try:
            with stopping(
                job_dir,
                step_key=task_key(context),
                try_number=try_number(context),
                run_id=run_id_of(context),
                run_pid=owner_pid(getattr(self, "local_run", None)),
                event_defaults=event_defaults(context),
                say=lambda m: self.log.info("%s", m),
                warn=lambda m: self.log.warning("%s", m),
            ):
                yield
        except JobStopped as exc:
            raise JobStoppedError(str(exc)) from None
