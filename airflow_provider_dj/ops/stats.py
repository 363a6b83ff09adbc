"""Reading and writing fields of the ``__dj__stats__`` struct column.

Data-Juicer keeps every filter's statistic in one dict per sample and skips
the computation when the key is already there (a re-run, or two filters
sharing a statistic).  The Arrow equivalent is a struct column with one field
per statistic; these helpers add a field, keep the others, and reuse an
existing field's non-null values.
"""

from __future__ import annotations

from typing import Callable

import pyarrow as pa
import pyarrow.compute as pc

from airflow_provider_dj.ops.base import STATS_COLUMN


def _stats_struct(table: pa.Table) -> pa.StructArray | None:
    if STATS_COLUMN not in table.column_names:
        return None
    col = table.column(STATS_COLUMN)
    if not pa.types.is_struct(col.type):
        return None  # e.g. an all-null column read from JSON: nothing to keep
    arr = col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
    return arr  # type: ignore[return-value]


def get_stat(table: pa.Table, key: str) -> pa.Array | None:
    """The stat field as one array (null where the row, or its whole struct, is null)."""
    struct = _stats_struct(table)
    if struct is None or struct.type.get_field_index(key) < 0:
        return None
    return pc.struct_field(struct, key)


def ensure_stat(table: pa.Table, key: str, compute: Callable[[], pa.Array], type_: pa.DataType) -> pa.Table:
    """Return ``table`` with stat ``key`` present and non-null on every row.

    Existing non-null values are reused as DJ does; ``compute`` (all rows, as
    one array) only runs when some value is missing.
    """
    existing = get_stat(table, key)
    if existing is not None and existing.null_count == 0:
        return table
    values = compute()
    if existing is not None:
        values = pc.coalesce(existing, values.cast(existing.type))
    else:
        values = values.cast(type_)
    return set_stat(table, key, values)


def set_stat(table: pa.Table, key: str, values: pa.Array) -> pa.Table:
    """Add or overwrite one field, keeping the column's other fields."""
    struct = _stats_struct(table)
    names: list[str] = []
    arrays: list[pa.Array] = []
    if struct is not None:
        for field in struct.type:
            if field.name != key:
                names.append(field.name)
                arrays.append(pc.struct_field(struct, field.name))
    names.append(key)
    arrays.append(values)
    new = pa.StructArray.from_arrays(arrays, names=names)
    if STATS_COLUMN in table.column_names:
        return table.set_column(table.column_names.index(STATS_COLUMN), STATS_COLUMN, new)
    return table.append_column(STATS_COLUMN, new)
