"""What one ``run_segment`` call works with, and the events every one of its steps reports.

The steps of a segment run (``segment_start``: resume point, start state, global mask;
``segment_runner``: ops, key phase) share one ``SegmentContext``: the job's plan and recipe, the
partition, its stores, event log and fault spec.  The op and checkpoint events are emitted here
only, so an op of the global mask and an op of the op loop report with the same fields.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, TypeAlias

import pyarrow as pa

from airflow_provider_dj.engine.execution.failure_guard import FailureRateExceededError, check_partition, load_settings
from airflow_provider_dj.engine.execution.segment_checkpoints import SegmentCheckpoints
from airflow_provider_dj.engine.execution.segment_result import SegmentResult
from airflow_provider_dj.engine.jobdir import faults, stop_control
from airflow_provider_dj.engine.jobdir.events import EventLog
from airflow_provider_dj.engine.jobdir.identity import resume_command
from airflow_provider_dj.engine.observe.lineage import LineageRecorder
from airflow_provider_dj.engine.observe.tracer import tracer_for_partition
from airflow_provider_dj.engine.storage.checkpoints import CheckpointStore
from airflow_provider_dj.engine.storage.context import JobContext
from airflow_provider_dj.engine.storage.global_op_state import keys_store
from airflow_provider_dj.ops.registry import create_op

if TYPE_CHECKING:
    from airflow_provider_dj.engine.config.schema import Recipe
    from airflow_provider_dj.engine.execution.op_runner import OpOutcome
    from airflow_provider_dj.engine.jobdir.heartbeat import PartitionHeartbeat
    from airflow_provider_dj.engine.jobdir.progress_log import PartitionProgressLog
    from airflow_provider_dj.engine.planning.plan import ExecutionPlan, PlannedOp
    from airflow_provider_dj.ops.base import Op

#: ``op_factory(planned_op, text_key) -> Op``: where a segment run gets its op instances (an actor pool's
#: keeps stateful ops alive across partitions); None: a fresh one per call.
OpFactory: TypeAlias = "Callable[[PlannedOp, str], Op]"

log = logging.getLogger("airflow_provider_dj.engine.execution.segment_runner")  # the runner's log lines, as before


@dataclass
class PartitionState:
    """The rows a segment run holds between two steps, and what they are."""

    table: pa.Table
    accounting: list[dict[str, Any]]  # one entry per op applied so far (the checkpoint marker's "accounting")
    op_index: int  # the op whose output ``table`` is (-1: the input rows)
    committed: int | None  # the op whose checkpoint holds exactly ``table`` (a delta's base); None: none does


class SegmentContext:
    """One partition in one segment: fixed for the whole call."""

    def __init__(
        self,
        job_dir: str,
        segment_index: int,
        partition_id: int,
        *,
        try_number: int | None = None,
        event_defaults: dict[str, Any] | None = None,
        op_factory: OpFactory | None = None,
    ) -> None:
        self.job_dir = job_dir
        self.segment_index = segment_index
        self.partition_id = partition_id
        self.try_number = try_number
        self.op_factory = op_factory
        self.ctx = JobContext(job_dir)
        self.plan: ExecutionPlan = self.ctx.plan
        self.seg = self.plan.segments[segment_index]
        self.part = self.ctx.partition(partition_id)
        self.phash = self.part["content_hash"]
        self.recipe: Recipe = self.ctx.recipe
        self.store = CheckpointStore(job_dir, self.ctx.storage_format)
        self.kstore = keys_store(job_dir)
        self.ops_by_index: dict[int, PlannedOp] = {o.index: o for o in self.plan.ops}
        self.events = EventLog(job_dir, self.ctx.job_id, defaults=dict(event_defaults or {}, try_number=try_number))
        self.points = set(self.plan.checkpoint_points)
        self.fault_spec = faults.load_faults(job_dir)
        self.target = self.seg.end - 1  # state index this segment must leave behind
        self.result = SegmentResult(partition_id, segment_index, None)
        self.reused_keys = False  # the key phase's keys were reused from an earlier job (engine/execution/reuse.py)
        self.label = f"partition {partition_id} (rows {self.part['start_row']}-{self.part['end_row'] - 1})"
        self.tracer = tracer_for_partition(self.ctx, partition_id, self.phash)  # None when open_tracer is off
        self.guard = load_settings(
            job_dir, self.recipe
        )  # the limits the last validate recorded (a resume may raise them)
        self.checkpoints = SegmentCheckpoints(
            self.store, self.events, self.plan, job_dir, partition_id, self.phash, self.target
        )
        self.lineage = LineageRecorder(job_dir, partition_id, self.plan)  # each row's fate, per checkpoint point
        self.heartbeat: PartitionHeartbeat | None = None  # the running partition's (engine/jobdir/heartbeat.py)

    # -- ops -----------------------------------------------------------------
    def fp(self, i: int) -> str:
        return self.plan.ops[i].fingerprint

    def op_name(self, i: int) -> str:
        return self.ops_by_index[i].name

    def make_op(self, i: int) -> Op:
        """Op i, bound to this partition.  ``op_factory(planned_op, text_key)`` supplies it when given
        (an actor pool keeps stateful ops, models, alive across partitions); else a fresh one."""
        if self.op_factory is not None:
            op = self.op_factory(self.ops_by_index[i], self.recipe.text_key)
        else:
            op = create_op(self.ops_by_index[i].name, self.ops_by_index[i].args, self.recipe.text_key)
        op.bind_run_context(job_dir=self.job_dir, op_index=i, partition_id=self.partition_id)
        if op.writes_media:  # its files go beside its checkpoints (engine/execution/media_files.py)
            from airflow_provider_dj.engine.execution.media_files import media_folder

            op.bind_media_dir(media_folder(self.job_dir, i, op.name, self.partition_id))
        return op

    def fault(self, op_index: int, point: str = "after_op") -> None:
        """An injected fault, if the job's fault file names this point (engine.jobdir.faults)."""
        faults.maybe_fail(self.job_dir, self.fault_spec, self.partition_id, op_index, point=point)

    def beat(self, stage: str, **where: Any) -> None:
        """The work moved (``where``: op_index, op_name, rows_in, rows_done): tell the heartbeat."""
        if self.heartbeat is not None:
            self.heartbeat.progress(stage, **where)

    def heartbeat_for_run(self) -> PartitionHeartbeat:
        """This partition's heartbeat for one run of the segment (a context manager; started on entry)."""
        from airflow_provider_dj.engine.jobdir.heartbeat import PartitionHeartbeat

        self.heartbeat = PartitionHeartbeat(
            self.job_dir,
            self.partition_id,
            segment=self.segment_index,
            try_number=self.try_number,
            start_row=self.part["start_row"],
            end_row=self.part["end_row"],
        )
        return self.heartbeat

    # -- events --------------------------------------------------------------
    def emit_op_start(self, i: int, op_name: str, rows: int) -> None:
        self.events.emit(
            "op_start", partition_id=self.partition_id, op_index=i, op_name=op_name, input_rows=rows, status="running"
        )

    def emit_op_complete(self, i: int, op_name: str, accounting: dict[str, Any], rows_out: int, **counts: Any) -> None:
        """``counts``: what the op removed, in the order the event lists them (filtered/failed, or duplicates)."""
        self.events.emit(
            "op_complete",
            partition_id=self.partition_id,
            op_index=i,
            op_name=op_name,
            input_rows=accounting["rows_in"],
            output_rows=rows_out,
            **counts,
            duration=accounting["duration_s"],
            status="success",
        )

    def emit_op_failed(
        self, i: int, op_name: str, rows: int, error: str, *, failed: int | None = None, reason: str | None = None
    ) -> None:
        """op_failed, then partition_failed naming the op (``failed``/``reason``: set by the failure-rate guard)."""
        self.events.emit(
            "op_failed",
            partition_id=self.partition_id,
            op_index=i,
            op_name=op_name,
            input_rows=rows,
            failed=failed,
            error_message=error,
            status="failed",
            reason=reason,
        )
        self.events.emit(
            "partition_failed",
            partition_id=self.partition_id,
            segment=self.segment_index,
            error_message=f"op {i} ({op_name}): {error}",
            status="failed",
        )

    def check_failure_rate(
        self, plog: PartitionProgressLog, op: Op, i: int, table: pa.Table, outcome: OpOutcome
    ) -> None:
        """Past the failure-rate guard with op ``i``'s failed rows: fail here, before op i's checkpoint
        (the one before it commits first), with failed/ already written."""
        try:
            check_partition(
                self.guard,
                outcome.accounting,
                outcome.failed_reasons,
                partition_id=self.partition_id,
                label=self.label,
                resume=resume_command(self.recipe.source_file, self.ctx.job_id),
            )
        except FailureRateExceededError as exc:
            self.checkpoints.flush_quietly()
            self.emit_op_failed(i, op.name, table.num_rows, str(exc), failed=exc.failed, reason="failure_rate_guard")
            plog.partition_failed(f"op {i} ({op.name}): {exc}")
            raise

    def emit_checkpoint_load(self, k: int, rows: int) -> None:
        self.events.emit(
            "checkpoint_load",
            partition_id=self.partition_id,
            op_index=k,
            op_name=self.op_name(k),
            output_rows=rows,
            checkpoint_path=self.store.data_path(k, self.op_name(k), self.partition_id),
        )

    # -- stops ---------------------------------------------------------------
    def stop_point(self, after_op: int | None) -> None:
        """A committed boundary: honour a pending stop request here (engine.jobdir.stop_control)."""
        try:
            stop_control.check_stop(self.job_dir)
        except stop_control.StopRequested as exc:
            self.checkpoints.flush()  # the checkpoint after ``after_op`` commits before the stop is reported
            exc.partition_ids = [self.partition_id]
            self.events.emit(
                "partition_stopped",
                partition_id=self.partition_id,
                segment=self.segment_index,
                status="stopped",
                after_op=after_op,
                force=exc.force,
            )
            log.info(
                "%s: stop requested (%s); stopping after op %s with its checkpoint committed",
                self.label,
                exc.request.get("requested_by"),
                after_op,
            )
            raise
