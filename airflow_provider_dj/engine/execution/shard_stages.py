"""The tasks of a sharded global step: scatter a partition's keys, resolve one key shard, commit a mask.

Each is a module-level function of paths and small values, so it runs as a Ray task or in the calling
process alike (``global_shards.py`` runs them), reads its inputs from the job directory, commits its
output atomically and, run again after its output committed, returns the same summary without redoing
the work. Memory: a scatter task holds one partition's keys, a key-shard task its shard's items, a
mask task one partition's keys and the rows its duplicates point at, a decision task (history and
tracer, ``decide_partition``) one partition's keys and its history look-up within the budget it is given.

Items.  Every deduplicator the sharded step knows reduces a row to *items* ``(table, k0, k1, pos)``:
rows whose items agree on ``(table, k0, k1)`` are duplicates (exact keys: one item, the key's two
64-bit words; MinHash: one item per LSH band, its digest), or, for SimHash, candidates compared by
Hamming distance within ``(table, k0)`` (one item per block combination: the masked value and the
full value).  ``pos`` is the row's position, ``(partition_index << 32) | local_row``, so numeric order
is input order and the smallest position of a group of duplicates is its first occurrence.  An item's
key shard is a mix of its whole bucket key, so equal buckets always meet in one shard and shards are
even whatever the keys' distribution (SimHash's bucket is ``(table, k0)``: all its values meet).
"""

from __future__ import annotations

import functools
import io
import itertools
import json
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc

from airflow_provider_dj.core import fs as storage
from airflow_provider_dj.core.errors import DJError
from airflow_provider_dj.engine.execution.shard_components import node_shard
from airflow_provider_dj.engine.input.task_map import in_fresh_worker
from airflow_provider_dj.engine.jobdir import layout
from airflow_provider_dj.engine.jobdir.faults import load_faults, maybe_fail
from airflow_provider_dj.engine.planning.global_memory import BYTES_PER_ITEM, budget_words
from airflow_provider_dj.engine.storage.context import JobContext
from airflow_provider_dj.engine.storage.global_op_state import (
    KEYS_COLUMN,
    MissingKeysError,
    keys_store,
    unkeyed_rows,
)
from airflow_provider_dj.ops.dedup.near import (
    GOLDEN_K1,
    DocumentMinhashDeduplicator,
    DocumentSimhashDeduplicator,
    close_pairs_in_runs,
    mix64,
    simhash_blocks,
)
from airflow_provider_dj.ops.registry import create_op

if TYPE_CHECKING:
    from airflow_provider_dj.ops.base import Op

ITEM_SCHEMA = pa.schema([("t", pa.uint16()), ("k0", pa.uint64()), ("k1", pa.uint64()), ("pos", pa.int64())])
EDGE_SCHEMA = pa.schema([("u", pa.int64()), ("v", pa.int64())])


@functools.lru_cache(maxsize=8)
def _simhash_masks(num_blocks: int, max_distance: int) -> tuple[int, ...]:
    """One bit mask per choice of ``num_blocks - max_distance`` blocks (the tables SimHash buckets by)."""
    masks = simhash_blocks(num_blocks)
    return tuple(
        functools.reduce(lambda a, b: a | b, (masks[c] for c in combo), 0)
        for combo in itertools.combinations(range(num_blocks), num_blocks - max_distance)
    )


