"""The global phase of a deduplicator: all partitions' keys -> per-partition keep masks.

Runs once per global op, after the barrier.  It reads only the 16-byte keys
each partition task committed (memory bounded by the number of rows, not
the text size), walks them in input order keeping each key's first
occurrence — exactly what a single-process deduplicator over the whole
dataset keeps — and commits one keep mask per partition.  Re-running it is
idempotent: masks already committed for the same keys are left alone.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

import numpy as np
import pyarrow as pa

from airflow_provider_dj.engine.execution.dedup_matches import (
    keep_and_representatives,
    match_columns,
    partition_columns,
)
from airflow_provider_dj.engine.execution.global_shards import resolve_sharded
from airflow_provider_dj.engine.jobdir.events import EventLog
from airflow_provider_dj.engine.jobdir.faults import load_faults, maybe_fail
from airflow_provider_dj.engine.observe.lineage import lineage_enabled
from airflow_provider_dj.engine.observe.tracer import write_duplicate_trace
from airflow_provider_dj.engine.planning.global_memory import is_shardable, planned_shards
from airflow_provider_dj.engine.storage.context import JobContext
from airflow_provider_dj.engine.storage.global_op_state import (
    KEYS_COLUMN,
    MissingKeysError,
    key_errors,
    keys_store,
    mask_store,
    save_keep_mask,
)
from airflow_provider_dj.ops.base import SignatureDeduplicator
from airflow_provider_dj.ops.dedup.exact import first_occurrence_mask
from airflow_provider_dj.ops.registry import create_op

if TYPE_CHECKING:
    from airflow_provider_dj.engine.history.lookup import HistoryDuplicates
    from airflow_provider_dj.engine.planning.plan import PlannedOp
    from airflow_provider_dj.ops.base import Op

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class GlobalStepResult:
    """How a global step ended: the op's counts, or ``skipped`` when every keep mask was committed already.
    A plain dict (``to_dict``) only at an Airflow task's XCom and a Ray Job's record."""

    op_index: int
    skipped: bool = False
    rows: int = 0
    kept: int = 0
    duplicates: int = 0
    #: With dedup_history: the rows an earlier export held, and the history index version read.
    history_duplicates: int | None = None
    history_version: int | None = None

    def to_dict(self) -> dict[str, Any]:
        if self.skipped:
            return {"op_index": self.op_index, "skipped": True}
        d: dict[str, Any] = {
            "op_index": self.op_index,
            "rows": self.rows,
            "kept": self.kept,
            "duplicates": self.duplicates,
        }
        if self.history_duplicates is not None:
            d["history_duplicates"] = self.history_duplicates
            d["history_version"] = self.history_version
        return d


def resolve_global_op(
    job_dir: str,
    op_index: int,
    *,
    event_defaults: dict[str, Any] | None = None,
    run_tasks: Callable[..., Any] | None = None,
) -> GlobalStepResult:
    """Decide, over every partition's keys, which rows the global op keeps, and commit each partition's
    keep mask; return the op's counts (or ``skipped`` when every mask was already committed).  A step
    planned in shards runs its tasks through ``run_tasks`` (engine/execution/global_shards.py)."""
    ctx = JobContext(job_dir)
    plan = ctx.plan
    op = plan.ops[op_index]
    if not op.is_global:
        raise ValueError(f"op {op_index} ({op.name}) is not a global op")
    parts = ctx.partitioning_info["partitions"]
    ks, ms = keys_store(job_dir), mask_store(job_dir)
    events = EventLog(job_dir, ctx.job_id, defaults=event_defaults)
    t0 = time.perf_counter()
    events.emit("global_op_start", op_index=op_index, op_name=op.name, partitions=len(parts))

    if parts and all(
        ms.is_committed(op_index, op.name, p["partition_id"], p["content_hash"], op.fingerprint) for p in parts
    ):
        log.info("global op %d (%s): keep masks already committed for all %d partitions", op_index, op.name, len(parts))
        events.emit("global_op_complete", op_index=op_index, op_name=op.name, status="already_complete")
        return GlobalStepResult(op_index, skipped=True)

    op_impl = create_op(op.name, op.args, ctx.recipe.text_key)
    shards = _shards_for(ctx, op, op_index, op_impl, parts)
    if shards:
        counts = resolve_sharded(job_dir, op_index, shards, events=events, run_tasks=run_tasks)
        return _complete(events, op, op_index, counts["rows"], counts["kept"], counts.get("history"), t0)
    keys = _load_keys(ks, op, op_index, parts)
    total = int(sum(k.num_rows for k in keys))
    # With lineage on, every removed row is named with the row it was kept against (dedup_matches.py),
    # computed with the keep flags (the op's own decision) in one pass where the op can.
    mask, rep = _keep_flags(op_impl, keys, total, op, op_index)
    # Deduplication against history (dedup_history): the rows kept in-night whose key an earlier export
    # holds are removed too (engine/history/lookup.py); recorded before the masks commit.
    from airflow_provider_dj.engine.history.lookup import remove_history_duplicates

    in_night = mask
    mask, history_dups = remove_history_duplicates(ctx, op_index, op_impl, keys, in_night)
    # Tracer (open_tracer): duplicate pairs, written before the masks commit so a
    # crash in between re-runs this step and rewrites them.  No-op when tracing is off.
    write_duplicate_trace(ctx, op_index, op_impl, keys, in_night, history=history_dups)
    matches = match_columns(op_impl, keys, rep, in_night, history_dups) if lineage_enabled() else {}
    _save_masks(job_dir, op, op_index, parts, keys, mask, matches)
    return _complete(events, op, op_index, total, int(mask.sum()), history_dups, t0)


def _shards_for(ctx: JobContext, op: PlannedOp, op_index: int, op_impl: Op, parts: list[dict[str, Any]]) -> int:
    """Key shards of this step (0: the single-process step; engine/planning/global_memory.py)."""
    rows = int(sum(p["end_row"] - p["start_row"] for p in parts))
    shards = planned_shards(op_impl, rows)
    if not shards:
        return 0
    if not is_shardable(op_impl):
        log.info("global op %d (%s): in one process (the op decides in its own code)", op_index, op.name)
        return 0
    return shards


def _complete(
    events: EventLog,
    op: PlannedOp,
    op_index: int,
    total: int,
    kept: int,
    history_dups: HistoryDuplicates | None,
    t0: float,
) -> GlobalStepResult:
    """Log and record the step's counts; the step's result."""
    dur = time.perf_counter() - t0
    log.info(
        "global op %d (%s): %d rows, %d kept, %d duplicates, %.3fs", op_index, op.name, total, kept, total - kept, dur
    )
    events.emit(
        "global_op_complete",
        op_index=op_index,
        op_name=op.name,
        input_rows=total,
        output_rows=kept,
        duplicates=total - kept,
        history_duplicates=None if history_dups is None else len(history_dups),
        duration=round(dur, 6),
        status="success",
    )
    return GlobalStepResult(
        op_index,
        rows=total,
        kept=kept,
        duplicates=total - kept,
        history_duplicates=None if history_dups is None else len(history_dups),
        history_version=None if history_dups is None else history_dups.version,
    )


def _load_keys(ks: Any, op: PlannedOp, op_index: int, parts: list[dict[str, Any]]) -> list[pa.Table]:
    """Every partition's committed keys for the global op, in partition order; MissingKeysError
    naming the first partition whose keys are missing or torn."""
    keys: list[pa.Table] = []
    for p in parts:
        cp = ks.load_valid(op_index, op.name, p["partition_id"], p["content_hash"], op.fingerprint)
        if cp is None:
            raise MissingKeysError(
                f"global op {op_index} ({op.name}): keys of partition {p['partition_id']} "
                f"(rows {p['start_row']}-{p['end_row'] - 1}) are missing; clear that partition's segment task"
            )
        keys.append(cp.table)
    return keys


def _keep_flags(
    op_impl: Op, keys: list[pa.Table], total: int, op: PlannedOp, op_index: int
) -> tuple[np.ndarray, np.ndarray | None]:
    """The op's keep flag of every row over all partitions, in input order, and (lineage on) the row
    each removed row was kept against, else None.  RuntimeError when the flags do not cover every row."""
    rep: np.ndarray | None = None
    if not total:
        mask = np.zeros(0, dtype=bool)
    elif lineage_enabled():
        mask, rep = keep_and_representatives(op_impl, keys)
    elif isinstance(op_impl, SignatureDeduplicator):
        # Near-duplicate ops (MinHash, SimHash) resolve clusters over all
        # partitions' signatures, in input order, themselves.
        mask = np.asarray(op_impl.resolve_global(keys), dtype=bool)
    else:
        mask = first_occurrence_mask([k.column(KEYS_COLUMN) for k in keys])
    if len(mask) != total:
        raise RuntimeError(f"global op {op_index} ({op.name}) returned {len(mask)} keep flags for {total} rows")
    return mask, rep


def _save_masks(
    job_dir: str,
    op: PlannedOp,
    op_index: int,
    parts: list[dict[str, Any]],
    keys: list[pa.Table],
    mask: np.ndarray,
    matches: dict[str, Any],
) -> None:
    """Commit each partition's slice of the keep flags (and its lineage match columns) as its mask;
    the ``global_mid`` fault point fires after the first partition's commit."""
    offset = 0
    fault_spec = load_faults(job_dir)
    for n, (p, k) in enumerate(zip(parts, keys)):
        part_mask = mask[offset : offset + k.num_rows]
        part_matches = partition_columns(matches, offset, offset + k.num_rows)
        offset += k.num_rows
        save_keep_mask(job_dir, op, op_index, p, part_mask, {**part_matches, **key_errors(k)})
        if n == 0:
            maybe_fail(job_dir, fault_spec, None, op_index, point="global_mid")
