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
2. *answers*, one task per node shard ``r``: batch ``r`` of every request file, then each partition of
   the shard's keys once, taking the representatives' partner columns (the input row, MinHash's band
   digests), written as one batch per asking partition: ``layout.shard_partner_answers_file``.

The mask task of a partition then reads its request file (its removed rows) and its batch of every
answer file (``partners_of``).  Memory: a request task holds its partition's removed rows; an answer
task the requests into its node shard, their answers, and one partition's keys at a time.  Each file is
written atomically and a task whose file exists writes nothing, so a retried step redoes only what did
not commit; both stages are deterministic.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from airflow_provider_dj.core import fs as storage
from airflow_provider_dj.engine.execution.shard_components import node_shard
from airflow_provider_dj.engine.execution.shard_stages import (
    ipc_bytes,
    load_partition_keys,
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
REQUEST_SCHEMA = pa.schema([("row", pa.int64()), ("rep", pa.int64())])
ROW = "row"


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
    """Write node shard ``shard``'s answers file: for every request into the shard, the asking row and its
    representative's partner columns, one batch per asking partition in row order; returns the answers."""
    path = storage.join(folder, layout.shard_partner_answers_file(shard))
    if storage.exists(path):
        return sum(b.num_rows for b in _all_batches(path))
    requests = pa.Table.from_batches(
        [read_batch(storage.join(folder, layout.shard_partner_requests_file(p)), shard) for p in range(partitions)],
        schema=REQUEST_SCHEMA,
    )
    row, rep = requests.column(ROW).to_numpy(), requests.column("rep").to_numpy()
    del requests
    ctx = JobContext(job_dir)
    op = ctx.plan.ops[op_index]
    op_impl = create_op(op.name, op.args, ctx.recipe.text_key)
    parts = ctx.partitioning_info["partitions"]
    rep_part = rep >> np.int64(32)
    order = np.argsort(rep_part, kind="stable")
    taken = []
    for q in np.unique(rep_part).tolist():
        sel = order[np.searchsorted(rep_part[order], q) : np.searchsorted(rep_part[order], q, side="right")]
        keys = load_partition_keys(ctx, op_index, parts[q])
        local = pa.array(rep[sel] & np.int64(0xFFFFFFFF))
        columns = {ROW: pa.array(row[sel], pa.int64())}
        columns.update({c: keys.column(c).take(local) for c in partner_columns(op_impl, keys)})
        taken.append(pa.table(columns))
        del keys
    if taken:
        answers = pa.concat_tables(taken, promote_options="permissive")
        rows = answers.column(ROW).to_numpy()
        by_row = np.argsort(rows, kind="stable")
        rows, answers = rows[by_row], answers.take(pa.array(by_row))
    else:
        rows, answers = np.zeros(0, np.int64), pa.table({ROW: pa.array([], pa.int64())})
    answers = answers.combine_chunks()
    bounds = np.searchsorted(rows >> np.int64(32), np.arange(partitions + 1))
    batches = [
        _one_batch(answers.slice(int(bounds[p]), int(bounds[p + 1] - bounds[p])), answers.schema)
        for p in range(partitions)
    ]
    storage.atomic_write_bytes(path, ipc_bytes(answers.schema, batches))
    return int(len(rows))


def _one_batch(table: pa.Table, schema: pa.Schema) -> pa.RecordBatch:
    batches = table.combine_chunks().to_batches(max_chunksize=None)
    return batches[0] if batches else pa.RecordBatch.from_pylist([], schema=schema)


def _all_batches(path: str) -> list[pa.RecordBatch]:
    import pyarrow.ipc as ipc

    with storage.open_read(path) as fh:
        reader = ipc.open_file(fh)
        return [reader.get_batch(i) for i in range(reader.num_record_batches)]


def removed_and_partners(
    folder: str, partition_index: int, node_shards: int
) -> tuple[np.ndarray, np.ndarray, pa.Table]:
    """Partition ``partition_index``'s removed local rows (ascending), their representatives' positions,
    and the representatives' partner columns in the same order, from the two stages' files."""
    req_path = storage.join(folder, layout.shard_partner_requests_file(partition_index))
    requests = [read_batch(req_path, r) for r in range(node_shards)]
    pos = np.concatenate([b.column(0).to_numpy() for b in requests]) if requests else np.zeros(0, np.int64)
    reps = np.concatenate([b.column(1).to_numpy() for b in requests]) if requests else np.zeros(0, np.int64)
    order = np.argsort(pos, kind="stable")
    pos, reps = pos[order], reps[order]
    got = [
        read_batch(storage.join(folder, layout.shard_partner_answers_file(r)), partition_index)
        for r in range(node_shards)
    ]
    answers = pa.concat_tables([pa.Table.from_batches([b]) for b in got], promote_options="permissive")
    rows = answers.column(ROW).to_numpy()
    by_row = np.argsort(rows, kind="stable")
    if not np.array_equal(rows[by_row], pos):
        raise RuntimeError(
            f"partition {partition_index}: the partner answers in {folder} do not match its requests "
            f"({len(rows)} answers for {len(pos)} removed rows); delete that folder's partners/ and clear "
            "the global step's task"
        )
    partners = answers.take(pa.array(by_row)).drop_columns([ROW])
    return pos & np.int64(0xFFFFFFFF), reps, partners


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