def row_items(op_impl: Op, keys: pa.Table, partition_index: int) -> tuple[np.ndarray, ...]:
    """``(t, k0, k1, pos)`` for every row of one partition's keys (see the module docstring)."""
    n = keys.num_rows
    pos = (np.int64(partition_index) << np.int64(32)) | np.arange(n, dtype=np.int64)
    if isinstance(op_impl, (DocumentMinhashDeduplicator, DocumentSimhashDeduplicator)):
        # A row its key phase could not key has null signatures: never a duplicate, so no item, as a null key.
        unkeyed = unkeyed_rows(keys)
        if unkeyed is not None and unkeyed.any():
            keys, pos = keys.filter(pa.array(~unkeyed)), pos[~unkeyed]
            n = keys.num_rows
    if isinstance(op_impl, DocumentMinhashDeduplicator):
        cols = [keys.column(c).to_numpy().astype(np.uint64, copy=False) for c in op_impl.band_columns]
        b = len(cols)
        t = np.repeat(np.arange(b, dtype=np.uint16), n)
        k0 = np.concatenate(cols) if cols else np.zeros(0, np.uint64)
        return t, k0, np.zeros(n * b, np.uint64), np.tile(pos, b)
    if isinstance(op_impl, DocumentSimhashDeduplicator):
        full = keys.column("simhash").to_numpy().astype(np.uint64, copy=False)
        masks = _simhash_masks(op_impl.num_blocks, op_impl.hamming_distance)
        t = np.repeat(np.arange(len(masks), dtype=np.uint16), n)
        k0 = np.concatenate([full & np.uint64(m) for m in masks])
        return t, k0, np.tile(full, len(masks)), np.tile(pos, len(masks))
    arr = keys.column(KEYS_COLUMN).combine_chunks()
    if arr.type != pa.binary(16):
        arr = arr.cast(pa.binary(16))
    words = np.frombuffer(arr.buffers()[1], dtype="<u8")[2 * arr.offset : 2 * (arr.offset + n)].reshape(n, 2)
    if arr.null_count:  # a null key is never a duplicate (ops/kernels/keys.py): no item, so no edge
        valid = arr.is_valid().to_numpy(zero_copy_only=False)
        words, pos = words[valid], pos[valid]
    return np.zeros(len(pos), np.uint16), words[:, 0].copy(), words[:, 1].copy(), pos


def key_shard(t: np.ndarray, k0: np.ndarray, k1: np.ndarray, shards: int) -> np.ndarray:
    """The key shard of each item: a mix of its bucket key ``(t, k0, k1)`` modulo ``shards``."""
    with np.errstate(over="ignore"):
        h = mix64(k0 ^ mix64(k1 + t.astype(np.uint64) * GOLDEN_K1 + np.uint64(1)))
    shard: np.ndarray = (h % np.uint64(shards)).astype(np.int64)
    return shard


def ipc_bytes(schema: pa.Schema, batches: list[pa.RecordBatch], metadata: dict[str, Any] | None = None) -> bytes:
    if metadata:
        schema = schema.with_metadata({k: json.dumps(v) for k, v in metadata.items()})
    sink = io.BytesIO()
    with ipc.new_file(sink, schema) as writer:
        for batch in batches:
            writer.write_batch(batch)
    return sink.getvalue()


def _open(path: str) -> ipc.RecordBatchFileReader:
    return ipc.open_file(pa.BufferReader(storage.read_bytes(path)))


def open_mapped(path: str) -> ipc.RecordBatchFileReader:
    """The file memory-mapped where it is local (only the pages a reader touches are read), else read."""
    return _open(path) if storage.is_url(path) else ipc.open_file(pa.memory_map(path))


def _partition_pairs(path: str, partition_index: int) -> tuple[np.ndarray, np.ndarray]:
    """The rows of a node shard's two-column file whose first column lies in partition
    ``partition_index``: one binary-searched range of a file marked ``SORTED_BY_FIRST``, else a scan."""
    table = open_mapped(path).read_all()
    first, second = table.column(0).to_numpy(), table.column(1).to_numpy()
    if (table.schema.metadata or {}).get(b"sorted_by_first") == b"1":
        bounds = (np.int64(partition_index) + np.arange(2, dtype=np.int64)) << np.int64(32)
        lo, hi = np.searchsorted(first, bounds)
        return first[lo:hi].copy(), second[lo:hi].copy()
    sel = (first >> np.int64(32)) == partition_index
    return first[sel], second[sel]


def read_batch(path: str, index: int) -> pa.RecordBatch:
    """Batch ``index`` of an Arrow IPC file, reading only its footer and that batch's buffers (a key
    shard's task must not hold every partition's whole scatter file)."""
    with storage.open_read(path) as fh:
        return ipc.open_file(fh).get_batch(index)


def _scatter_rows(path: str) -> int:
    return _scatter_meta(path, "rows")


def _scatter_meta(path: str, key: str) -> int:
    with storage.open_read(path) as fh:
        return int(json.loads(ipc.open_file(fh).schema.metadata[key.encode()]))


