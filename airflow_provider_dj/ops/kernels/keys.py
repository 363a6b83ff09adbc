"""Deduplication keys: 16-byte fixed-width binary, one per row, and the first occurrence of each.

Shared by the exact and near-duplicate deduplicators, the Data-Juicer adapter's deduplicators and the
engine's global phase, which all decide "first in input order wins" the same way.
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
    """True at the first row holding each key, in the order given.

    ``keys`` is one array or a list of arrays (e.g. every partition's keys in
    input order).  The 16-byte keys are viewed as two uint64 columns and
    sorted with numpy's stable ``lexsort``; within each run of equal keys the
    first sorted row is then the earliest one.  O(n log n), no Python loop,
    memory about 40 bytes per key (keys, sort order, sorted copy) -- faster
    than a hash-based ``pc.index_in`` of the keys against themselves.
    """
    order, starts = _sorted_key_runs(keys)
    mask = np.zeros(len(order), dtype=bool)
    mask[order[starts]] = True
    return mask


def _sorted_key_runs(keys: KeysLike) -> tuple[np.ndarray, np.ndarray]:
    """The stable sort both look-ups share: the rows in key order, and where each run of equal keys starts
    in that order (so ``order[starts]`` are the first occurrences, earliest row first within a run)."""
    arr = _as_key_array(keys)
    n = len(arr)
    if n == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=bool)
    if arr.null_count:
        raise ValueError("dedup keys must not be null")
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
    """Per row, the position of the first row holding its key (itself for a first occurrence).

    The same stable sort as ``first_occurrence_mask`` (so ``index == arange`` is that mask): the global
    phase uses it when lineage names, for every removed duplicate, the kept row it repeats."""
    order, starts = _sorted_key_runs(keys)
    n = len(order)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    first = order[starts][np.cumsum(starts) - 1]  # each sorted row's run head: the earliest row of its key
    index = np.empty(n, dtype=np.int64)
    index[order] = first
    return index
