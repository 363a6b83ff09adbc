"""The driver of one Ray Job: a global op's whole-dataset step of a planned job, on the cluster it runs on.

``python -m airflow_provider_dj.engine.runner.global_job --spec '<json>'`` is the entrypoint a
submitter (hooks/ray_jobs.py, for ``GlobalOpOperator`` in Ray Jobs mode) gives Ray's Job Submission
API.  It makes the call the global task makes in its own process, ``run_global_step``, with its key
shards' tasks as Ray tasks of this driver (``ray_task_runner``, connected with ``address="auto"``
to the cluster it runs on), so neither the keys nor the stages' orchestration touch the Airflow
worker; the masks, events and lineage are the same bytes whichever mode ran the step.

The settings that decide how the step runs (in one process, or in how many key shards) travel in the
spec as the submitter has them set (:data:`STEP_SETTINGS`): the step is planned as the Airflow task
would plan it, whatever the cluster's environment says.

The checks, the record and the stop handling are group_job's (:class:`group_job.DriverRun`): a
submitter of another provider version, or a job directory this host does not see as the submitter
planned it, is refused (exit status 2, nothing written); the record is
``layout.ray_job_global_record`` (engine/jobdir/ray_jobs.py).  Exit status: 0 done, 1 failed,
2 refused, 130 stopped.

No Airflow import anywhere below this module: the cluster's image needs this package, not Airflow.
"""

from __future__ import annotations

import logging
import sys
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar

from airflow_provider_dj import settings
from airflow_provider_dj.engine.jobdir import ray_jobs
from airflow_provider_dj.engine.runner.group_job import DriverRun, DriverSpec, apply_submitter_settings, driver_main

log = logging.getLogger("dj.global_job")

MODULE = "airflow_provider_dj.engine.runner.global_job"
#: The ``[dj]`` settings the step is planned with (engine/planning/global_memory.py): the submitter's
#: values, where set, are this driver's.
STEP_SETTINGS = ("global_step_shards", "global_shard_memory_mb", "global_step_memory_limit_gb")


@dataclass(frozen=True)
class GlobalJobSpec(DriverSpec):
    """Everything a global step's driver needs, passed by the submitter as one JSON argument."""

    DRIVER_MODULE: ClassVar[str] = MODULE

    job_dir: str
    job_id: str
    op_index: int
    submission_id: str
    attempt: int
    provider_version: str
    submitter_host: str = ""
    try_number: int | None = None
    run_id: str | None = None
    step_key: str = ""
    event_defaults: dict[str, Any] = field(default_factory=dict)
    namespace: str | None = None
    #: :data:`STEP_SETTINGS` as the submitter has them set (raw strings; unset ones are absent).
    settings: dict[str, Any] = field(default_factory=dict)
    dashboard_address: str = ""
    submitted_at: float | None = None

    @property
    def metadata(self) -> dict[str, Any]:
        """What the submission carries in Ray's job list."""
        return {"dj_job_id": self.job_id, "dj_global_op": str(self.op_index)}


def step_settings() -> dict[str, Any]:
    """This process's :data:`STEP_SETTINGS` that are set (raw strings): what a submitter puts in the spec."""
    return {k: v for k in STEP_SETTINGS if (v := settings.raw(k)) is not None}


def uncommitted_masks(job_dir: str, op_index: int) -> list[int]:
    """The partitions whose keep mask of global op ``op_index`` has no commit marker."""
    from airflow_provider_dj.engine.storage.context import JobContext
    from airflow_provider_dj.engine.storage.global_op_state import mask_store

    ctx = JobContext(job_dir)
    op = ctx.plan.ops[op_index]
    store = mask_store(job_dir)
    return [
        p["partition_id"]
        for p in ctx.partitioning_info["partitions"]
        if not store.is_committed(op_index, op.name, p["partition_id"], p["content_hash"], op.fingerprint)
    ]


