"""The in-memory Arrow size of a table, independent of how its rows are split into chunks.

Data-Juicer's sharded export divides ``dataset.data.nbytes`` by ``export_shard_size`` to pick the
shard count (engine/output/shards.py).  That is pyarrow's ``Table.nbytes``: the bytes of the buffer
ranges the rows reference (validity bitmaps, offsets, values).  Our export holds the same rows as
one table per partition, and ``nbytes`` summed over partitions is not the whole table's: every
chunk carries one extra offset per variable-width array and rounds its bitmaps to whole bytes.  A
shard count that moved with the partition count would break partition invariance, so
``ArrowSize`` adds up what does not depend on the chunking (rows, value bytes) per column path and
computes the rest for the whole length at the end.  The total equals ``nbytes`` of the table
concatenated into one chunk (pyarrow's rules: one offset per row, no bitmap for a struct's own
nulls), with a validity bitmap counted where the column has a null (an array built from values, as
Data-Juicer's map writes its columns, has none otherwise).
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc


@dataclass
class _Column:
    """One array path's totals: rows, value bytes, and whether any chunk holds a null."""

    length: int = 0
    value_bytes: int = 0
    has_nulls: bool = False
    offset_width: int = 0  # 4 or 8 for variable-width and list arrays, 0 otherwise
    bit_values: bool = False  # boolean values: one bit each, rounded up over the whole length


class ArrowSize:
    """Accumulates the chunk-independent Arrow size of a sequence of tables with one schema."""

    def __init__(self) -> None:
        self._columns: dict[tuple, _Column] = {}

    def add(self, table: pa.Table) -> None:
        for name, column in zip(table.column_names, table.columns):
            for chunk in column.chunks:
                self._add_array(chunk, (name,))

    @property
    def nbytes(self) -> int:
        total = 0
        for c in self._columns.values():
            if c.has_nulls:
                total += (c.length + 7) // 8
            if c.offset_width:
                total += c.length * c.offset_width
            total += (c.length + 7) // 8 if c.bit_values else c.value_bytes
        return total

    def _column(self, path: tuple) -> _Column:
        col = self._columns.get(path)
        if col is None:
            col = self._columns[path] = _Column()
        return col

    def _add_array(self, arr: pa.Array, path: tuple) -> None:
        t = arr.type
        if pa.types.is_dictionary(t):
            arr, t = arr.dictionary_decode(), t.value_type
        col = self._column(path)
        col.length += len(arr)
        # pyarrow counts no bitmap for a null-typed array nor for a struct's own nulls.
        col.has_nulls = col.has_nulls or (arr.null_count > 0 and not (pa.types.is_null(t) or pa.types.is_struct(t)))
        if pa.types.is_null(t):
            return
        if pa.types.is_boolean(t):
            col.bit_values = True
        elif pa.types.is_string(t) or pa.types.is_binary(t):
            col.offset_width = 4
            col.value_bytes += _value_bytes(arr)
        elif pa.types.is_large_string(t) or pa.types.is_large_binary(t):
            col.offset_width = 8
            col.value_bytes += _value_bytes(arr)
        elif pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_map(t):
            col.offset_width = 8 if pa.types.is_large_list(t) else 4
            self._add_array(_list_values(arr), (*path, "[]"))
        elif pa.types.is_fixed_size_list(t):
            self._add_array(_list_values(arr), (*path, "[]"))
        elif pa.types.is_struct(t):
            for i in range(t.num_fields):
                self._add_array(arr.field(i), (*path, t.field(i).name))
        elif getattr(t, "bit_width", 0) >= 8:
            col.value_bytes += len(arr) * t.bit_width // 8
        else:  # a type this walk does not know: pyarrow's own count for this chunk
            col.value_bytes += arr.nbytes


def _value_bytes(arr: pa.Array) -> int:
    if len(arr) == 0:
        return 0
    return int(pc.sum(pc.binary_length(arr)).as_py() or 0)


def _list_values(arr: pa.Array) -> pa.Array:
    """The child values the list rows reference (their whole offset range, null rows' values too)."""
    if len(arr) == 0:
        return arr.values.slice(0, 0)
    if pa.types.is_fixed_size_list(arr.type):
        size = arr.type.list_size
        return arr.values.slice(arr.offset * size, len(arr) * size)
    offsets = arr.offsets
    start, end = offsets[0].as_py(), offsets[len(arr)].as_py()
    return arr.values.slice(start, end - start)


def table_nbytes(tables) -> int:
    """The chunk-independent Arrow size of ``tables`` taken as one table (see the module docstring)."""
    size = ArrowSize()
    for t in tables:
        size.add(t)
    return size.nbytes


__all__ = ["ArrowSize", "table_nbytes"]
