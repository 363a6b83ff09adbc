"""Run one segment of the pipeline on one partition, resuming from checkpoints.

This is the function a Ray task executes (or the operator in-process).  On
every call — first try, retry, UI clear — it looks for the partition's
latest valid checkpoint inside the segment, loads it, and runs only the
ops after it.  A partition whose segment output is already committed does
no work at all.  Because a checkpoint is only trusted when it derives from
the same partition content and op pipeline, resuming can never mix rows of
different inputs or recipes (invariant 2).

``run_segment`` is a short sequence of named steps, each testable alone: the done check, the resume
point and the state it starts from (``segment_start``), the op loop with its checkpoint policy
(``run_ops``), and the key phase of a global op that ends the segment (``key_phase``).
"""

from __future__ import annotations

import logging
import time
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Callable, Iterator, TypeAlias

import pyarrow as pa

from airflow_provider_dj.engine.execution.batch_cursor import run_expensive_op
from airflow_provider_dj.engine.execution.failed_rows import write_failed as _write_failed
from airflow_provider_dj.engine.execution.key_rows import compute_keys
from airflow_provider_dj.engine.execution.media_files import commit_media
from airflow_provider_dj.engine.execution.op_runner import apply_op
from airflow_provider_dj.engine.execution.reuse import reuse_from_earlier_job
from airflow_provider_dj.engine.execution.segment_context import OpFactory, PartitionState, SegmentContext
from airflow_provider_dj.engine.execution.segment_result import SegmentResult
from airflow_provider_dj.engine.execution.segment_start import (
    MissingUpstreamStateError,
    completed_output_rows,
    resume_from_checkpoint,
    start_without_checkpoint,
)
from airflow_provider_dj.engine.execution.table_slices import byte_slices
from airflow_provider_dj.engine.jobdir import stop_control
from airflow_provider_dj.engine.jobdir.integrity import FAILED_FILE_KEY, MEDIA_MANIFEST_KEY
from airflow_provider_dj.engine.jobdir.progress_log import PartitionProgressLog
from airflow_provider_dj.engine.storage.global_op_state import (
    KEYS_COLUMN,
    KEYS_FORMAT,
    MASK_COLUMN,
    keys_store,
    mask_store,
)
from airflow_provider_dj.ops.base import Deduplicator
from airflow_provider_dj.ops.columns import (
    INPUT_ROW_COLUMN,
)

if TYPE_CHECKING:
    from airflow_provider_dj.engine.execution.op_runner import OpOutcome
    from airflow_provider_dj.ops.base import Op

__all__ = [  # the runner's public names; the job-directory constants live in global_op_state / resume_point
    "INPUT_ROW_COLUMN",
    "KEYS_COLUMN",
    "KEYS_FORMAT",
    "MASK_COLUMN",
    "MissingUpstreamStateError",
    "SegmentResult",
    "keys_store",
    "key_phase",
    "mask_store",
    "run_ops",
    "run_segment",
]

#: ``progress(partition_id, op_index, n, total_ops)`` after each op of a segment run.
Progress: TypeAlias = Callable[[int, int, int, int], None]

log = logging.getLogger(__name__)


def run_segment(
    job_dir: str,
    segment_index: int,
    partition_id: int,
    *,
    try_number: int | None = None,
    event_defaults: dict[str, Any] | None = None,
    progress: Progress | None = None,
    op_factory: OpFactory | None = None,
) -> SegmentResult:
    """``op_factory(planned_op, text_key) -> Op`` supplies op instances; None
    creates a fresh one per call.  An actor of a group's pool passes one that
    keeps stateful ops (models) alive across partitions (engine/execution/actor_pool.py)."""
    sc = SegmentContext(
        job_dir,
        segment_index,
        partition_id,
        try_number=try_number,
        event_defaults=event_defaults,
        op_factory=op_factory,
    )
    rows_done = completed_output_rows(sc)
    if rows_done is not None:
        return _report_already_complete(sc, rows_done)
    sc.stop_point(None)  # a stop pending before this partition started: do nothing at all
    with sc.heartbeat_for_run():  # the work once started: resume point, ops, key phase, report
        plog = _report_start(sc)
        t_start = time.perf_counter()
        state = run_ops(sc, plog, _start_state(sc, plog), progress)
        if sc.seg.keys_for_global is not None and not sc.reused_keys:
            sc.beat("key_phase", op_index=sc.seg.keys_for_global, rows_in=state.table.num_rows, rows_done=0)
            key_phase(sc, state.table)
        return _report_complete(sc, plog, state.table, t_start)


