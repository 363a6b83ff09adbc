"""The last stage of a sharded global step: commit each partition's keep mask and lineage columns.

One task per partition (``commit_partition_mask``), run by ``global_shards.resolve_sharded`` after the
key shards and the components: its removed rows come from its node shard's results, or, when lineage
is on and the step removed rows, from its partner requests, with their representatives' input rows and
MinHash bands from the partner answers (``shard_partners.py``: the representatives' keys are read once
per partition for the whole step, not once per partition that points at them).  A committed mask is
counted, not rewritten, so a retried step redoes only the partitions that did not commit.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from airflow_provider_dj.engine.execution.dedup_matches import (
    DUP_BAND_COLUMN,
    DUP_OF_COLUMN,
    HISTORY_JOB_COLUMN,
    HISTORY_ROW_COLUMN,
)
from airflow_provider_dj.engine.execution.shard_partners import removed_and_partners
from airflow_provider_dj.engine.execution.shard_stages import load_partition_keys, removed_rows
from airflow_provider_dj.engine.jobdir.faults import load_faults, maybe_fail
from airflow_provider_dj.engine.storage.context import JobContext
from airflow_provider_dj.engine.storage.global_op_state import (
    MASK_COLUMN,
    key_errors,
    mask_store,
    save_keep_mask,
)
from airflow_provider_dj.ops.base import Op
from airflow_provider_dj.ops.columns import INPUT_ROW_COLUMN
from airflow_provider_dj.ops.dedup.near import DocumentMinhashDeduplicator
from airflow_provider_dj.ops.registry import create_op


def _history_columns(n: int, history: Any) -> dict[str, Any]:
    """``history_job`` / ``history_row`` of one partition (``history.positions``: its rows)."""
    job: list[Any] = [None] * n
    hrow = np.full(n, -1, dtype=np.int64)
    for r, j in zip(history.positions.tolist(), history.job_ids):
        job[r] = j
    hrow[history.positions] = history.export_rows
    return {HISTORY_JOB_COLUMN: pa.array(job, pa.string()), HISTORY_ROW_COLUMN: pa.array(hrow, pa.int64())}


def _lineage_columns(
    op_impl: Op,
    keys: pa.Table,
    rows: np.ndarray,
    partners: pa.Table | None,
    any_removed: bool,
    history: Any = None,
    history_band: bool = False,
) -> dict[str, Any]:
    """The lineage match columns of one partition, as ``dedup_matches.match_columns`` gives them: the input
    row of each removed row's representative (``partners``: the representatives' partner columns, in the
    order of ``rows``); with ``history``, each history duplicate's earlier job and export row; for
    MinHash, the first band a removed row shares with its representative, or that matched the history row
    (``history_band``: some partition has a history duplicate with a band)."""
    n = keys.num_rows
    dup_of = np.full(n, -1, dtype=np.int64)
    if not len(rows):
        partners = None
    if partners is not None and INPUT_ROW_COLUMN in keys.column_names:
        dup_of[rows] = partners.column(INPUT_ROW_COLUMN).to_numpy()
    cols: dict[str, Any] = {DUP_OF_COLUMN: pa.array(dup_of, pa.int64())}
    if history is not None:
        cols.update(_history_columns(n, history))
    in_night_band = any_removed and isinstance(op_impl, DocumentMinhashDeduplicator)
    if in_night_band or history_band:
        band = np.full(n, -1, dtype=np.int16)
        if in_night_band and partners is not None and isinstance(op_impl, DocumentMinhashDeduplicator):
            m = len(rows)
            own = keys.take(pa.array(rows))
            band[rows] = op_impl.matching_band([own, partners], np.arange(m), m + np.arange(m))
        if history_band and history is not None and len(history):
            band[history.positions] = history.bands
        cols[DUP_BAND_COLUMN] = pa.array(band, pa.int16())
    return cols


def commit_partition_mask(
    job_dir: str,
    op_index: int,
    partition_index: int,
    result_files: list[str],
    any_removed: bool,
    lineage: bool,
    history: Any = None,
    history_band: bool = False,
    partners_folder: str | None = None,
    node_shards: int = 0,
) -> dict[str, Any]:
    """Commit partition ``partition_index``'s keep mask (and, with ``lineage``, its match columns) from
    the node shard's results; returns its rows and rows kept. An already committed mask is counted, not
    rewritten.  ``lineage`` comes from the orchestrating process's settings, not this worker's.
    ``history``: the partition's history duplicates (``decide_partition``), removed too; None when the op
    checks no history.  ``partners_folder``: the step's folder where ``shard_partners.find_partners``
    ran over ``node_shards`` node shards (lineage with rows removed); None: look nothing up."""
    ctx = JobContext(job_dir)
    op = ctx.plan.ops[op_index]
    part = ctx.partitioning_info["partitions"][partition_index]
    ms = mask_store(job_dir)
    args = (op_index, op.name, part["partition_id"], part["content_hash"], op.fingerprint)
    if ms.is_committed(*args):
        done = ms.load_valid(*args)
        if done is not None:
            keep = done.table.column(MASK_COLUMN).to_numpy(zero_copy_only=False)
            return {"rows": len(keep), "kept": int(keep.sum())}
    keys = load_partition_keys(ctx, op_index, part)
    partners = None
    if partners_folder is not None:
        rows, _reps, partners = removed_and_partners(partners_folder, partition_index, node_shards)
    else:
        rows, _reps = removed_rows(result_files, partition_index)
    keep = np.ones(keys.num_rows, dtype=bool)
    keep[rows] = False
    if history is not None:
        keep[history.positions] = False
    op_impl = create_op(op.name, op.args, ctx.recipe.text_key)
    matches = _lineage_columns(op_impl, keys, rows, partners, any_removed, history, history_band) if lineage else {}
    save_keep_mask(job_dir, op, op_index, part, keep, {**matches, **key_errors(keys)})
    maybe_fail(job_dir, load_faults(job_dir), part["partition_id"], op_index, point="global_mid")
    return {"rows": int(keys.num_rows), "kept": int(keep.sum())}
