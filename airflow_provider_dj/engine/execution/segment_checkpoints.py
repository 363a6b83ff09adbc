"""The checkpoint writes of one segment run: whole or delta, in the background or now.

One instance per ``run_segment`` call.  It remembers how deep each checkpoint's delta chain is
(written or loaded), because that decides whether the next one may be a delta, and it owns the
segment's ``CheckpointPipeline`` so every boundary that promises a committed checkpoint (a stop,
a fault, a failure, the segment's end) flushes the same one.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, Callable

import pyarrow as pa

from airflow_provider_dj.engine.execution.batch_cursor import discard_superseded
from airflow_provider_dj.engine.execution.op_runner import mapper_delta
from airflow_provider_dj.engine.storage.checkpoint_pipeline import CheckpointPipeline
from airflow_provider_dj.engine.storage.checkpoints import MAX_DELTA_CHAIN

if TYPE_CHECKING:
    from airflow_provider_dj.engine.execution.op_runner import OpOutcome
    from airflow_provider_dj.engine.jobdir.events import EventLog
    from airflow_provider_dj.engine.planning.plan import ExecutionPlan
    from airflow_provider_dj.engine.storage.checkpoints import CheckpointStore


def delta_depth(marker: dict[str, Any]) -> int:
    """How many delta levels lead from this checkpoint to a whole one (0: it is whole)."""
    delta = marker.get("delta")
    return 0 if not delta else int(delta.get("depth", MAX_DELTA_CHAIN))


class SegmentCheckpoints:
    """Checkpoints of one partition in one segment; ``target`` is the op whose state the segment leaves behind."""

    def __init__(
        self,
        store: CheckpointStore,
        events: EventLog,
        plan: ExecutionPlan,
        job_dir: str,
        partition_id: int,
        partition_hash: str,
        target: int,
    ) -> None:
        self.store = store
        self.events = events
        self.plan = plan
        self.job_dir = job_dir
        self.partition_id = partition_id
        self.partition_hash = partition_hash
        self.target = target
        self.pipeline = CheckpointPipeline()  # mid-segment checkpoints overlap the next op
        self.written: dict[int, int] = {}  # op index -> delta depth of its checkpoint (0: whole table)

    def loaded(self, op_index: int, marker: dict[str, Any]) -> None:
        """A checkpoint this run starts from: a later delta may be stored against it."""
        self.written[op_index] = delta_depth(marker)

    def writer(
        self,
        i: int,
        table_in: pa.Table,
        out: pa.Table,
        outcome: OpOutcome,
        base_state: int | None,
        accounting: list[dict[str, Any]],
    ) -> Callable[[], None]:
        """The write of op i's checkpoint, as a call: a delta on the checkpoint of state i-1 when that
        checkpoint holds exactly the op's input and the op dropped rows or changed little, else whole.
        The delta of a mapper is worked out inside the call, so in the background writer.

        The segment's output (``target``) is read again by the next segment and by the export, so
        it is a delta only when at most two levels lead to a whole checkpoint: rebuilding a long chain
        on every read costs more than writing the table whole (docs/architecture.md, checkpoint points)."""
        acct = list(accounting)
        name = self.plan.ops[i].name
        if base_state == i - 1 and self.store.supports_delta:

            def write() -> None:
                delta = None
                if i != self.target or self.written.get(i - 1, MAX_DELTA_CHAIN) <= 1:
                    delta = outcome.delta if outcome.delta is not None else mapper_delta(table_in, out)
                self.written[i] = 0 if delta is None else self.written.get(i - 1, MAX_DELTA_CHAIN) + 1
                if delta is None:
                    self._save_whole(i, name, out, acct)
                    return
                path = self.store.save_delta(
                    op_index=i,
                    op_name=name,
                    partition_id=self.partition_id,
                    keep=delta.keep,
                    columns=delta.columns,
                    out_columns=out.column_names,
                    out_rows=out.num_rows,
                    base_op_index=i - 1,
                    base_op_name=self.plan.ops[i - 1].name,
                    base_fingerprint=self.plan.ops[i - 1].fingerprint,
                    partition_hash=self.partition_hash,
                    fingerprint=self.plan.ops[i].fingerprint,
                    accounting=acct,
                    depth=self.written[i],
                )
                self.events.emit(
                    "checkpoint_save",
                    partition_id=self.partition_id,
                    op_index=i,
                    op_name=name,
                    output_rows=out.num_rows,
                    checkpoint_path=path,
                    delta_of_op=i - 1,
                )
                discard_superseded(self.job_dir, self.partition_id, i)

            return write
        self.written[i] = 0
        return functools.partial(self._save_whole, i, name, out, acct)

    def _save_whole(self, op_index: int, op_name: str, table: pa.Table, accounting: list[dict[str, Any]]) -> None:
        path = self.store.save(
            op_index=op_index,
            op_name=op_name,
            partition_id=self.partition_id,
            table=table,
            partition_hash=self.partition_hash,
            fingerprint=self.plan.ops[op_index].fingerprint,
            accounting=accounting,
        )
        self.events.emit(
            "checkpoint_save",
            partition_id=self.partition_id,
            op_index=op_index,
            op_name=op_name,
            output_rows=table.num_rows,
            checkpoint_path=path,
        )
        discard_superseded(self.job_dir, self.partition_id, op_index)

    def write_now(
        self,
        i: int,
        table_in: pa.Table,
        out: pa.Table,
        outcome: OpOutcome,
        base_state: int | None,
        accounting: list[dict[str, Any]],
        before: Callable[[], None] | None = None,
    ) -> None:
        """Op i's checkpoint, committed before this returns (after any write still in flight).

        ``before``: a write that must commit first (the lineage chunk up to op i, observe/lineage.py)."""
        self.pipeline.flush()
        _chain(before, self.writer(i, table_in, out, outcome, base_state, accounting))()

    def write_in_background(
        self,
        i: int,
        table_in: pa.Table,
        out: pa.Table,
        outcome: OpOutcome,
        base_state: int | None,
        accounting: list[dict[str, Any]],
        before: Callable[[], None] | None = None,
    ) -> None:
        """Op i's checkpoint, written while the next op runs (``before`` first, in the same slot)."""
        self.pipeline.submit(_chain(before, self.writer(i, table_in, out, outcome, base_state, accounting)))

    def flush(self) -> None:
        self.pipeline.flush()

    def flush_quietly(self) -> None:
        self.pipeline.flush_quietly()


def _chain(before: Callable[[], None] | None, write: Callable[[], None]) -> Callable[[], None]:
    if before is None:
        return write

    def both() -> None:
        before()
        write()

    return both