def _start_state(sc: SegmentContext, plog: PartitionProgressLog) -> PartitionState:
    """Where the run starts: the latest valid checkpoint, an earlier job's, or the segment's input."""
    sc.beat("resume", rows_in=sc.part["num_rows"])
    state = resume_from_checkpoint(sc, plog)
    if state is None:
        state = reuse_from_earlier_job(sc, plog)  # nightly reuse; None unless the recipe opts in
    if state is not None:
        sc.result.resumed_from_op = state.op_index
        return state
    state = start_without_checkpoint(sc, plog)
    sc.result.resumed_from_op = -1 if sc.seg.applies_global is None else sc.seg.applies_global - 1
    return state


def _report_already_complete(sc: SegmentContext, rows_out: int) -> SegmentResult:
    sc.result.skipped = True
    sc.result.rows_out = rows_out
    sc.events.emit(
        "partition_complete",
        partition_id=sc.partition_id,
        segment=sc.segment_index,
        status="already_complete",
        output_rows=rows_out,
    )
    log.info("%s: segment %d already complete; nothing to do", sc.label, sc.segment_index)
    return sc.result


def _report_start(sc: SegmentContext) -> PartitionProgressLog:
    part = sc.part
    sc.events.emit(
        "partition_start",
        partition_id=sc.partition_id,
        segment=sc.segment_index,
        status="running",
        start_row=part["start_row"],
        end_row=part["end_row"],
        input_rows=part["num_rows"],
    )
    plog = PartitionProgressLog(sc.job_dir, sc.partition_id, segment=sc.segment_index, try_number=sc.try_number)
    plog.partition_start(
        start_row=part["start_row"],
        end_row=part["end_row"],
        input_rows=part["num_rows"],
        ops=len(sc.seg.op_indices) + (sc.seg.applies_global is not None),
    )
    return plog


def _report_complete(sc: SegmentContext, plog: PartitionProgressLog, table: pa.Table, t_start: float) -> SegmentResult:
    sc.result.rows_out = table.num_rows
    plog.partition_done(table.num_rows)
    sc.events.emit(
        "partition_complete",
        partition_id=sc.partition_id,
        segment=sc.segment_index,
        output_rows=table.num_rows,
        duration=round(time.perf_counter() - t_start, 6),
        status="success",
        ops_run=sc.result.ops_run,
    )
    return sc.result


# -- the ops of the segment --------------------------------------------------------
def run_ops(
    sc: SegmentContext, plog: PartitionProgressLog, state: PartitionState, progress: Progress | None = None
) -> PartitionState:
    """The ops after ``state`` up to the segment's target, each checkpointed where the plan says;
    returns the target's state with every checkpoint committed."""
    total_ops = sc.target - state.op_index
    sc.lineage.begin(state.op_index)
    for n, i in enumerate(range(state.op_index + 1, sc.target + 1), start=1):
        state = run_one_op(sc, plog, state, i, n, total_ops, progress)
    sc.checkpoints.flush()
    return state


