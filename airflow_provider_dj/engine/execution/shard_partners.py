"""Lineage's look-up of representatives in a sharded global step: each partition's keys read once.

A removed row's lineage names its representative's input row (``dup_of``) and, for MinHash, the first
band the two share; both are in the representative's partition's keys.  Looked up from each removed
row's own mask task, a partition would read the keys of every partition its duplicates point at: with
duplicates spread over the corpus, every partition reads every earlier one, and the step grows with the
square of the partitions.  Here the look-up is an exchange in two stages of tasks, each partition's
keys read once:

1. *requests*, one task per partition: its removed rows and their representatives (from the node
   shard's results, as the mask task reads them), written as one batch per node shard of the
   representative: ``layout.shard_partner_requests_file``;
2. *answers*, one task per node shard ``r``: the distinct representatives in batch ``r`` of every
   request file, then each partition of the shard's keys once, taking the representatives' partner
   columns (the input row, MinHash's band digests), written once per representative, sorted by it:
   ``layout.shard_partner_answers_file``.

The mask task of a partition then reads its request file (its removed rows) and finds its
representatives in each answer file by binary search (``removed_and_partners``).  Memory: a request
task holds its partition's removed rows; an answer task one request batch at a time, the distinct
representatives asked of its shard with their answers, and one partition's keys at a time, so one huge
cluster of duplicates costs it one row; a mask task its own rows' answers.  Each file is written
atomically and a task whose file exists writes nothing, so a retried step redoes only what did not
commit; both stages are deterministic.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from airflow_provider_dj.core import fs as storage
from airflow_provider_dj.engine.execution.shard_components import SORTED_BY_FIRST, node_shard
from airflow_provider_dj.engine.execution.shard_stages import (
    ipc_bytes,
    load_partition_keys,
    open_mapped,
    read_batch,
    removed_rows,
)
from airflow_provider_dj.engine.input.task_map import in_fresh_worker
from airflow_provider_dj.engine.jobdir import layout
from airflow_provider_dj.engine.storage.context import JobContext
from airflow_provider_dj.ops.columns import INPUT_ROW_COLUMN
from airflow_provider_dj.ops.dedup.near import DocumentMinhashDeduplicator
from airflow_provider_dj.ops.registry import create_op

if TYPE_CHECKING:
    from airflow_provider_dj.engine.input.task_map import RunTasks
    from airflow_provider_dj.ops.base import Op

#: A request: a removed row's position and its representative's (``(partition << 32) | local_row``).
ROW, REP = "row", "rep"
REQUEST_SCHEMA = pa.schema([(ROW, pa.int64()), (REP, pa.int64())])


def partner_columns(op_impl: Op, keys: pa.Table) -> list[str]:
    """The columns of a representative's keys that lineage reads: its input row, MinHash's bands."""
    cols = [INPUT_ROW_COLUMN] if INPUT_ROW_COLUMN in keys.column_names else []
    if isinstance(op_impl, DocumentMinhashDeduplicator):
        cols += [c for c in op_impl.band_columns if c in keys.column_names]
    return cols


def request_partners(
    folder: str, partition_index: int, result_files: list[str], partitions: int, node_shards: int
) -> int:
    """Write partition ``partition_index``'s requests file (its removed rows, by the representative's
    node shard); returns how many rows it asks about."""
    path = storage.join(folder, layout.shard_partner_requests_file(partition_index))
    if storage.exists(path):
        return sum(read_batch(path, r).num_rows for r in range(node_shards))
    rows, reps = removed_rows(result_files, partition_index)
    pos = (np.int64(partition_index) << np.int64(32)) | rows
    target = node_shard(reps, partitions, node_shards)
    order = np.argsort(target, kind="stable")
    bounds = np.searchsorted(target[order], np.arange(node_shards + 1))
    batches = []
    for r in range(node_shards):
        sel = order[bounds[r] : bounds[r + 1]]
        batches.append(
            pa.record_batch([pa.array(pos[sel], pa.int64()), pa.array(reps[sel], pa.int64())], schema=REQUEST_SCHEMA)
        )
    storage.atomic_write_bytes(path, ipc_bytes(REQUEST_SCHEMA, batches))
    return int(len(rows))


@in_fresh_worker
def answer_partners(job_dir: str, op_index: int, folder: str, shard: int, partitions: int, node_shards: int) -> int:
    """Write node shard ``shard``'s answers file: every representative asked of the shard, once, with its
    partner columns, sorted by representative; returns how many.  An answer depends on the
    representative alone, so the task holds one request batch at a time and the distinct
    representatives: one huge cluster of duplicates costs it one row, not one per duplicate."""
    path = storage.join(folder, layout.shard_partner_answers_file(shard))
    if storage.exists(path):
        return int(open_mapped(path).read_all().num_rows)
    distinct = [np.zeros(0, np.int64)]
    for p in range(partitions):
        batch = read_batch(storage.join(folder, layout.shard_partner_requests_file(p)), shard)
        distinct.append(np.unique(batch.column(REP).to_numpy()))
    reps = np.unique(np.concatenate(distinct))
    del distinct
    ctx = JobContext(job_dir)
    op = ctx.plan.ops[op_index]
    op_impl = create_op(op.name, op.args, ctx.recipe.text_key)
    parts = ctx.partitioning_info["partitions"]
    rep_part = reps >> np.int64(32)
    taken = [pa.table({REP: pa.array([], pa.int64())})]
    for q in np.unique(rep_part).tolist():
        lo, hi = np.searchsorted(rep_part, [q, q + 1])
        keys = load_partition_keys(ctx, op_index, parts[q])
        local = pa.array(reps[lo:hi] & np.int64(0xFFFFFFFF))
        columns = {REP: pa.array(reps[lo:hi], pa.int64())}
        columns.update({c: keys.column(c).take(local) for c in partner_columns(op_impl, keys)})
        taken.append(pa.table(columns))
        del keys
    answers = pa.concat_tables(taken, promote_options="permissive").combine_chunks()
    answers = answers.replace_schema_metadata(SORTED_BY_FIRST)  # reps ascending: np.unique's order
    storage.atomic_write_bytes(path, ipc_bytes(answers.schema, answers.to_batches(max_chunksize=None)))
    return int(len(reps))


def removed_and_partners(
    folder: str, partition_index: int, node_shards: int
) -> tuple[np.ndarray, np.ndarray, pa.Table]:
    """Partition ``partition_index``'s removed local rows (ascending), their representatives' positions,
    and the representatives' partner columns in the same order: its request file, and its
    representatives looked up by binary search in each node shard's answers file (memory-mapped where
    local, so only the pages it needs are read)."""
    req_path = storage.join(folder, layout.shard_partner_requests_file(partition_index))
    positions, reps, found = [], [], []
    for r in range(node_shards):
        batch = read_batch(req_path, r)
        want = batch.column(REP).to_numpy()
        answers = open_mapped(storage.join(folder, layout.shard_partner_answers_file(r))).read_all()
        have = answers.column(REP).to_numpy()
        at = np.minimum(np.searchsorted(have, want), max(len(have) - 1, 0))
        if len(want) and (not len(have) or not np.array_equal(have[at], want)):
            raise RuntimeError(
                f"partition {partition_index}: node shard {r}'s partner answers in {folder} lack representatives "
                "it asked for; delete that folder's partners/ and clear the global step's task"
            )
        positions.append(batch.column(ROW).to_numpy())
        reps.append(want)
        found.append(answers.drop_columns([REP]).take(pa.array(at)) if len(want) else None)
    pos = np.concatenate([np.zeros(0, np.int64), *positions])
    rep = np.concatenate([np.zeros(0, np.int64), *reps])
    tables = [t for t in found if t is not None]
    partners = pa.concat_tables(tables, promote_options="permissive") if tables else pa.table({})
    order = np.argsort(pos, kind="stable")
    if partners.num_columns:
        partners = partners.take(pa.array(order))
    return pos[order] & np.int64(0xFFFFFFFF), rep[order], partners


def find_partners(
    job_dir: str, op_index: int, folder: str, files_of: list[list[str]], node_shards: int, run: RunTasks
) -> dict[str, Any]:
    """Run both stages for every partition; returns the counts (rows asked about, answers)."""
    partitions = len(files_of)
    asked = run(request_partners, [(folder, p, files_of[p], partitions, node_shards) for p in range(partitions)])
    answered = run(
        answer_partners, [(job_dir, op_index, folder, r, partitions, node_shards) for r in range(node_shards)]
    )
    return {"asked": int(sum(asked)), "answered": int(sum(answered))}
