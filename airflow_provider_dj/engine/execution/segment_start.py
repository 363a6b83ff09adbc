"""The first steps of a segment run: is it done, where does it resume, and what rows does it start from.

A partition whose segment output (and, before a global op, its keys) is committed does no work.
Otherwise it resumes from the latest valid checkpoint inside the segment; without one it starts
from the previous segment's output with the global op's keep mask applied, or from its input rows.
Because a checkpoint is only trusted when it derives from the same partition content and op
pipeline, resuming can never mix rows of different inputs or recipes (invariant 2).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import pyarrow as pa

from airflow_provider_dj.core.errors import DJError
from airflow_provider_dj.engine.execution.failed_rows import write_failed
from airflow_provider_dj.engine.execution.op_runner import apply_keep_mask
from airflow_provider_dj.engine.execution.segment_context import PartitionState, SegmentContext
from airflow_provider_dj.engine.jobdir.integrity import FAILED_FILE_KEY
from airflow_provider_dj.engine.storage.global_op_state import KEY_ERROR_COLUMN, MASK_COLUMN, mask_store
from airflow_provider_dj.engine.storage.resume_point import load_latest_checkpoint, read_input_rows

if TYPE_CHECKING:
    from airflow_provider_dj.engine.jobdir.progress_log import PartitionProgressLog

log = logging.getLogger("airflow_provider_dj.engine.execution.segment_runner")  # the runner's log lines, as before


class MissingUpstreamStateError(DJError, RuntimeError):
    """The state this segment starts from is gone; an upstream task must be re-run."""


def completed_output_rows(sc: SegmentContext) -> int | None:
    """The row count of the segment's committed output when nothing is left to do, else None.

    Done means: the output checkpoint is committed and loads, and the keys a following global op
    needs are committed too (the cheap marker checks first, the full load only when they pass)."""
    target, seg, pid = sc.target, sc.seg, sc.partition_id
    target_done = target < 0 or sc.store.is_committed(target, sc.op_name(target), pid, sc.phash, sc.fp(target))
    keys_done = seg.keys_for_global is None or sc.kstore.is_committed(
        seg.keys_for_global, sc.op_name(seg.keys_for_global), pid, sc.phash, sc.fp(seg.keys_for_global)
    )
    if not (
        target_done
        and keys_done
        and (target < 0 or sc.store.load_valid(target, sc.op_name(target), pid, sc.phash, sc.fp(target)))
    ):
        return None
    marker = sc.store.read_marker(target, sc.op_name(target), pid) if target >= 0 else {}
    return int((marker or {}).get("num_rows", sc.part["num_rows"]))


def resume_from_checkpoint(sc: SegmentContext, plog: PartitionProgressLog) -> PartitionState | None:
    """The state of the latest valid checkpoint inside this segment (reported as a resume); None if none."""
    found = load_latest_checkpoint(
        sc.store, sc.plan, sc.partition_id, sc.phash, highest=sc.target, lowest=sc.seg.start - 1
    )
    if found is None:
        return None
    k, loaded = found
    table = loaded.table
    sc.checkpoints.loaded(k, loaded.marker)
    sc.emit_checkpoint_load(k, table.num_rows)
    sc.events.emit(
        "partition_resume",
        partition_id=sc.partition_id,
        segment=sc.segment_index,
        resumed_after_op=k,
        status="resumed",
        op_index=k,
        op_name=sc.op_name(k),
    )
    plog.resumed(k, sc.op_name(k), table.num_rows)
    log.info("%s: resuming from checkpoint after op %d (%s), %d rows", sc.label, k, sc.op_name(k), table.num_rows)
    return PartitionState(table, list(loaded.marker.get("accounting", [])), k, k)


def start_without_checkpoint(sc: SegmentContext, plog: PartitionProgressLog) -> PartitionState:
    """No checkpoint inside the segment: the previous segment's output through the global keep mask
    this segment starts with, or the partition's input rows."""
    g = sc.seg.applies_global
    if g is None:
        return PartitionState(read_input_rows(sc.ctx, sc.partition_id), [], -1, None)
    base = load_mask_base(sc, g)
    mask_table = load_mask_table(sc, g)
    return apply_global_mask(sc, plog, base, g, mask_table.column(MASK_COLUMN).combine_chunks(), matches=mask_table)


