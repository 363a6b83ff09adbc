"""``JobUtils``: find a job by id and read what its directory holds.

Why lookup order is work dir first, then the registry: a work dir given on
the command line (or ``DJ_WORK_DIR``) is what the user means; the registry
of recent jobs on this machine only helps when they do not remember it.
"""

from __future__ import annotations

from airflow_provider_dj.core import fs as storage
from airflow_provider_dj.engine.job.status import JobNotFoundError, job_status, resolve_job_dir  # noqa: F401 - re-exported
from airflow_provider_dj.engine.job.summary import read_job_summary
from airflow_provider_dj.engine.jobdir.events import read_events
from airflow_provider_dj.engine.jobdir.layout import EXECUTION_PLAN, PARTITIONING_INFO, read_json
from airflow_provider_dj.engine.jobdir.progress_log import partition_log_path, tail_lines


class JobUtils:
    """Read-only access to one job: ``JobUtils(job_id).load_job_summary()``."""

    def __init__(self, job_id: str, work_dir: str | None = None, *, job_dir: str | None = None) -> None:
        self.job_id = job_id
        self.job_dir = job_dir or resolve_job_dir(job_id, work_dir)

    def load_job_summary(self) -> dict | None:
        """The written job_summary.json (None while a first run is still going)."""
        return read_job_summary(self.job_dir)

    def load_event_logs(self, event_type: str | None = None, since: float | None = None) -> list[dict]:
        """All events, merged across writer files, in time order."""
        return read_events(self.job_dir, event_type, since)

    def load_execution_plan(self) -> dict | None:
        try:
            return read_json(storage.join(self.job_dir, EXECUTION_PLAN))
        except (FileNotFoundError, ValueError):
            return None

    def load_partitioning_info(self) -> dict | None:
        try:
            return read_json(storage.join(self.job_dir, *PARTITIONING_INFO.split("/")))
        except (FileNotFoundError, ValueError):
            return None

    def partition_log(self, partition_id: int, lines: int = 20) -> list[str]:
        return tail_lines(partition_log_path(self.job_dir, partition_id), lines)

    def status(self) -> str:
        return job_status(self.job_dir, with_progress=False)["status"]

    def progress(self) -> dict:
        from airflow_provider_dj.client.monitor.progress import job_progress

        return job_progress(self.job_dir)
