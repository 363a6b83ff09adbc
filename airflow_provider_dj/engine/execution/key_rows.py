"""A deduplicator's keys for one partition, with the rows it cannot read set aside as ``op_runner`` does.

Why: a key phase reads every row (``image_deduplicator`` opens the images a row names), and a row it
cannot read must neither stop the job under ``skip_op_error`` nor be kept or dropped unseen.  As in
``op_runner``, a slice the op raises on is halved down to the rows that fail; each such row gets a
null key (never a duplicate: ops/kernels/keys.py, so the global step, sharded or not, keeps it) and
its reason in ``KEY_ERROR_COLUMN``.  The global step copies the reasons into the partition's mask
table, and the segment that applies the mask sets those rows aside in ``failed/`` and counts them as
the op's failures (``segment_start.apply_global_mask``).  Without ``skip_op_error`` the op's error
fails the partition.  Signature deduplicators (MinHash, SimHash) read text only and keep failing as
a whole: a signature table has no null row.
"""

from __future__ import annotations

import pyarrow as pa

from airflow_provider_dj.engine.execution.table_slices import concat_in_order
from airflow_provider_dj.engine.storage.global_op_state import KEY_ERROR_COLUMN, KEYS_COLUMN
from airflow_provider_dj.ops.base import OpFatalError, SignatureDeduplicator
from airflow_provider_dj.ops.kernels.keys import KEY_TYPE


def compute_keys(op, table: pa.Table, slices: list[tuple[int, int]], skip_op_error: bool) -> pa.Table:
    """The op's keys table for ``table`` computed slice by slice: ``KEYS_COLUMN`` (or the op's signature
    table), plus ``KEY_ERROR_COLUMN`` when some row failed (null for the rows that did not)."""
    if isinstance(op, SignatureDeduplicator) or not skip_op_error:
        keys = concat_in_order([op.compute_hash(table.slice(offset, length)) for offset, length in slices])
        return keys if isinstance(keys, pa.Table) else pa.table({KEYS_COLUMN: keys})
    run = _IsolatedKeys(op)
    for offset, length in slices:
        run.apply(table.slice(offset, length))
    keys = pa.chunked_array(run.parts, KEY_TYPE) if run.parts else pa.chunked_array([], KEY_TYPE)
    if not any(run.errors):
        return pa.table({KEYS_COLUMN: keys})
    return pa.table({KEYS_COLUMN: keys, KEY_ERROR_COLUMN: pa.array(run.errors, pa.string())})


class _IsolatedKeys:
    """Keys slice by slice, in order; a slice the op raises on is halved, a failing row keyed null."""

    def __init__(self, op) -> None:
        self.op = op
        self.parts: list[pa.Array] = []
        self.errors: list[str | None] = []

    def apply(self, piece: pa.Table) -> None:
        try:
            keys = self.op.compute_hash(piece)
        except OpFatalError:
            raise
        except Exception as exc:
            if piece.num_rows > 1:
                half = piece.num_rows // 2
                self.apply(piece.slice(0, half))
                self.apply(piece.slice(half))
                return
            if piece.num_rows == 0:
                raise  # no row to blame: the op itself is broken
            self.parts.append(pa.nulls(1, KEY_TYPE))
            self.errors.append(f"{type(exc).__name__}: {exc}".strip()[:2000])
            return
        if len(keys) != piece.num_rows:
            raise RuntimeError(f"{self.op.name}.compute_hash returned {len(keys)} keys for {piece.num_rows} rows")
        keys = keys.combine_chunks() if isinstance(keys, pa.ChunkedArray) else keys
        self.parts.append(keys if keys.type == KEY_TYPE else keys.cast(KEY_TYPE))
        self.errors.extend([None] * piece.num_rows)