def run_one_op(
    sc: SegmentContext,
    plog: PartitionProgressLog,
    state: PartitionState,
    i: int,
    n: int,
    total_ops: int,
    progress: Progress | None = None,
) -> PartitionState:
    """Op i (the n-th of ``total_ops`` in this run) on ``state``: run, account, checkpoint, fault/stop points."""
    op = sc.make_op(i)
    table = state.table
    sc.emit_op_start(i, op.name, table.num_rows)
    plog.op_start(i, op.name, table.num_rows, n, total_ops)
    sc.beat("op", op_index=i, op_name=op.name, rows_in=table.num_rows, rows_done=0)
    with _reported(sc, plog, op, i, table):  # the op called here: a short call path (docs/architecture.md)
        # Inside: an injected op_start fault is an op failure like any other (op_failed + partition_failed
        # events), not a silent exit.
        sc.fault(i, point="op_start")
        if op.expensive:
            outcome = _expensive(sc, op, i, table)
        else:
            needs = tuple(type(op).input_fields(sc.ops_by_index[i].args, sc.recipe.text_key))
            outcome = apply_op(op, i, table, sc.recipe.skip_op_error, needs)
    if op.writes_media:  # the files the output names, committed with the next checkpoint; the rest removed
        outcome.accounting[MEDIA_MANIFEST_KEY] = commit_media(sc.job_dir, op, i, sc.partition_id, outcome.table)
    if outcome.failed_rows is not None:
        outcome.accounting[FAILED_FILE_KEY] = _write_failed(
            sc.ctx, i, op.name, sc.partition_id, outcome.failed_rows, outcome.failed_reasons
        )
    sc.check_failure_rate(plog, op, i, table, outcome)
    sc.lineage.observe(i, op, table, outcome)
    if sc.tracer is not None:  # candidates are durable before any checkpoint after op i (engine.observe.tracer)
        sc.tracer.observe(i, op, table, outcome)
    acct = outcome.accounting
    state = PartitionState(outcome.table, state.accounting + [acct], i, state.committed)
    sc.result.ops_run.append(i)
    sc.result.failed_rows += acct["failed"]
    sc.beat("op_done", op_index=i, op_name=op.name, rows_in=acct["rows_in"], rows_done=acct["rows_in"])
    sc.emit_op_complete(i, op.name, acct, state.table.num_rows, filtered=acct["filtered"], failed=acct["failed"])
    log.info(
        "%s: op %d/%d %s done: %d -> %d rows in %.3fs (ops %d/%d of this segment)",
        sc.label,
        i,
        sc.plan.final_op_index,
        op.name,
        acct["rows_in"],
        state.table.num_rows,
        acct["duration_s"],
        n,
        total_ops,
    )
    plog.op_done(
        i,
        op.name,
        rows_in=acct["rows_in"],
        rows_out=state.table.num_rows,
        duration=acct["duration_s"],
        n=n,
        total=total_ops,
        filtered=acct["filtered"],
        failed=acct["failed"],
    )
    if progress is not None:
        progress(sc.partition_id, i, n, total_ops)
    state.committed = checkpoint_after_op(sc, state, table, outcome)
    if sc.fault_spec:
        sc.checkpoints.flush()  # an injected fault after op i finds op i's checkpoint committed, as without the pipeline
    sc.fault(i)
    if i in sc.points and i != sc.target:
        sc.stop_point(i)  # op i is committed (or committing: a stop flushes first); a resume restarts after it
    return state


def checkpoint_after_op(
    sc: SegmentContext, state: PartitionState, table_in: pa.Table, outcome: OpOutcome
) -> int | None:
    """The checkpoint policy after op ``state.op_index``; returns the op whose checkpoint now holds the state.

    A mid-segment checkpoint is written while the next op runs (batch cursors up to the op go only
    after its commit); the segment's output is committed before the segment reports done."""
    i, base = state.op_index, state.committed
    if i not in sc.points:
        return None
    lineage = sc.lineage.writer(i)  # the rows' fates up to op i commit just before its checkpoint
    if i != sc.target:
        sc.checkpoints.write_in_background(i, table_in, state.table, outcome, base, state.accounting, before=lineage)
    else:
        sc.checkpoints.write_now(i, table_in, state.table, outcome, base, state.accounting, before=lineage)
    return i


