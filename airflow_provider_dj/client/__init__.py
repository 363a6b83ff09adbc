"""The Python client of running and finished jobs: stop one, list them, watch their progress, ask why
a row is not in the export.  Everything here works from any machine that sees the work dir.

    from airflow_provider_dj.client import explain, list_running_jobs, show_job_progress, stop_job
"""

from __future__ import annotations

from airflow_provider_dj.core.lazy import lazy_exports

__all__ = [
    "JobUtils",
    "explain",
    "job_progress",
    "list_running_jobs",
    "show_job_progress",
    "stop_job",
    "watch_job",
    "why_row",
]

_EXPORTS = {
    "stop_job": "airflow_provider_dj.client.control",
    "JobUtils": "airflow_provider_dj.client.monitor",
    "job_progress": "airflow_provider_dj.client.monitor",
    "list_running_jobs": "airflow_provider_dj.client.monitor",
    "show_job_progress": "airflow_provider_dj.client.monitor",
    "watch_job": "airflow_provider_dj.client.monitor",
    "explain": "airflow_provider_dj.engine.observe.why",
    "why_row": "airflow_provider_dj.engine.observe.why",
}


__getattr__ = lazy_exports(__name__, _EXPORTS)
