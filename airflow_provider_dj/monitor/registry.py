"""The recent-jobs registry, as the monitor sees it (implemented in engine.jobdir.registry,
which the runner writes; re-exported here so monitor code has one import place)."""

from __future__ import annotations

from airflow_provider_dj.engine.jobdir.registry import MAX_ENTRIES, lookup_job, recent_jobs, register_job, registry_path

__all__ = ["MAX_ENTRIES", "lookup_job", "recent_jobs", "register_job", "registry_path"]
