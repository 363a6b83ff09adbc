"""Row slices of a partition bounded by the bytes of its text, for ops that work row by row.

Why: an Arrow string array holds at most 2 GiB (32-bit offsets), and many kernels combine a
column's chunks into one array before they work on it; a partition with more text than that fails
with ``ArrowCapacityError`` in whichever op first combines it.  A per-row op (a mapper, a filter, a
global op's key phase) gives the same rows whatever slices it is run on, so running it on slices of
at most ``[dj] op_slice_mb`` of text, in order, and concatenating the results is exact, and it also
bounds the op's working memory.  A partition under the bound is one slice: the op sees the table
unchanged.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from airflow_provider_dj import settings

MIB = 1 << 20


def slice_bytes() -> int:
    """The most bytes of text one slice holds (the ``op_slice_mb`` setting), at least 1."""
    return max(1, int(float(settings.get("op_slice_mb")) * MIB))


def row_sizes(table: pa.Table, text_key: str) -> np.ndarray:
    """Each row's size in bytes as slicing counts it: its text's UTF-8 bytes, or, when the table has
    no string column of that name, an even share of the table's bytes."""
    n = table.num_rows
    col = table.column(text_key) if text_key in table.column_names else None
    if col is not None and (pa.types.is_string(col.type) or pa.types.is_large_string(col.type)):
        lengths = pc.fill_null(pc.binary_length(col), 0)
        return np.concatenate([c.to_numpy(zero_copy_only=False) for c in lengths.chunks] or [np.zeros(0)]).astype(
            np.int64
        )
    return np.full(n, table.nbytes // max(n, 1), dtype=np.int64)


def byte_slices(table: pa.Table, text_key: str, max_bytes: int | None = None) -> list[tuple[int, int]]:
    """``(offset, length)`` of consecutive slices covering every row of ``table`` in order, each with at
    most ``max_bytes`` of text (default: :func:`slice_bytes`), except a single row larger than that,
    which is a slice of its own.  One slice when the whole table fits; none for an empty table."""
    n = table.num_rows
    if n == 0:
        return []
    limit = slice_bytes() if max_bytes is None else max(1, int(max_bytes))
    if table.nbytes <= limit:
        return [(0, n)]
    sizes = row_sizes(table, text_key)
    if int(sizes.sum()) <= limit:
        return [(0, n)]
    out: list[tuple[int, int]] = []
    start = 0
    ends = np.cumsum(sizes)
    while start < n:
        base = int(ends[start - 1]) if start else 0
        # The last row whose running total stays within the limit; at least one row per slice.
        stop = int(np.searchsorted(ends, base + limit, side="right"))
        stop = max(stop, start + 1)
        out.append((start, stop - start))
        start = stop
    return out


def concat_in_order(pieces: list[Any], like: pa.Table | pa.Array | None = None) -> Any:
    """Concatenate per-slice results (tables or arrays) in slice order; a single piece is returned as is."""
    if len(pieces) == 1:
        return pieces[0]
    if not pieces:
        return like
    if isinstance(pieces[0], pa.Table):
        return pa.concat_tables(pieces, promote_options="permissive")
    chunks = [c for p in pieces for c in (p.chunks if isinstance(p, pa.ChunkedArray) else [p])]
    return pa.chunked_array(chunks, type=chunks[0].type)
