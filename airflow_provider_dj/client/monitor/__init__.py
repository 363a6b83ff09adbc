"""Monitoring of jobs from their job directories: ``dj-airflow monitor`` and a Python API.

Everything here only reads the job directory (summary, events, checkpoint
markers, logs, lock), so it works for a job that runs, failed, was stopped
or finished, from any machine that sees the work dir.
"""

from __future__ import annotations

from airflow_provider_dj.client.monitor.job_utils import JobNotFoundError, JobUtils
from airflow_provider_dj.client.monitor.progress import job_progress, list_running_jobs, show_job_progress, watch_job

__all__ = ["JobNotFoundError", "JobUtils", "job_progress", "list_running_jobs", "show_job_progress", "watch_job"]