def load_mask_base(sc: SegmentContext, g: int) -> PartitionState:
    """The rows global op ``g`` saw: the committed output of op g-1 (the input rows for g = 0)."""
    base_idx = g - 1
    if base_idx < 0:
        return PartitionState(read_input_rows(sc.ctx, sc.partition_id), [], -1, None)
    base = sc.store.load_valid(base_idx, sc.op_name(base_idx), sc.partition_id, sc.phash, sc.fp(base_idx))
    if base is None:
        raise MissingUpstreamStateError(
            f"{sc.label}: the output of op {base_idx} ({sc.op_name(base_idx)}) is missing or invalid; "
            f"clear the upstream segment task for this partition (with downstream) to recompute it"
        )
    sc.checkpoints.loaded(base_idx, base.marker)
    sc.emit_checkpoint_load(base_idx, base.table.num_rows)
    return PartitionState(base.table, list(base.marker.get("accounting", [])), base_idx, base_idx)


def load_keep_mask(sc: SegmentContext, g: int) -> pa.Array:
    """This partition's keep mask of global op ``g``, which its global phase committed."""
    return load_mask_table(sc, g).column(MASK_COLUMN).combine_chunks()


def load_mask_table(sc: SegmentContext, g: int) -> pa.Table:
    """The committed mask table of global op ``g``: ``keep``, and with lineage what each removed row
    matched (``dedup_matches.py``)."""
    mask_cp = mask_store(sc.job_dir).load_valid(g, sc.op_name(g), sc.partition_id, sc.phash, sc.fp(g))
    if mask_cp is None:
        raise MissingUpstreamStateError(
            f"{sc.label}: the keep mask of global op {g} ({sc.op_name(g)}) is missing; "
            f"clear the task {sc.plan.global_task_id(g)} to recompute it"
        )
    return mask_cp.table


def apply_global_mask(
    sc: SegmentContext,
    plog: PartitionProgressLog,
    base: PartitionState,
    g: int,
    keep: pa.Array,
    *,
    matches: pa.Table | None = None,
) -> PartitionState:
    """Global op ``g`` on this partition: keep the rows its mask keeps, checkpoint when ``g`` is a point.

    Its checkpoint is written at once (nothing else runs yet to overlap with)."""
    op = sc.make_op(g)
    sc.emit_op_start(g, op.name, base.table.num_rows)
    sc.fault(g, point="op_start")
    errors = (
        matches.column(KEY_ERROR_COLUMN) if matches is not None and KEY_ERROR_COLUMN in matches.column_names else None
    )
    outcome = apply_keep_mask(op, g, base.table, keep, errors=errors)
    if outcome.failed_rows is not None:  # rows its key phase could not key (key_rows.py): failed/, then the guard
        outcome.accounting[FAILED_FILE_KEY] = write_failed(
            sc.ctx, g, op.name, sc.partition_id, outcome.failed_rows, outcome.failed_reasons
        )
        sc.check_failure_rate(plog, op, g, base.table, outcome)
    sc.lineage.begin(base.op_index)
    sc.lineage.observe(g, op, base.table, outcome, matches=matches)
    table, acct = outcome.table, outcome.accounting
    accounting = base.accounting + [acct]
    sc.emit_op_complete(g, op.name, acct, table.num_rows, duplicates=acct["duplicates"])
    plog.op_done(
        g,
        op.name,
        rows_in=acct["rows_in"],
        rows_out=table.num_rows,
        duration=acct["duration_s"],
        n=1,
        total=1 + len(sc.seg.op_indices),
        duplicates=acct["duplicates"],
    )
    sc.result.ops_run.append(g)
    committed = None
    if g in sc.points:
        sc.checkpoints.write_now(g, base.table, table, outcome, base.committed, accounting, before=sc.lineage.writer(g))
        committed = g
    sc.fault(g)
    return PartitionState(table, accounting, g, committed)
