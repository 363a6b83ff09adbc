"""Which fields reach the export, decided as Data-Juicer 1.6.1's exporter decides.

Data-Juicer (``data_juicer/core/exporter.py``, ``Exporter._export_impl``)
keeps every field of a row except:

* ``__dj__stats__`` and ``__dj__meta__``, unless ``keep_stats_in_res_ds``;
* the hash fields ``__dj__hash``, ``__dj__minhash``, ``__dj__simhash``,
  ``__dj__imagehash``, ``__dj__videohash``, unless ``keep_hashes_in_res_ds``.

Every other field survives, Data-Juicer-internal or not: ``__dj__suffix__``
(which ``suffix_filter`` reads), ``__dj__source_file__``, ``__dj__uid``...
This engine adds bookkeeping columns of its own (``ENGINE_COLUMNS``, defined
with every reserved name in ``ops/columns.py``: the input row number, a
mapper's per-row error, delta-checkpoint flags); those are never exported.
A test scans the package for ``"__dj__..."`` names and fails on one that is
neither an engine column nor a field Data-Juicer defines, so a new internal
column cannot leak into exports unnoticed.

How a recipe's export keys are honoured or refused is checked with the recipe
(``engine/config/export_keys.py``).
"""

from __future__ import annotations

from typing import Iterable

import pyarrow as pa

from airflow_provider_dj.ops.columns import ENGINE_COLUMN_PREFIXES, ENGINE_COLUMNS, STATS_COLUMN, is_engine_column

#: Removed by Data-Juicer's exporter unless keep_stats_in_res_ds.
DJ_STATS_FIELDS = (STATS_COLUMN, "__dj__meta__")
#: Removed by Data-Juicer's exporter unless keep_hashes_in_res_ds (HashKeys it lists).
DJ_HASH_FIELDS = ("__dj__hash", "__dj__minhash", "__dj__simhash", "__dj__imagehash", "__dj__videohash")
#: Every ``__dj__`` field name Data-Juicer 1.6.1 defines (utils/constant.py: Fields, HashKeys).
#: Exported unless listed above; the guard test accepts these names in our code.
DJ_FIELD_NAMES = frozenset(
    {
        *DJ_STATS_FIELDS,
        "__dj__batch_meta__",
        "__dj__context__",
        "__dj__suffix__",
        "__dj__text_tags__",
        "__dj__source_file__",
        "__dj__produced_data__",
        *DJ_HASH_FIELDS,
        "__dj__uid",
        "__dj__line_hashes",
        "__dj__is_unique",
    }
)


def dropped_columns(names: Iterable[str], *, keep_stats: bool, keep_hashes: bool) -> list[str]:
    """The columns an export leaves out: the engine's own, and what Data-Juicer's exporter removes."""
    out = []
    for name in names:
        if is_engine_column(name):
            out.append(name)
        elif name in DJ_STATS_FIELDS and not keep_stats:
            out.append(name)
        elif name in DJ_HASH_FIELDS and not keep_hashes:
            out.append(name)
    return out


def clean_for_export(table: pa.Table, keep_stats: bool, keep_hashes: bool = False) -> pa.Table:
    """``table`` with exactly the fields Data-Juicer would export (input fields survive)."""
    drop = dropped_columns(table.column_names, keep_stats=keep_stats, keep_hashes=keep_hashes)
    return table.drop_columns(drop) if drop else table


__all__ = [
    "DJ_FIELD_NAMES",
    "DJ_HASH_FIELDS",
    "DJ_STATS_FIELDS",
    "ENGINE_COLUMNS",
    "ENGINE_COLUMN_PREFIXES",
    "clean_for_export",
    "dropped_columns",
    "is_engine_column",
]
