"""The OpenLineage methods of the recipe DAG's operators (``get_openlineage_facets_on_start/complete/failure``).

Airflow's OpenLineage provider calls these methods of a task, when they exist, as the task starts and
ends, and sends what they return with the task's events (docs/lineage.md#openlineage).  The mixin
gives every ``DJBaseOperator`` the methods; an operator reports lineage when its class names its
kind in the job (``lineage_step``: validate, partitions, global, export).

Nothing is imported or read unless the provider is installed and enabled: without it nobody calls
these methods, and with ``[openlineage] disabled`` (or no transport configured, which the provider
reads as disabled) each returns None before importing anything of OpenLineage's.  What they report
is read from the job directory (``openlineage_facets/``), never from XCom, so a retried or cleared
task reports the same job.
"""

from __future__ import annotations

import importlib.util
from typing import Any, ClassVar

from airflow_provider_dj.core import fs as storage
from airflow_provider_dj.engine.jobdir.layout import PARTITIONING_INFO


def openlineage_enabled() -> bool:
    """Airflow's OpenLineage provider is installed and its configuration does not disable it."""
    try:
        if importlib.util.find_spec("airflow.providers.openlineage") is None:
            return False
    except (ImportError, ValueError):
        return False
    from airflow.providers.openlineage import conf as ol_conf

    return not ol_conf.is_disabled()


def _planned(job_dir: str | None) -> bool:
    """A job directory validate has planned (an unrendered template or an unplanned job reports nothing)."""
    if not job_dir or "{{" in job_dir:
        return False
    try:
        return storage.exists(storage.join(job_dir, *PARTITIONING_INFO.split("/")))
    except OSError:
        return False


class OpenLineageMixin:
    """``get_openlineage_facets_on_*`` for the operators of a recipe DAG."""

    #: The task's kind in the job (``openlineage_facets.lineage.STEPS``); None reports no lineage.
    lineage_step: ClassVar[str | None] = None
    #: The job directory, for an operator whose ``job_dir`` is not a field (validate sets it in execute).
    lineage_job_dir: str | None = None

    def _lineage(self, final_since: float | None = None) -> Any:
        if self.lineage_step is None or not openlineage_enabled():
            return None
        job_dir = self.lineage_job_dir or getattr(self, "job_dir", None)
        if not _planned(job_dir):
            return None
        from airflow_provider_dj.openlineage_facets.lineage import StepScope, operator_lineage

        group = getattr(self, "execution_group", None) or {}
        scope = StepScope(
            step=self.lineage_step,
            segment_index=getattr(self, "segment_index", None),
            partition_ids=group.get("partition_ids") if self.lineage_step == "partitions" else None,
            global_op_index=getattr(self, "op_index", None) if self.lineage_step == "global" else None,
        )
        return operator_lineage(job_dir, scope, final_since=final_since)

    def get_openlineage_facets_on_start(self) -> Any:
        """The task's datasets and the job's run facet as the task starts (None: nothing to report)."""
        return self._lineage()

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """The same after a success: the export's statistics and the funnel now include this task's work."""
        return self._lineage()

    def get_openlineage_facets_on_failure(self, task_instance: Any) -> Any:
        """The same after a failure: the run facet says how far the job got, from the failed summary when
        this task's failure callback wrote it (a final failure: the callback runs before the listener)."""
        started = getattr(task_instance, "start_date", None)
        return self._lineage(final_since=started.timestamp() if started is not None else 0.0)