def load_partition_keys(ctx: JobContext, op_index: int, part: dict[str, Any]) -> pa.Table:
    op = ctx.plan.ops[op_index]
    cp = keys_store(ctx.job_dir).load_valid(
        op_index, op.name, part["partition_id"], part["content_hash"], op.fingerprint
    )
    if cp is None:
        raise MissingKeysError(
            f"global op {op_index} ({op.name}): keys of partition {part['partition_id']} "
            f"(rows {part['start_row']}-{part['end_row'] - 1}) are missing; clear that partition's segment task"
        )
    return cp.table


def scatter_partition(job_dir: str, op_index: int, folder: str, partition_index: int, shards: int) -> dict[str, Any]:
    """Write partition ``partition_index``'s items as one batch per key shard, each bucket's first item of
    the partition only, and the partition's other items as local edges to that first item (a combiner:
    a skewed key costs its shard one item per partition, not one per row); returns its row count and
    how many local edges it wrote.  The local edges are written first, so a present scatter file means
    both are complete."""
    path = storage.join(folder, layout.shard_scatter_file(partition_index))
    local_path = storage.join(folder, layout.shard_local_edges_file(partition_index))
    if storage.exists(path):
        return {"rows": _scatter_rows(path), "local_edges": _scatter_meta(path, "local_edges")}
    ctx = JobContext(job_dir)
    op = ctx.plan.ops[op_index]
    keys = load_partition_keys(ctx, op_index, ctx.partitioning_info["partitions"][partition_index])
    op_impl = create_op(op.name, op.args, ctx.recipe.text_key)
    t, k0, k1, pos, lu, lv = _combined_items(*row_items(op_impl, keys, partition_index))
    local = pa.record_batch([pa.array(lu, pa.int64()), pa.array(lv, pa.int64())], schema=EDGE_SCHEMA)
    storage.atomic_write_bytes(local_path, ipc_bytes(EDGE_SCHEMA, [local]))
    # SimHash compares every value of a (t, k0) bucket, so its bucket key leaves the full value out.
    bucket_k1 = np.zeros_like(k1) if isinstance(op_impl, DocumentSimhashDeduplicator) else k1
    shard = key_shard(t, k0, bucket_k1, shards)
    order = np.argsort(shard, kind="stable")
    bounds = np.searchsorted(shard[order], np.arange(shards + 1))
    table = pa.table([t[order], k0[order], k1[order], pos[order]], schema=ITEM_SCHEMA)
    batches = [
        table.slice(int(bounds[s]), int(bounds[s + 1] - bounds[s])).combine_chunks().to_batches(max_chunksize=None)
        for s in range(shards)
    ]
    batches = [b[0] if b else pa.RecordBatch.from_pylist([], schema=ITEM_SCHEMA) for b in batches]
    meta = {"rows": keys.num_rows, "local_edges": len(lu)}
    storage.atomic_write_bytes(path, ipc_bytes(ITEM_SCHEMA, batches, meta))
    return {"rows": keys.num_rows, "local_edges": len(lu)}


def _combined_items(t: np.ndarray, k0: np.ndarray, k1: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, ...]:
    """Each ``(t, k0, k1)`` bucket's first item of the partition, and the local edges ``(u, v)`` from its
    other items to it (deduplicated: a row repeated in several buckets links to each first row once)."""
    order = np.lexsort((pos, k1, k0, t))
    t, k0, k1, pos = t[order], k0[order], k1[order], pos[order]
    del order
    new = _equal_runs(t, k0, k1)
    u, v = _star_edges(pos, new)
    if len(u):
        pairs = np.unique(np.stack([u, v], axis=1), axis=0)
        u, v = pairs[:, 0].copy(), pairs[:, 1].copy()
    return t[new], k0[new], k1[new], pos[new], u, v


def _equal_runs(t: np.ndarray, k0: np.ndarray, k1: np.ndarray) -> np.ndarray:
    """Where each run of equal ``(t, k0, k1)`` starts, over items already sorted by them."""
    n = len(t)
    new = np.ones(n, dtype=bool)
    if n > 1:
        new[1:] = (t[1:] != t[:-1]) | (k0[1:] != k0[:-1]) | (k1[1:] != k1[:-1])
    return new


