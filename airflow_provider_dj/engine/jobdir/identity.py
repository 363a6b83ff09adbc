"""Job identity: what a job id may look like, and how one is made for a new job or an Airflow DAG run."""

from __future__ import annotations

import re
import secrets
from datetime import datetime, timezone

import xxhash

from airflow_provider_dj.core.errors import RefusedError

JOB_ID_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]{0,127}$")


class JobIdError(RefusedError, ValueError):
    pass


def validate_job_id(job_id: str, key: str = "job_id") -> str:
    """Job ids come from trigger conf: they must never escape work_dir."""
    if not isinstance(job_id, str) or not JOB_ID_RE.match(job_id) or ".." in job_id:
        raise JobIdError(
            f"{key} {job_id!r} is not a safe job id: use 1-128 characters of letters, digits, '_', '-', '.', "
            f"not starting with '.', without '..' or path separators"
        )
    return job_id


def new_job_id(now: datetime | None = None) -> str:
    now = now or datetime.now(timezone.utc)
    return f"{now:%Y%m%d_%H%M%S}_{secrets.token_hex(3)}"


def job_id_for_run(dag_id: str, run_id: str, when: datetime) -> str:
    """Deterministic id for an Airflow DAG run, so clearing the whole run resumes the same job."""
    digest = xxhash.xxh3_64_hexdigest(f"{dag_id}\x00{run_id}".encode())[:6]
    return f"{when.astimezone(timezone.utc):%Y%m%d_%H%M%S}_{digest}"


def resume_command(recipe_file: str | None, job_id: str) -> str:
    """The one command line that resumes a job, as every message, summary and log shows it."""
    return f"dj-airflow run {recipe_file or '<recipe>'} --resume {job_id}"