def _expensive(sc: SegmentContext, op: Op, i: int, table: pa.Table) -> OpOutcome:
    """Op i in batches committed with a cursor: a crash or stop loses at most one batch."""
    return run_expensive_op(
        op,
        i,
        table,
        job_dir=sc.job_dir,
        partition_id=sc.partition_id,
        partition_hash=sc.phash,
        fingerprint=sc.fp(i),
        skip_op_error=sc.recipe.skip_op_error,
        events=sc.events,
        fault_spec=sc.fault_spec,
        label=sc.label,
        on_rows_done=lambda rows: sc.beat("op", op_index=i, op_name=op.name, rows_in=table.num_rows, rows_done=rows),
    )


@contextmanager
def _reported(sc: SegmentContext, plog: PartitionProgressLog, op: Op, i: int, table: pa.Table) -> Iterator[None]:
    """A failure or a stop inside op i's run, reported (after the checkpoint before it commits) and re-raised."""
    try:
        yield
    except stop_control.StopRequested as exc:  # an op's batch loop committed its batch and saw a stop
        sc.checkpoints.flush_quietly()
        exc.partition_ids = [sc.partition_id]
        sc.events.emit(
            "partition_stopped",
            partition_id=sc.partition_id,
            segment=sc.segment_index,
            status="stopped",
            op_index=i,
            op_name=op.name,
            force=exc.force,
            note="inside the op, at a batch boundary",
        )
        raise
    except Exception as exc:
        sc.checkpoints.flush_quietly()  # the checkpoint of the op before commits: the retry resumes after it
        sc.emit_op_failed(i, op.name, table.num_rows, f"{type(exc).__name__}: {exc}")
        plog.partition_failed(f"op {i} ({op.name}): {type(exc).__name__}: {exc}")
        raise


# -- the key phase of the global op that ends the segment -----------------------------
def key_phase(sc: SegmentContext, table: pa.Table) -> pa.Table:
    """Commit this partition's keys of global op ``seg.keys_for_global`` for its global phase; returns them.

    One fixed-size key per row (exact dedup) or a table of per-row signatures (e.g. MinHash bands)
    that the op's resolve_global reads."""
    g = sc.seg.keys_for_global
    op = sc.make_op(g)
    if not isinstance(op, Deduplicator):  # the plan's global ops are deduplicators (engine/planning/plan.py)
        raise TypeError(f"op {g} ({op.name}) is a global op but not a Deduplicator: it cannot compute keys")
    t0 = time.perf_counter()
    # Keys are per row: computed slice by slice they are the same keys, and no slice holds more text
    # than one Arrow string array can (engine/execution/table_slices.py).
    slices = byte_slices(table, op.text_key) or [(0, 0)]
    # With skip_op_error a row the op cannot key (an unreadable image) gets a null key and its reason
    # (key_rows.py); the segment applying the global op's mask sets it aside in failed/.
    keys_table = compute_keys(op, table, slices, sc.recipe.skip_op_error)
    if keys_table.num_rows != table.num_rows:
        raise RuntimeError(f"{op.name}.compute_hash returned {keys_table.num_rows} rows for {table.num_rows}")
    recipe = sc.ctx.recipe
    if sc.lineage.enabled or (recipe.dedup_history is not None and op.name in recipe.dedup_history.ops):
        # The history check and commit (engine/history/) and the lineage of the rows the global step
        # removes (dedup_matches.py) name rows by input row: keys carry it along.
        keys_table = keys_table.append_column(INPUT_ROW_COLUMN, table.column(INPUT_ROW_COLUMN))
    sc.kstore.save(
        op_index=g,
        op_name=op.name,
        partition_id=sc.partition_id,
        table=keys_table,
        partition_hash=sc.phash,
        fingerprint=sc.fp(g),
        accounting=[],
        extra={"duration_s": round(time.perf_counter() - t0, 6)},
    )
    sc.events.emit(
        "checkpoint_save",
        partition_id=sc.partition_id,
        op_index=g,
        op_name=op.name,
        output_rows=keys_table.num_rows,
        checkpoint_path=sc.kstore.data_path(g, op.name, sc.partition_id),
        note="dedup keys",
    )
    return keys_table
