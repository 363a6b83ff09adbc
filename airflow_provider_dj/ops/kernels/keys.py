"""Deduplication keys: 16-byte fixed-width binary, one per row, and the first occurrence of each.

Shared by the exact and near-duplicate deduplicators, the Data-Juicer adapter's deduplicators and the
engine's global phase, which all decide "first in input order wins" the same way.

A null key marks a row that is never a duplicate and never the kept row of one: it is kept, and it
matches nothing, not even another null (``image_deduplicator``'s rows without images, which
Data-Juicer always keeps).  The engine's sharded global step gives such a row no item
(engine/execution/shard_stages.py), which decides the same.
"""

from __future__ import annotations

from typing import Sequence, Union

import numpy as np
import pyarrow as pa

#: Every deduplicator's key column: 16 bytes per row (an xxh3-128 digest or an LSH band signature).
KEY_TYPE = pa.binary(16)

#: Rows compared at a time when finding runs of equal keys in sorted order.
_RUN_BLOCK = 1 << 20

KeysLike = Union[pa.Array, pa.ChunkedArray, Sequence[Union[pa.Array, pa.ChunkedArray]]]


def _as_key_array(keys: KeysLike) -> pa.FixedSizeBinaryArray:
    if isinstance(keys, (pa.Array, pa.ChunkedArray)):
        parts = [keys]
    else:
        parts = list(keys)
    chunks: list[pa.Array] = []
    for part in parts:
        chunks.extend(part.chunks if isinstance(part, pa.ChunkedArray) else [part])
    if not chunks:
        return pa.array([], KEY_TYPE)
    for i, chunk in enumerate(chunks):
        if chunk.type != KEY_TYPE:
            if not (pa.types.is_binary(chunk.type) or pa.types.is_large_binary(chunk.type)):
                raise TypeError(f"dedup keys must be {KEY_TYPE}, got {chunk.type}")
            chunks[i] = chunk.cast(KEY_TYPE)  # e.g. read back as plain binary; checks the width
    return pa.chunked_array(chunks, KEY_TYPE).combine_chunks()


def first_occurrence_mask(keys: KeysLike) -> np.ndarray:
    """True at the first row holding each key, in the order given, and at every null key.

    ``keys`` is one array or a list of arrays (e.g. every partition's keys in
    input order).  The 16-byte keys are viewed as two uint64 columns and
    sorted with numpy's stable ``lexsort``; within each run of equal keys the
    first sorted row is then the earliest one.  O(n log n), no Python loop,
    memory about 40 bytes per key (keys, sort order, sorted copy) -- faster
    than a hash-based ``pc.index_in`` of the keys against themselves.
    """
    arr = _as_key_array(keys)
    valid = _valid_rows(arr)
    if valid is not None:
        mask = np.ones(len(arr), dtype=bool)
        mask[valid] = first_occurrence_mask(arr.take(pa.array(valid)))
        return mask
    order, starts = _sorted_key_runs(arr)
    mask = np.zeros(len(order), dtype=bool)
    mask[order[starts]] = True
    return mask


def _valid_rows(arr: pa.FixedSizeBinaryArray) -> np.ndarray | None:
    """The positions of the non-null keys when some key is null, else None."""
    if not arr.null_count:
        return None
    return np.flatnonzero(arr.is_valid().to_numpy(zero_copy_only=False))


def _sorted_key_runs(arr: pa.FixedSizeBinaryArray) -> tuple[np.ndarray, np.ndarray]:
    """The stable sort both look-ups share, over keys without nulls: the rows in key order, and where
    each run of equal keys starts in that order (so ``order[starts]`` are the first occurrences,
    earliest row first within a run)."""
    n = len(arr)
    if n == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=bool)
    words = np.frombuffer(arr.buffers()[1], dtype="<u8")[2 * arr.offset : 2 * (arr.offset + n)].reshape(n, 2)
    order = np.lexsort((words[:, 1], words[:, 0]))
    # Runs are found block by block, so no sorted copy of all keys (16 bytes a row) is ever held: the
    # global step's peak memory is what bounds a job's row count (engine/planning/global_memory.py).
    starts = np.ones(n, dtype=bool)
    for lo in range(1, n, _RUN_BLOCK):
        hi = min(n, lo + _RUN_BLOCK)
        starts[lo:hi] = (words[order[lo:hi]] != words[order[lo - 1 : hi - 1]]).any(axis=1)
    return order, starts


def first_occurrence_index(keys: KeysLike) -> np.ndarray:
    """Per row, the position of the first row holding its key (itself for a first occurrence and for a
    null key).

    The same stable sort as ``first_occurrence_mask`` (so ``index == arange`` is that mask): the global
    phase uses it when lineage names, for every removed duplicate, the kept row it repeats."""
    arr = _as_key_array(keys)
    valid = _valid_rows(arr)
    if valid is not None:
        index = np.arange(len(arr), dtype=np.int64)
        index[valid] = valid[first_occurrence_index(arr.take(pa.array(valid)))]
        return index
    order, starts = _sorted_key_runs(arr)
    n = len(order)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    first = order[starts][np.cumsum(starts) - 1]  # each sorted row's run head: the earliest row of its key
    index = np.empty(n, dtype=np.int64)
    index[order] = first
    return index