def _star_edges(pos: np.ndarray, new: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each item that does not start its run, linked to its run's first (smallest) position."""
    head = pos[new][np.cumsum(new) - 1]
    dup = ~new
    return pos[dup], head[dup]


def _hamming_edges(
    t: np.ndarray, k0: np.ndarray, full: np.ndarray, pos: np.ndarray, max_distance: int
) -> tuple[np.ndarray, np.ndarray]:
    """Pairs of run heads (distinct full values) in one ``(t, k0)`` bucket within ``max_distance`` bits;
    the items are sorted by ``(t, k0)``. Work is the sum of squared bucket sizes, as SimHash's index."""
    new = np.ones(len(t), dtype=bool)
    if len(t) > 1:
        new[1:] = (t[1:] != t[:-1]) | (k0[1:] != k0[:-1])
    a, b = close_pairs_in_runs(new, full, max_distance)
    return pos[b], pos[a]


def shard_edges(
    op_impl: Op, t: np.ndarray, k0: np.ndarray, k1: np.ndarray, pos: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """One key shard's duplicate edges ``(u, v)``, ``v < u``, deduplicated."""
    order = np.lexsort((pos, k1, k0, t))
    t, k0, k1, pos = t[order], k0[order], k1[order], pos[order]
    del order
    new = _equal_runs(t, k0, k1)
    u, v = _star_edges(pos, new)
    if isinstance(op_impl, DocumentSimhashDeduplicator):
        hu, hv = _hamming_edges(t[new], k0[new], k1[new], pos[new], op_impl.hamming_distance)
        u, v = np.concatenate([u, np.maximum(hu, hv)]), np.concatenate([v, np.minimum(hu, hv)])
    if len(u):
        pairs = np.unique(np.stack([u, v], axis=1), axis=0)
        u, v = pairs[:, 0].copy(), pairs[:, 1].copy()
    return u, v


class ShardTooLargeError(DJError, MemoryError):
    """One key shard holds more items than a task may hold; the message names the shard, its size and
    the settings to change.  Nothing committed is lost: the other shards' outputs are kept."""


@in_fresh_worker
def resolve_key_shard(
    job_dir: str, op_index: int, folder: str, shard: int, partitions: int, node_shards: int, budget: int = 0
) -> dict[str, Any]:
    """Read key shard ``shard``'s items from every partition's scatter file, find its duplicate edges,
    and write them by node shard of their later row; ``done`` is written last. Returns its counts.
    ``budget`` (bytes, 0: none): a shard whose items would need more than twice it fails with
    :class:`ShardTooLargeError` before it sorts them."""
    done = storage.join(folder, layout.shard_done_file(shard))
    if storage.exists(done):
        counts: dict[str, Any] = json.loads(storage.read_bytes(done))
        return counts
    ctx = JobContext(job_dir)
    op = ctx.plan.ops[op_index]
    op_impl = create_op(op.name, op.args, ctx.recipe.text_key)
    batches, items_read = [], 0
    for p in range(partitions):
        batches.append(read_batch(storage.join(folder, layout.shard_scatter_file(p)), shard))
        items_read += batches[-1].num_rows
        _check_shard_size(op_index, op.name, shard, items_read, budget)
    items = pa.Table.from_batches(batches, schema=ITEM_SCHEMA)
    del batches
    cols = [items.column(c).to_numpy() for c in ("t", "k0", "k1", "pos")]
    del items
    u, v = shard_edges(op_impl, *cols)
    del cols
    target = node_shard(u, partitions, node_shards)
    order = np.argsort(target, kind="stable")
    bounds = np.searchsorted(target[order], np.arange(node_shards + 1))
    for r in range(node_shards):
        sel = order[bounds[r] : bounds[r + 1]]
        batch = pa.record_batch([pa.array(u[sel], pa.int64()), pa.array(v[sel], pa.int64())], schema=EDGE_SCHEMA)
        storage.atomic_write_bytes(
            storage.join(folder, layout.shard_edges_file(shard, r)), ipc_bytes(EDGE_SCHEMA, [batch])
        )
    maybe_fail(job_dir, load_faults(job_dir), None, op_index, point="global_shard")
    summary = {"shard": shard, "edges": int(len(u))}
    storage.atomic_write_bytes(done, json.dumps(summary).encode())
    return summary


def _check_shard_size(op_index: int, op_name: str, shard: int, items: int, budget: int) -> None:
    if budget and items * BYTES_PER_ITEM > 2 * budget:
        raise ShardTooLargeError(
            f"global op {op_index} ({op_name}): key shard {shard} holds more than {items:,} items "
            f"(about {items * BYTES_PER_ITEM / 2**20:,.0f} MiB to resolve), over twice the data one task may "
            f"hold ({budget_words(budget)}); raise [dj] global_step_shards or "
            "[dj] global_shard_memory_mb and clear the global step's task; committed shards are kept"
        )


def removed_rows(result_files: list[str], partition_index: int) -> tuple[np.ndarray, np.ndarray]:
    """Local rows of partition ``partition_index`` removed as duplicates, and each one's representative
    position, from the node shard's ``(node, rep)`` files (the smallest rep when a file repeats a node)."""
    nodes, reps = [], []
    for path in result_files:
        node, rep = _partition_pairs(path, partition_index)
        nodes.append(node)
        reps.append(rep)
    node = np.concatenate(nodes) if nodes else np.zeros(0, np.int64)
    rep = np.concatenate(reps) if reps else np.zeros(0, np.int64)
    order = np.lexsort((rep, node))
    node, rep = node[order], rep[order]
    first = np.ones(len(node), dtype=bool)
    first[1:] = node[1:] != node[:-1]
    node, rep = node[first], rep[first]
    # Exact keys: a row links to its partition's first row of the key (a local edge), which links to the
    # key's first row overall (a key shard's edge); follow that second link.  (Components' results
    # already name each cluster's smallest row, which links nowhere.)
    if len(node):
        at = np.minimum(np.searchsorted(node, rep), len(node) - 1)
        rep = np.where(node[at] == rep, rep[at], rep)
    return (node & np.int64(0xFFFFFFFF)), rep


def _trace_pairs(rows: np.ndarray, reps: np.ndarray, partition_index: int, n: int) -> list[tuple[int, int]]:
    """``(removed, representative)`` positions of the partition's first ``n`` removed rows whose
    representative no earlier removed row of the partition has (the tracer's rule, observe/tracer.py)."""
    if not n or not len(rows):
        return []
    _, first = np.unique(reps, return_index=True)
    take = np.sort(first)[:n]
    pos = (np.int64(partition_index) << np.int64(32)) | rows[take]
    return list(zip(pos.tolist(), reps[take].tolist()))


def decide_partition(
    job_dir: str,
    op_index: int,
    partition_index: int,
    result_files: list[str],
    history_memory: int,
    trace_num: int,
    query_memory: int = 0,
) -> dict[str, Any]:
    """What partition ``partition_index`` tells the step before any mask commits: its rows, its first
    ``trace_num`` duplicate pairs for the tracer (``trace_num`` 0: none), and, with ``history_memory``
    (the lookup's bound on history entries in memory; 0: the op checks no history), its in-night kept
    rows that the pinned history holds (engine/history/lookup.py; ``positions`` are rows of the
    partition, looked up in batches of at most ``query_memory`` bytes of keys) and how many were looked
    up.  Deterministic, so a retried step recomputes the same."""
    from airflow_provider_dj.engine.history.lookup import find_history_duplicates

    ctx = JobContext(job_dir)
    op = ctx.plan.ops[op_index]
    keys = load_partition_keys(ctx, op_index, ctx.partitioning_info["partitions"][partition_index])
    rows, reps = removed_rows(result_files, partition_index)
    out: dict[str, Any] = {"rows": keys.num_rows, "pairs": _trace_pairs(rows, reps, partition_index, trace_num)}
    if history_memory:
        keep = np.ones(keys.num_rows, dtype=bool)
        keep[rows] = False
        unkeyed = unkeyed_rows(keys)
        cand = np.flatnonzero(keep if unkeyed is None else keep & ~unkeyed)  # an unkeyed row is never a duplicate
        op_impl = create_op(op.name, op.args, ctx.recipe.text_key)
        out["candidates"] = int(len(cand))
        out["history"] = find_history_duplicates(
            job_dir, op_impl, keys, cand, memory_bytes=history_memory, query_bytes=query_memory
        )
    return out
