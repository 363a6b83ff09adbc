"""``DataJuicerJobRunFacet``: the job behind an Airflow task, in the run of every event the task sends.

Its JSON schema ships in this package (``schema.py`` names the file and the URL); the field names
are OpenLineage's camelCase.  Importing this module imports the OpenLineage client: only
``lineage.py`` does, when the provider is installed and enabled.
"""

from __future__ import annotations

from typing import ClassVar

import attr
from openlineage.client.facet_v2 import RunFacet

from airflow_provider_dj.openlineage_facets.job_facts import JobFacts
from airflow_provider_dj.openlineage_facets.schema import SCHEMA_URL


@attr.define
class DataJuicerJobRunFacet(RunFacet):
    """Job id, resume token, the per-op funnel so far, failed samples and the pinned history version.

    Field names are OpenLineage's camelCase; optional fields are left out of an event when None."""

    jobId: str
    resumeToken: str
    step: str
    status: str
    partitionsCount: int
    inputRows: int
    failedSamples: int
    failedSamplesByOp: dict
    funnel: list
    recipePath: str | None = None
    segmentIndex: int | None = None
    partitionIds: list | None = None
    globalOpIndex: int | None = None
    exportRows: int | None = None
    historyVersion: int | None = None

    #: Airflow's secrets masker hides the value of any field whose name says "token"; the resume token is a
    #: job id, never a secret, and the event is useless without it.  Every other field is still redacted.
    _additional_skip_redact: ClassVar[list[str]] = ["jobId", "resumeToken"]

    @staticmethod
    def _get_schema() -> str:
        return SCHEMA_URL


def run_facet(
    facts: JobFacts,
    step: str,
    *,
    segment_index: int | None = None,
    partition_ids: list[int] | None = None,
    global_op_index: int | None = None,
) -> DataJuicerJobRunFacet:
    """The facet of one task's event: the job's facts plus which part of the job the task runs."""
    return DataJuicerJobRunFacet(
        jobId=facts.job_id,
        resumeToken=facts.resume_token,
        step=step,
        status=facts.status,
        partitionsCount=facts.partitions_count,
        inputRows=facts.input_rows,
        failedSamples=facts.failed_samples,
        failedSamplesByOp=dict(facts.failed_samples_by_op),
        funnel=[dict(s) for s in facts.funnel],
        recipePath=facts.recipe_path,
        segmentIndex=segment_index,
        partitionIds=list(partition_ids) if partition_ids is not None else None,
        globalOpIndex=global_op_index,
        exportRows=facts.export.rows,
        historyVersion=facts.history_version,
    )
