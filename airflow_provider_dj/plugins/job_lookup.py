"""From an Airflow DAG run to its job directory, and from a job to its DAG.

The ``validate`` task pushes the job directory as XCom ``job_dir`` (and the
id as ``job_id``): that is the exact answer, read from Airflow's metadata DB
(read-only, in the api-server's own session).  Clearing a partition task
does not clear ``validate``, so the XCom stays; when it is gone (the whole
run cleared and not yet re-validated, or an XCom backend elsewhere), the
recent-jobs registry and ``DJ_WORK_DIR`` are searched for a job whose
``job_start`` event names this DAG run.

A job's DAG, for the auth check of the job-id pages, is the
``airflow_dag_id`` its events carry.
"""

from __future__ import annotations

from airflow_provider_dj import settings
from airflow_provider_dj.core import fs as storage
from airflow_provider_dj.engine.job.status import JobNotFoundError, resolve_job_dir
from airflow_provider_dj.engine.jobdir.events import read_events
from airflow_provider_dj.engine.jobdir.identity import validate_job_id
from airflow_provider_dj.engine.jobdir.registry import recent_jobs

VALIDATE_TASK_ID = "validate"


def _xcom_job_dir(dag_id: str, run_id: str) -> str | None:
    try:
        from airflow.models.xcom import XComModel
        from airflow.utils.session import create_session
        from sqlalchemy import select

        with create_session() as session:
            row = session.scalars(
                select(XComModel).where(
                    XComModel.dag_id == dag_id,
                    XComModel.run_id == run_id,
                    XComModel.task_id == VALIDATE_TASK_ID,
                    XComModel.key == "job_dir",
                )
            ).first()
            value = XComModel.deserialize_value(row) if row is not None else None
    except Exception:  # noqa: BLE001 - no metadata DB here (unit tests, a CLI): fall back to the registry
        return None
    return value if isinstance(value, str) and value else None


def _candidate_dirs() -> list[str]:
    dirs = [e["job_dir"] for e in reversed(list(recent_jobs().values())) if e.get("job_dir")]
    base = settings.get("work_dir")
    if base and storage.exists(base):
        dirs += [storage.join(base, n) for n in sorted(storage.listdir(base), reverse=True)]
    return list(dict.fromkeys(dirs))


_DAG_OF_JOB: dict[str, str] = {}


def job_dag_id(job_dir: str) -> str | None:
    """The DAG a job belongs to (for the auth check), remembered per job directory once known:
    a job's DAG does not change, and reading a 1,000-partition job's events costs ~0.2 s."""
    if job_dir not in _DAG_OF_JOB:
        dag_id, _ = job_airflow_ids(job_dir)
        if dag_id is None:
            return None
        if len(_DAG_OF_JOB) > 1000:
            _DAG_OF_JOB.clear()
        _DAG_OF_JOB[job_dir] = dag_id
    return _DAG_OF_JOB[job_dir]


def job_airflow_ids(job_dir: str) -> tuple[str | None, list[str]]:
    """(DAG id, run ids) the job's ``job_start`` events name (a resumed job may span several runs)."""
    dag_id, runs = None, []
    for e in read_events(job_dir, "job_start"):
        dag_id = e.get("airflow_dag_id") or dag_id
        if e.get("airflow_run_id"):
            runs.append(e["airflow_run_id"])
    return dag_id, runs


def find_job_for_run(dag_id: str, run_id: str) -> tuple[str, str] | None:
    """(job directory, how it was found: "xcom" or "events") of this DAG run, or None when its
    validate task has not run yet."""
    found = _xcom_job_dir(dag_id, run_id)
    if found and storage.exists(found):
        return found, "xcom"
    for d in _candidate_dirs():
        if not storage.exists(d):
            continue
        d_dag, d_runs = job_airflow_ids(d)
        if d_dag == dag_id and run_id in d_runs:
            return d, "events"
    return None


def find_job(job_id: str) -> str:
    """The job directory of a job id (validated first: it must never escape the work dir)."""
    validate_job_id(job_id)
    return resolve_job_dir(job_id)


def recent_job_list(limit: int = 50) -> list[dict]:
    """Recent jobs on this deployment, newest first: id, dir, DAG, last run."""
    out = []
    for d in _candidate_dirs()[: limit * 2]:
        if not storage.exists(d):
            continue
        dag_id, runs = job_airflow_ids(d)
        if not runs and dag_id is None:
            continue
        out.append(
            {"job_id": storage.basename(d), "job_dir": d, "dag_id": dag_id, "run_id": runs[-1] if runs else None}
        )
        if len(out) >= limit:
            break
    return out


__all__ = ["JobNotFoundError", "find_job", "find_job_for_run", "job_airflow_ids", "job_dag_id", "recent_job_list"]
