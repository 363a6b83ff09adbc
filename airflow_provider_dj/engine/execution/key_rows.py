"""A deduplicator's keys for one partition, with the rows it cannot key set aside as ``op_runner`` does.

Why: a key phase reads every row (``image_deduplicator`` opens the images a row names, MinHash and
SimHash shingle its text), and a row it cannot key must neither stop the job under ``skip_op_error``
nor be kept or dropped unseen.  As in ``op_runner``, a slice the op raises on is halved down to the
rows that fail; each such row gets a null key -- an exact deduplicator's null key, or a signature
deduplicator's row of null signatures (``SignatureDeduplicator.signature_schema``) -- that is never a
duplicate of anything nor anything's original (ops/kernels/keys.py, ops/dedup/near.py; the sharded
step gives it no item), and its reason in ``KEY_ERROR_COLUMN``.  The global step copies the reasons
into the partition's mask table, and the segment that applies the mask sets those rows aside in
``failed/`` and counts them as the op's failures (``segment_start.apply_global_mask``).

Without ``skip_op_error`` the partition fails: the slices are keyed again one half at a time down to
the first row that fails alone, and :class:`UnkeyableRowError` names it (its input row) with the op's
own error.  An op whose signatures have no null row (``signature_schema`` None: the Data-Juicer
adapter's near-duplicate ops) keeps failing as a whole.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from airflow_provider_dj.core.errors import DJError
from airflow_provider_dj.engine.execution.table_slices import concat_in_order
from airflow_provider_dj.engine.storage.global_op_state import KEY_ERROR_COLUMN, KEYS_COLUMN
from airflow_provider_dj.ops.base import Deduplicator, OpFatalError, SignatureDeduplicator
from airflow_provider_dj.ops.columns import INPUT_ROW_COLUMN
from airflow_provider_dj.ops.kernels.keys import KEY_TYPE


class UnkeyableRowError(DJError, RuntimeError):
    """A global op's key phase cannot key one row and ``skip_op_error`` is off; the message names the op,
    the row and the op's own error, and what to change."""

    def __init__(self, op_name: str, where: str, reason: str) -> None:
        super().__init__(
            f"{op_name}: cannot compute the key of {where}: {reason}. Fix that row, or set skip_op_error: true "
            f"to set such rows aside in failed/ (they are then never duplicates) and deduplicate the others"
        )
        self.op_name, self.where, self.reason = op_name, where, reason

    def __reduce__(self) -> tuple[Any, ...]:
        # Ray carries a task's exception back by pickling it: rebuild it from its fields, not its message.
        return (UnkeyableRowError, (self.op_name, self.where, self.reason))


def compute_keys(op: Deduplicator, table: pa.Table, slices: list[tuple[int, int]], skip_op_error: bool) -> pa.Table:
    """The op's keys table for ``table`` computed slice by slice: ``KEYS_COLUMN`` (or the op's signature
    table), plus ``KEY_ERROR_COLUMN`` when some row failed (null for the rows that did not)."""
    signature = op.signature_schema() if isinstance(op, SignatureDeduplicator) else None
    if not skip_op_error or (isinstance(op, SignatureDeduplicator) and signature is None):
        try:
            keys = concat_in_order([op.compute_hash(table.slice(offset, length)) for offset, length in slices])
        except OpFatalError:
            raise
        except Exception:
            if skip_op_error:
                raise  # an op without null signatures: the partition fails (see the module docstring)
            _IsolatedKeys(op, table, signature, strict=True).run(slices)
            raise  # no row fails alone: the op's error is about the slice, not a row
        return keys if isinstance(keys, pa.Table) else pa.table({KEYS_COLUMN: keys})
    run = _IsolatedKeys(op, table, signature, strict=False)
    run.run(slices)
    keys = run.keys()
    if not any(run.errors):
        return keys
    return keys.append_column(KEY_ERROR_COLUMN, pa.array(run.errors, pa.string()))


class _IsolatedKeys:
    """Keys slice by slice, in order; a slice the op raises on is halved, and a row that fails alone is
    keyed null (``strict``: raises :class:`UnkeyableRowError` naming it)."""

    def __init__(self, op: Deduplicator, table: pa.Table, signature: pa.Schema | None, *, strict: bool) -> None:
        self.op, self.table, self.signature, self.strict = op, table, signature, strict
        self.parts: list[Any] = []
        self.errors: list[str | None] = []

    def run(self, slices: list[tuple[int, int]]) -> None:
        for offset, length in slices:
            self.apply(offset, length)

    def apply(self, offset: int, length: int) -> None:
        piece = self.table.slice(offset, length)
        try:
            keys = self.op.compute_hash(piece)
        except OpFatalError:
            raise
        except Exception as exc:
            if length > 1:
                half = length // 2
                self.apply(offset, half)
                self.apply(offset + half, length - half)
                return
            if length == 0:
                raise  # no row to blame: the op itself is broken
            reason = f"{type(exc).__name__}: {exc}".strip()[:2000]
            if self.strict:
                raise UnkeyableRowError(self.op.name, self._where(offset), reason) from exc
            self.parts.append(self._null_row())
            self.errors.append(reason)
            return
        if len(keys) != length:
            raise RuntimeError(f"{self.op.name}.compute_hash returned {len(keys)} keys for {length} rows")
        if not self.strict:
            self.parts.append(self._normalized(keys))
            self.errors.extend([None] * length)

    def _where(self, offset: int) -> str:
        if INPUT_ROW_COLUMN in self.table.column_names:
            return f"input row {self.table.column(INPUT_ROW_COLUMN)[offset].as_py()}"
        return f"row {offset} of the partition's rows"

    def _normalized(self, keys: Any) -> Any:  # a pyarrow table (a signature) or array (a key per row)
        if self.signature is not None:
            return keys if keys.schema == self.signature else keys.select(self.signature.names).cast(self.signature)
        keys = keys.combine_chunks() if isinstance(keys, pa.ChunkedArray) else keys
        return keys if keys.type == KEY_TYPE else keys.cast(KEY_TYPE)

    def _null_row(self) -> Any:  # the same kind as ``_normalized``'s, one null row
        if self.signature is None:
            return pa.nulls(1, KEY_TYPE)
        return pa.table([pa.nulls(1, f.type) for f in self.signature], schema=self.signature)

    def keys(self) -> pa.Table:
        if self.signature is not None:
            return pa.concat_tables(self.parts) if self.parts else self.signature.empty_table()
        keys = pa.chunked_array(self.parts, KEY_TYPE) if self.parts else pa.chunked_array([], KEY_TYPE)
        return pa.table({KEYS_COLUMN: keys})
