"""The job's steps after the first: one segment for one execution group, a global step, the export.

Each step reads everything it needs from the job directory, so any runner on
any node can run it after a retry, a clear or a crash, and running a step
that already finished does no work.  The Airflow tasks, the local executor
(engine/runner/local.py) and the benchmarks call exactly these.
"""

from __future__ import annotations

import logging
from typing import Any, Callable

from airflow_provider_dj.engine.execution.global_ops import resolve_global_op
from airflow_provider_dj.engine.job.completed_export import is_job_complete, verify_completed_export
from airflow_provider_dj.engine.job.export import export_job
from airflow_provider_dj.engine.jobdir import lock as job_lock
from airflow_provider_dj.engine.jobdir.events import EventLog, read_events
from airflow_provider_dj.engine.jobdir.layout import JOB_SUMMARY
from airflow_provider_dj.engine.storage.context import JobContext

log = logging.getLogger(__name__)

Say = Callable[[str], None]


def run_group(
    job_dir: str,
    segment_index: int,
    group: dict,
    dispatcher: Any,
    *,
    try_number: int | None = None,
    event_defaults: dict | None = None,
    run_id: str | None = None,
    say: Say = log.info,
) -> list[dict]:
    """Segment ``segment_index`` for the partitions of one execution group; one result per partition.

    Refuses (``JobLockedError``) when another live runner owns the job, before any work.  ``dispatcher``
    (engine/runner/dispatch.py) says where the partitions run."""
    if not group["partition_ids"]:  # the placeholder of a run with nothing to do
        say(f"Segment {segment_index}: no partitions to run")
        return []
    say(
        f"Segment {segment_index}, execution group {group['group_id']}: partitions {group['partition_ids']} "
        f"({group['label']})"
    )
    job_lock.heartbeat(job_dir, run_id)
    parts = JobContext(job_dir).partitioning_info["partitions"]
    results = dispatcher.run(
        job_dir,
        segment_index,
        list(group["partition_ids"]),
        try_number=try_number,
        event_defaults=event_defaults,
        on_progress=say,
        rows_by_partition={p["partition_id"]: p["num_rows"] for p in parts},
        max_in_flight=group.get("max_in_flight"),  # resolved by the first step (docs/gpu_planning.md)
        actor_resources=group.get("actor_resources"),  # per-op actor plan, for stateful ops' actor pools
    )
    for r in results:
        if r["skipped"]:
            say(f"partition {r['partition_id']}: already complete, no work done")
        else:
            say(
                f"partition {r['partition_id']}: resumed after op {r['resumed_from_op']}, ran ops {r['ops_run']}, "
                f"{r['rows_out']} rows out, {r['failed_rows']} failed samples"
            )
    return results


def run_global_step(
    job_dir: str, op_index: int, *, event_defaults: dict | None = None, run_tasks: Callable | None = None
) -> dict:
    """The whole-dataset step of the deduplicator at ``op_index``: keys in, one keep mask per partition out.
    ``run_tasks`` runs a sharded step's tasks (engine/execution/global_shards.py; default: on the Ray this
    process is connected to, else here one after another)."""
    if is_job_complete(job_dir):
        return {"op_index": op_index, "skipped": True}
    return resolve_global_op(job_dir, op_index, event_defaults=event_defaults, run_tasks=run_tasks)


def review_gate(
    job_dir: str,
    ask: Callable[[Any], bool] | None,
    *,
    event_defaults: dict | None = None,
    say: Say = log.info,
) -> None:
    """The review gate before export (docs/review_gate.md): returns at once when the recipe has no
    ``review:`` or no bound is crossed; else ``ask(review)`` answers (True: export).  A False answer,
    or no ``ask``, raises ``ReviewRejectedError`` naming the bounds crossed; checkpoints are kept."""
    from airflow_provider_dj.engine.job.review import (
        APPROVED,
        REJECTED,
        ReviewRejectedError,
        decide_review,
        record_answer,
        rejection_message,
    )

    review = decide_review(job_dir, event_defaults=event_defaults)
    if not review.needs_review:
        return
    say(f"review: {review.headline()}")
    approved = bool(ask(review)) if ask is not None else False
    record_answer(
        job_dir, APPROVED if approved else REJECTED, by="terminal" if ask else None, event_defaults=event_defaults
    )
    if not approved:
        raise ReviewRejectedError(rejection_message(review, REJECTED))
    say("review: approved; exporting")


def wants_parallel_export(job_dir: str) -> bool:
    """Whether the export's JSON lines are worth serializing on parallel workers (engine/output/parts.py):
    a JSONL export of two or more partitions past the size threshold, unless most of it is reused."""
    from airflow_provider_dj.engine.execution.reuse import mostly_reused_export
    from airflow_provider_dj.engine.output import parts as export_parts

    ctx = JobContext(job_dir)
    info = ctx.partitioning_info
    return not (
        ctx.recipe.export_path.endswith(".parquet")
        or len(info["partitions"]) < 2
        or info["total_rows"] < export_parts.parallel_export_min_rows()
        or mostly_reused_export(ctx)  # nightly reuse: copying the last export's bytes beats serializing
    )


def finish_job(
    job_dir: str,
    *,
    event_defaults: dict | None = None,
    run_id: str | None = None,
    part_source: Callable[[], Any] | None = None,
    say: Say = log.info,
) -> dict:
    """Export atomically in input order and write the summary; a completed job's export is re-verified
    instead, and nothing is rewritten.  Returns the export's path, rows, checksum and job id."""
    if is_job_complete(job_dir):
        summary = verify_completed_export(job_dir)
        export = summary["export"]
        say(
            f"Job {summary['job_id']} was already complete; export {export['path']} verified against the summary "
            f"({export['rows']} rows, xxh3 {export['checksum_xxh3_128']}). Nothing was rewritten."
        )
        return {**_export_result(summary), "already_complete": True}
    starts = read_events(job_dir, "job_start")
    summary = export_job(
        job_dir,
        event_defaults=event_defaults,
        started_at=starts[0]["timestamp"] if starts else None,
        part_source=part_source,
    )
    job_lock.release(job_dir, run_id)
    EventLog(job_dir, summary["job_id"], defaults=event_defaults).emit(
        "job_complete",
        status="completed",
        input_rows=summary["input"]["total_rows"],
        output_rows=summary["export"]["rows"],
        partitions=summary["input"]["partitions"],
        duration=summary.get("duration_s"),
        checksum=summary["export"]["checksum_xxh3_128"],
        summary_path=f"{job_dir}/{JOB_SUMMARY}",
    )
    for op in summary["ops"]:
        say(
            f"op {op['op_index']} {op.get('op_name', ''):<32} in={op['rows_in']} out={op['rows_out']} "
            f"filtered={op['filtered']} duplicates={op['duplicates']} failed={op['failed']}"
        )
    say(f"Exported {summary['export']['rows']} rows to {summary['export']['path']}")
    from airflow_provider_dj.engine.execution.reuse import reuse_line

    line = reuse_line(summary.get("reuse"))
    if line:
        say(f"Reuse: {line}")
    return _export_result(summary)


def _export_result(summary: dict) -> dict:
    """``export_path``: the export file, or for a sharded export its manifest (then also ``manifest``)."""
    return {
        "export_path": summary["export"]["path"],
        "rows": summary["export"]["rows"],
        "checksum": summary["export"]["checksum_xxh3_128"],
        "job_id": summary["job_id"],
        **({"manifest": summary["export"]["manifest"]} if summary["export"].get("manifest") else {}),
    }