def verify_global(job_dir: str, op_index: int) -> tuple[bool, str]:
    """Whether every partition's keep mask of global op ``op_index`` is committed: what a submitter
    checks before it submits, and before it trusts a Ray Job that reports success.  A completed job
    counts as done (retention may have removed its checkpoints).  Returns (done, a line saying what is
    seen)."""
    from airflow_provider_dj.engine.job.completed_export import is_job_complete
    from airflow_provider_dj.engine.storage.context import JobContext

    if is_job_complete(job_dir):
        return True, "the job is complete"
    missing = uncommitted_masks(job_dir, op_index)
    n = len(JobContext(job_dir).partitioning_info["partitions"])
    line = f"global op {op_index}: {n - len(missing)}/{n} keep masks committed"
    return not missing, line + (f" (not yet: {_short(missing)})" if missing else "")


def _short(ids: list[int], shown: int = 20) -> str:
    return str(ids) if len(ids) <= shown else f"{ids[:shown]} and {len(ids) - shown} more"


def run_global_job(spec: GlobalJobSpec) -> int:
    """Check, record, run the global step, record how it ended; the exit status (see the module docstring)."""
    from airflow_provider_dj.engine.input.task_map import ray_task_runner
    from airflow_provider_dj.engine.runner.steps import run_global_step
    from airflow_provider_dj.engine.storage.context import JobContext

    op_name: list[str] = []

    def record(state: str, **fields: Any) -> None:
        if not op_name:
            op_name.append(JobContext(spec.job_dir).plan.ops[spec.op_index].name)
        ray_jobs.record_global_transition(
            spec.job_dir,
            spec.op_index,
            spec.submission_id,
            state,
            job_id=spec.job_id,
            op_name=op_name[0],
            attempt=spec.attempt,
            **fields,
        )

    run = DriverRun(spec, record, what=f"global op {spec.op_index}'s step")

    def run_tasks(fn: Callable[..., Any], args_list: list[tuple[Any, ...]]) -> list[Any]:
        run.connect()  # only a sharded step needs Ray: its tasks run on this cluster
        return ray_task_runner(fn, args_list)

    def body() -> dict[str, Any]:
        apply_submitter_settings(spec.settings, STEP_SETTINGS)
        result = run_global_step(spec.job_dir, spec.op_index, event_defaults=spec.event_defaults, run_tasks=run_tasks)
        return result.to_dict()  # the record's ``results`` (JSON)

    return run.run(body)


def settle_stopped_global(job_dir: str, job_id: str, op_index: int, sid: str, request: dict[str, Any]) -> None:
    """The submitter's side of a global step whose Ray Job ended without success while the job's stop
    request was pending: that request stopped it, whatever the driver managed to record before Ray ended
    it, so the submission's record says ``stopped`` by ``stop_request`` (``recorded_by: submitter``)."""
    from airflow_provider_dj.engine.storage.context import JobContext

    entry = ray_jobs.find_submission(ray_jobs.read_global_record(job_dir, op_index), sid) or {}
    if (entry.get("state"), entry.get("stopped_by")) == ("stopped", "stop_request"):
        return
    who = request.get("requested_by", "unknown")
    ended = f"; its driver had recorded {entry['state']}: {entry.get('error')}" if entry.get("state") else ""
    base = ray_jobs.global_base_submission_id(job_dir, job_id, op_index)
    ray_jobs.record_global_transition(
        job_dir,
        op_index,
        sid,
        "stopped",
        job_id=job_id,
        op_name=JobContext(job_dir).plan.ops[op_index].name,
        attempt=int(entry.get("attempt", ray_jobs.attempt_of(base, sid) or 0)),
        stopped_by="stop_request",
        error=f"the job's stop request ({who}) stopped the Ray job{ended}"[:4000],
        recorded_by="submitter",
    )


def main(argv: list[str] | None = None) -> int:
    return driver_main(argv, module=MODULE, doc=__doc__, spec_cls=GlobalJobSpec, run=run_global_job)


if __name__ == "__main__":
    sys.exit(main())
