"""Job identity and the job directory's well-known files.

Everything a task needs is in the job directory, so any task on any node
can reconstruct the job from ``(work_dir, job_id)`` alone: XComs are lost
on a UI clear, the job directory is not.
"""

from __future__ import annotations

import json
import re
import secrets
from dataclasses import dataclass
from datetime import datetime, timezone
from functools import cached_property

import xxhash

from airflow_provider_dj.engine.storage import fs as storage

JOB_ID_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]{0,127}$")

EFFECTIVE_CONFIG = "metadata/effective_config.json"
PARTITIONING_INFO = "checkpoints/partitioning_info.json"
EXECUTION_PLAN = "dag_execution_plan.json"
JOB_SUMMARY = "job_summary.json"
#: The failure-rate guard's limits, rewritten by every validate (a resume may raise them).
FAILURE_GUARD = "metadata/failure_guard.json"
FAILED_DIR = "failed"


class JobIdError(ValueError):
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


@dataclass
class JobPaths:
    work_dir: str
    job_id: str

    @property
    def job_dir(self) -> str:
        return storage.join(self.work_dir, self.job_id)

    def path(self, rel: str) -> str:
        return storage.join(self.job_dir, *rel.split("/"))


def write_json(path: str, obj) -> None:
    storage.atomic_write_bytes(path, json.dumps(obj, indent=2, default=str, ensure_ascii=False).encode())


def read_json(path: str):
    return json.loads(storage.read_bytes(path))


class JobContext:
    """Lazy view of one job's durable state, as any task sees it."""

    def __init__(self, job_dir: str) -> None:
        self.job_dir = job_dir

    def path(self, rel: str) -> str:
        return storage.join(self.job_dir, *rel.split("/"))

    @cached_property
    def effective_config(self) -> dict:
        return read_json(self.path(EFFECTIVE_CONFIG))

    @cached_property
    def recipe(self):
        from airflow_provider_dj.engine.config.recipe import recipe_from_dict

        return recipe_from_dict(self.effective_config)

    @cached_property
    def job_id(self) -> str:
        return self.effective_config.get("job_id") or storage.basename(self.job_dir)

    @cached_property
    def partitioning_info(self) -> dict:
        return read_json(self.path(PARTITIONING_INFO))

    @cached_property
    def plan(self):
        from airflow_provider_dj.engine.planning.plan import build_plan

        return build_plan(self.recipe)

    @cached_property
    def storage_format(self):
        from airflow_provider_dj.engine.storage.checkpoints import StorageFormat

        st = self.recipe.intermediate_storage
        return StorageFormat(st.format, st.compression)

    def partition(self, partition_id: int) -> dict:
        parts = self.partitioning_info["partitions"]
        if not 0 <= partition_id < len(parts):
            raise IndexError(f"partition {partition_id} does not exist (job has {len(parts)})")
        return parts[partition_id]
