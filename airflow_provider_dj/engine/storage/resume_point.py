"""Where a partition's work starts: its latest trusted checkpoint, or its input rows.

Three readers need the same answer and must never drift apart: the segment runner (which checkpoint
inside a segment to resume from), resume validation and the control API (which partitions are done,
``engine.job.resume.completed_checkpoints``) and the tracer (the rows a deduplicator at op 0 saw).
So the search order and the reading of a partition's input rows (numbered in
``ops/columns.INPUT_ROW_COLUMN``) live here, in the storage layer below all three.

A checkpoint is only a resume point when it derives from the same partition content and op
pipeline (its marker's partition hash and fingerprint); which check counts as "trusted" is the
caller's choice: the cheap marker check (``is_committed``) to report progress, the full read and
checksum (``load_valid``) before any rows are used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterable

import numpy as np
import pyarrow as pa

from airflow_provider_dj.engine.input.partitioning import read_partition
from airflow_provider_dj.ops.columns import INPUT_ROW_COLUMN as INPUT_ROW_COLUMN

if TYPE_CHECKING:
    from airflow_provider_dj.engine.storage.checkpoints import CheckpointStore, LoadedCheckpoint


def read_input_rows(ctx, partition_id: int) -> pa.Table:
    """The partition's input rows plus their input row numbers (``INPUT_ROW_COLUMN``): the state before op 0."""
    part = ctx.partition(partition_id)
    table = read_partition(ctx.partitioning_info, partition_id)
    rows = pa.array(np.arange(part["start_row"], part["end_row"], dtype=np.int64))
    return table.append_column(INPUT_ROW_COLUMN, rows)


def checkpoint_candidates(points: Iterable[int], highest: int, lowest: int = 0) -> list[int]:
    """The checkpoint points from ``highest`` down to ``lowest`` (both included, never below op 0), latest first:
    the order in which a resume point is looked for, so the latest trusted one wins."""
    points = set(points)
    return [k for k in range(highest, max(lowest, 0) - 1, -1) if k in points]


def last_committed_checkpoint(store: CheckpointStore, plan, partition_id: int, partition_hash: str) -> int:
    """The highest op index whose checkpoint of this partition is committed (marker check only); -1 if none."""
    points = list(plan.checkpoint_points)
    for k in checkpoint_candidates(points, max(points, default=-1)):
        if store.is_committed(k, plan.ops[k].name, partition_id, partition_hash, plan.ops[k].fingerprint):
            return k
    return -1


def load_latest_checkpoint(
    store: CheckpointStore, plan, partition_id: int, partition_hash: str, *, highest: int, lowest: int = 0
) -> tuple[int, LoadedCheckpoint] | None:
    """The latest checkpoint in ops ``lowest..highest`` that loads and verifies, as (op index, loaded); None if none.

    Checkpoints are tried latest first and the search stops at the first valid one, so a torn or stale
    later checkpoint only costs its own recomputation."""
    for k in checkpoint_candidates(plan.checkpoint_points, highest, lowest):
        loaded = store.load_valid(k, plan.ops[k].name, partition_id, partition_hash, plan.ops[k].fingerprint)
        if loaded is not None:
            return k, loaded
    return None
