"""Small helpers shared by the operators: Airflow context -> engine arguments."""

from __future__ import annotations

from typing import Any


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
    from airflow_provider_dj.engine import job_lock

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
