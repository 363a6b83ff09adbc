"""The job's steps after the first: one segment for one execution group, a global step, the export.

Each step reads everything it needs from the job directory, so any runner on
any node can run it after a retry, a clear or a crash, and running a step
that already finished does no work.  The Airflow tasks, the local executor
(engine/runner/local.py) and the benchmarks call exactly these.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Mapping

from airflow_provider_dj.engine.execution.global_ops import GlobalStepResult, resolve_global_op
from airflow_provider_dj.engine.execution.segment_result import SegmentResult
from airflow_provider_dj.engine.job.completed_export import is_job_complete, verify_completed_export
from airflow_provider_dj.engine.job.export import export_job
from airflow_provider_dj.engine.jobdir import lock as job_lock
from airflow_provider_dj.engine.jobdir.events import EventLog, read_events
from airflow_provider_dj.engine.jobdir.layout import JOB_SUMMARY
from airflow_provider_dj.engine.planning.execution_group import ExecutionGroup
from airflow_provider_dj.engine.runner.dispatch import Dispatcher
from airflow_provider_dj.engine.storage.context import JobContext

log = logging.getLogger(__name__)

Say = Callable[[str], None]
#: The export's JSONL parts, each partition's in order (engine/output/parts.py); None: serialized in-line.
PartSource = Callable[[], Iterator[dict[str, Any]]]


def run_group(
    job_dir: str,
    segment_index: int,
    group: ExecutionGroup | Mapping[str, Any],
    dispatcher: Dispatcher,
    *,
    try_number: int | None = None,
    event_defaults: dict[str, Any] | None = None,
    run_id: str | None = None,
    say: Say = log.info,
) -> list[SegmentResult]:
    """Segment ``segment_index`` for the partitions of one execution group; one result per partition.

    ``group``: an ``ExecutionGroup``, or the plain dict of one (the plan's, XCom's).  Refuses
    (``JobLockedError``) when another live runner owns the job, before any work.  ``dispatcher``
    (engine/runner/dispatch.py) says where the partitions run."""
    group = ExecutionGroup.of(group)
    if not group.partition_ids:  # the placeholder of a run with nothing to do
        say(f"Segment {segment_index}: no partitions to run")
        return []
    say(
        f"Segment {segment_index}, execution group {group.group_id}: partitions {list(group.partition_ids)} ({group.label})"
    )
    job_lock.heartbeat(job_dir, run_id)
    parts = JobContext(job_dir).partitioning_info["partitions"]
    results = dispatcher.run(
        job_dir,
        segment_index,
        group,
        try_number=try_number,
        event_defaults=event_defaults,
        on_progress=say,
        rows_by_partition={p["partition_id"]: p["num_rows"] for p in parts},
    )
    for r in results:
        say(r.line())
    return results


def run_global_step(
    job_dir: str,
    op_index: int,
    *,
    event_defaults: dict[str, Any] | None = None,
    run_tasks: Callable[..., Any] | None = None,
) -> GlobalStepResult:
    """The whole-dataset step of the deduplicator at ``op_index``: keys in, one keep mask per partition out.
    ``run_tasks`` runs a sharded step's tasks (engine/execution/global_shards.py; default: on the Ray this
    process is connected to, else here one after another)."""
    if is_job_complete(job_dir):
        return GlobalStepResult(op_index, skipped=True)
    return resolve_global_op(job_dir, op_index, event_defaults=event_defaults, run_tasks=run_tasks)


def review_gate(
    job_dir: str,
    ask: Callable[[Any], bool] | None,
    *,
    event_defaults: dict[str, Any] | None = None,
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


@dataclass(frozen=True)
class ExportResult:
    """What the export step committed: the export's path (for a sharded export, its manifest, then also
    ``manifest``), rows, checksum and job id; ``already_complete`` when an earlier run had exported it.
    A plain dict (``to_dict``) only at an Airflow task's XCom and a Ray Job's record."""

    export_path: str
    rows: int
    checksum: str
    job_id: str
    manifest: str | None = None
    already_complete: bool = False

    @classmethod
    def from_summary(cls, summary: Mapping[str, Any], *, already_complete: bool = False) -> ExportResult:
        export = summary["export"]
        return cls(
            export_path=export["path"],
            rows=export["rows"],
            checksum=export["checksum_xxh3_128"],
            job_id=summary["job_id"],
            manifest=export.get("manifest") or None,
            already_complete=already_complete,
        )

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "export_path": self.export_path,
            "rows": self.rows,
            "checksum": self.checksum,
            "job_id": self.job_id,
        }
        if self.manifest:
            d["manifest"] = self.manifest
        if self.already_complete:
            d["already_complete"] = True
        return d


def finish_job(
    job_dir: str,
    *,
    event_defaults: dict[str, Any] | None = None,
    run_id: str | None = None,
    part_source: PartSource | None = None,
    say: Say = log.info,
) -> ExportResult:
    """Export atomically in input order and write the summary; a completed job's export is re-verified
    instead, and nothing is rewritten.  Returns the export's path, rows, checksum and job id."""
    if is_job_complete(job_dir):
        summary = verify_completed_export(job_dir)
        export = summary["export"]
        say(
            f"Job {summary['job_id']} was already complete; export {export['path']} verified against the summary "
            f"({export['rows']} rows, xxh3 {export['checksum_xxh3_128']}). Nothing was rewritten."
        )
        return ExportResult.from_summary(summary, already_complete=True)
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
    return ExportResult.from_summary(summary)
