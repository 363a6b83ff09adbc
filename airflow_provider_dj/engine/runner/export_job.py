"""The driver of one Ray Job: the export step of a planned job, on the cluster it runs on.

``python -m airflow_provider_dj.engine.runner.export_job --spec '<json>'`` is the entrypoint a
submitter (hooks/ray_jobs.py, for ``ExportOperator`` in Ray Jobs mode) gives Ray's Job Submission
API.  It makes the call the export task makes in its own process, ``finish_job``: it reads every
partition's final checkpoint, writes the export file atomically in input order and the job's summary
(``job_summary.json``), and serializes a large JSONL export's parts as Ray tasks of this driver
(engine/output/parts.py, connected with ``address="auto"`` to the cluster it runs on).  So the Airflow
worker reads no checkpoint and writes no export byte; the export, its summary, events and lineage are
the same bytes whichever mode ran the step.

The checks, the record and the stop handling are group_job's (:class:`group_job.DriverRun`): a
submitter of another provider version, or a job directory this host does not see as the submitter
planned it, is refused (exit status 2, nothing written); the record is ``layout.RAY_JOB_EXPORT_RECORD``
(``ray_jobs/export.json``, engine/jobdir/ray_jobs.py), whose succeeded submission carries
``finish_job``'s result (the task's XCom).  Exit status: 0 done, 1 failed, 2 refused, 130 stopped.

No Airflow import anywhere below this module: the cluster's image needs this package, not Airflow.
"""

from __future__ import annotations

import json
import logging
import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from airflow_provider_dj.engine.jobdir import ray_jobs
from airflow_provider_dj.engine.runner.group_job import DriverRun, DriverSpec, driver_main

if TYPE_CHECKING:
    from airflow_provider_dj.engine.runner.steps import ExportResult, PartSource

log = logging.getLogger("dj.export_job")

MODULE = "airflow_provider_dj.engine.runner.export_job"


@dataclass(frozen=True)
class ExportJobSpec(DriverSpec):
    """Everything the export's driver needs, passed by the submitter as one JSON argument."""

    DRIVER_MODULE: ClassVar[str] = MODULE

    job_dir: str
    job_id: str
    submission_id: str
    attempt: int
    provider_version: str
    submitter_host: str = ""
    try_number: int | None = None
    run_id: str | None = None
    step_key: str = ""
    event_defaults: dict[str, Any] = field(default_factory=dict)
    namespace: str | None = None
    dashboard_address: str = ""
    submitted_at: float | None = None

    @property
    def metadata(self) -> dict[str, Any]:
        """What the submission carries in Ray's job list."""
        return {"dj_job_id": self.job_id, "dj_step": "export"}


def verify_export(job_dir: str) -> tuple[bool, str]:
    """Whether the job's export is committed (its summary says ``completed``): what a submitter checks
    before it trusts a Ray Job that reports success.  Returns (done, a line saying what is seen)."""
    from airflow_provider_dj.engine.job.completed_export import is_job_complete

    if is_job_complete(job_dir):
        return True, "the export is committed (job_summary.json: completed)"
    return False, "the export is not committed (no completed job_summary.json)"


def export_result(job_dir: str) -> ExportResult:
    """``finish_job``'s result read back from the committed summary: the export's path (or a sharded
    export's manifest), rows, checksum and job id."""
    from airflow_provider_dj.core import fs as storage
    from airflow_provider_dj.engine.jobdir.layout import JOB_SUMMARY
    from airflow_provider_dj.engine.runner.steps import ExportResult

    return ExportResult.from_summary(json.loads(storage.read_bytes(storage.join(job_dir, JOB_SUMMARY))))


def run_export_job(spec: ExportJobSpec) -> int:
    """Check, record, export, record how it ended; the exit status (see the module docstring)."""
    from airflow_provider_dj.engine.job.completed_export import is_job_complete
    from airflow_provider_dj.engine.runner.steps import finish_job, wants_parallel_export

    def record(state: str, **fields: Any) -> None:
        ray_jobs.record_export_transition(
            spec.job_dir, spec.submission_id, state, job_id=spec.job_id, attempt=spec.attempt, **fields
        )

    run = DriverRun(spec, record, what="export")

    def part_source() -> PartSource | None:
        """The large JSONL export's parts as Ray tasks of this driver, on this cluster (None: in-line)."""
        if is_job_complete(spec.job_dir) or not wants_parallel_export(spec.job_dir):
            return None
        from airflow_provider_dj.engine.output import parts as export_parts
        from airflow_provider_dj.engine.storage.context import JobContext

        parts = [p["partition_id"] for p in JobContext(spec.job_dir).partitioning_info["partitions"]]
        ray = run.connect()
        cpus = max(1, int(ray.cluster_resources().get("CPU", 1)))
        log.info("Serializing %d partitions to JSONL on Ray, %d at a time", len(parts), cpus)
        return export_parts.parts_on_ray(ray, spec.job_dir, parts, max_in_flight=cpus)

    def body() -> dict[str, Any]:
        result = finish_job(
            spec.job_dir,
            event_defaults=spec.event_defaults,
            run_id=spec.run_id,
            part_source=part_source(),
            say=log.info,
        )
        return result.to_dict()  # the record's ``results`` (JSON)

    return run.run(body)


def settle_stopped_export(job_dir: str, job_id: str, sid: str, request: dict[str, Any]) -> None:
    """The submitter's side of an export whose Ray Job ended without success while the job's stop request
    was pending: that request stopped it, whatever the driver managed to record before Ray ended it, so
    the submission's record says ``stopped`` by ``stop_request`` (``recorded_by: submitter``)."""
    entry = ray_jobs.find_submission(ray_jobs.read_export_record(job_dir), sid) or {}
    if (entry.get("state"), entry.get("stopped_by")) == ("stopped", "stop_request"):
        return
    who = request.get("requested_by", "unknown")
    ended = f"; its driver had recorded {entry['state']}: {entry.get('error')}" if entry.get("state") else ""
    base = ray_jobs.export_base_submission_id(job_dir, job_id)
    ray_jobs.record_export_transition(
        job_dir,
        sid,
        "stopped",
        job_id=job_id,
        attempt=int(entry.get("attempt", ray_jobs.attempt_of(base, sid) or 0)),
        stopped_by="stop_request",
        error=f"the job's stop request ({who}) stopped the Ray job{ended}"[:4000],
        recorded_by="submitter",
    )


def main(argv: list[str] | None = None) -> int:
    return driver_main(argv, module=MODULE, doc=__doc__, spec_cls=ExportJobSpec, run=run_export_job)


if __name__ == "__main__":
    sys.exit(main())
