"""Which fields reach the export, decided as Data-Juicer 1.6.1's exporter decides,
and how its export keys are honoured or refused.

Data-Juicer (``data_juicer/core/exporter.py``, ``Exporter._export_impl``)
keeps every field of a row except:

* ``__dj__stats__`` and ``__dj__meta__``, unless ``keep_stats_in_res_ds``;
* the hash fields ``__dj__hash``, ``__dj__minhash``, ``__dj__simhash``,
  ``__dj__imagehash``, ``__dj__videohash``, unless ``keep_hashes_in_res_ds``.

Every other field survives, Data-Juicer-internal or not: ``__dj__suffix__``
(which ``suffix_filter`` reads), ``__dj__source_file__``, ``__dj__uid``...
This engine adds bookkeeping columns of its own (``ENGINE_COLUMNS``: the input
row number, a mapper's per-row error, delta-checkpoint flags); those are
never exported.  A test scans the package for ``"__dj__..."`` names and fails
on one that is neither an engine column nor a field Data-Juicer defines, so a
new internal column cannot leak into exports unnoticed.

Export keys (``check_export_keys``), each as in Data-Juicer or refused with
the reason, at validation:

* ``export_type`` (jsonl/json/parquet): accepted when it names the format of
  the ``export_path`` suffix; a contradiction is refused (this engine picks
  the format from the suffix, and the file name must not lie about it).
* ``export_shard_size``: 0 (Data-Juicer's default, one file) is accepted;
  > 0 is refused: Data-Juicer would write ``<name>-NN-of-MM`` shard files
  instead of ``export_path``, and this engine's export is one atomic,
  checksummed file in input order.
* ``export_in_parallel``: accepted.  It changes how, not what, is written (in
  Data-Juicer too: the same file with more writer processes); ``false`` makes
  this engine serialize the JSONL export in its own task instead of on Ray
  workers (engine/output/parts.py), the bytes are identical.
* ``keep_hashes_in_res_ds``: accepted.  Hash fields already in the input are
  kept as Data-Juicer keeps them; with a deduplicator in ``process`` it is
  refused, because Data-Juicer would also export the hash that op computed
  per row and this engine keeps those hashes out of the rows.
* ``encrypt_before_export`` / ``decrypt_after_reading`` ``true``: refused.
  Data-Juicer would encrypt (decrypt) the files with a Fernet key; silently
  writing plaintext where encryption was asked for would leak the data.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable

import pyarrow as pa

from airflow_provider_dj.ops.base import ROW_ERROR_COLUMN, STATS_COLUMN

# Spelled here rather than imported from engine/storage/checkpoints.py: the recipe loader
# imports this module, and checkpoints -> job -> recipe would close a cycle.
# tests/unit/engine/test_export_fields.py checks they equal checkpoints' names.
_DELTA_KEEP_COLUMN = "__dj__delta_keep__"
_PATCH_FLAG_PREFIX = "__dj__delta_set__"

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
#: Columns this engine adds for its own bookkeeping; never exported.
ENGINE_COLUMNS = frozenset(
    {
        "__dj__input_row__",  # segment_runner.INPUT_ROW_COLUMN: lineage, tracer, batch cursors
        ROW_ERROR_COLUMN,  # a mapper's per-row failure reason
        "__dj__batch_failure_reason__",  # batch_cursor.REASON_COLUMN
        "__dj__reused_rows__",  # execution/reuse.PLACEHOLDER_COLUMN: a reused segment output's row count
        _DELTA_KEEP_COLUMN,  # delta checkpoints
        # the columns of failed/ rows (segment_runner)
        "__dj__error__",
        "__dj__error_type__",
        "__dj__failed_op__",
        "__dj__failed_op_index__",
        "__dj__partition__",
    }
)
ENGINE_COLUMN_PREFIXES = (_PATCH_FLAG_PREFIX,)

EXPORT_TYPES = ("jsonl", "json", "parquet")


def is_engine_column(name: str) -> bool:
    return name in ENGINE_COLUMNS or name.startswith(ENGINE_COLUMN_PREFIXES)


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


@dataclass(frozen=True)
class ExportOptions:
    keep_hashes_in_res_ds: bool = False
    export_in_parallel: bool = True


#: Builds the exception for a refused key: (key, message) -> exception.  The recipe
#: loader passes its own, which names the file and says whether an override set it.
ErrorFactory = Callable[[str, str], Exception]


def _plain_error(key: str, message: str) -> Exception:
    return ValueError(f"{key}: {message}")


def _bool(data: dict, key: str, default: bool, err: ErrorFactory) -> bool:
    value = data.get(key, default)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise err(key, f"must be true or false, got {value!r}")
    return value


def _suffix_type(export_path: str) -> str:
    name = export_path.rsplit("/", 1)[-1].lower()
    return name.rsplit(".", 1)[-1] if "." in name else ""


def check_export_keys(
    data: dict, export_path: str, deduplicators: Iterable[str] = (), err: ErrorFactory = _plain_error
) -> ExportOptions:
    """Validate Data-Juicer's export keys of a recipe mapping (see the module docstring).

    ``deduplicators``: the names of the recipe's deduplicator ops (for
    keep_hashes_in_res_ds).  Raises ``err(key, message)`` for a refused key.
    """
    export_type = data.get("export_type")
    if export_type is not None:
        if not isinstance(export_type, str) or export_type.lower() not in EXPORT_TYPES:
            raise err(
                "export_type",
                f"must be one of {', '.join(EXPORT_TYPES)} (the formats Data-Juicer "
                f"1.6.1 exports), got {export_type!r}",
            )
        suffix = _suffix_type(export_path)
        if export_type.lower() != suffix:
            raise err(
                "export_type",
                f"export_type {export_type!r} contradicts export_path {export_path!r} "
                f"(a .{suffix} file); this engine writes the format the suffix names: "
                f"name the file *.{export_type.lower()} or remove export_type",
            )
    shard = data.get("export_shard_size")
    if shard is not None:
        if isinstance(shard, bool) or not isinstance(shard, (int, float)):
            raise err("export_shard_size", f"must be a number of bytes, got {shard!r}")
        if shard > 0:
            raise err(
                "export_shard_size",
                f"export_shard_size {shard!r} asks for shard files "
                f"(<name>-NN-of-MM, as Data-Juicer writes them); this engine "
                f"writes one atomic, checksummed export file in input order. "
                f"Set export_shard_size: 0 or remove it",
            )
    for key, what in (
        ("encrypt_before_export", "encrypt the exported files"),
        ("decrypt_after_reading", "decrypt the input files"),
    ):
        if _bool(data, key, False, err):
            raise err(
                key,
                f"Data-Juicer would {what} with a Fernet key; this engine does not, and "
                f"reading or writing plaintext instead would be wrong or leak the data. "
                f"Remove {key} (encrypt at rest with your storage, e.g. server-side "
                f"encryption) or run this recipe with Data-Juicer itself",
            )
    keep_hashes = _bool(data, "keep_hashes_in_res_ds", False, err)
    dedups = sorted(set(deduplicators))
    if keep_hashes and dedups:
        raise err(
            "keep_hashes_in_res_ds",
            f"with {', '.join(dedups)} in process, Data-Juicer would "
            f"export the hash field each of them computed per row "
            f"(__dj__hash, __dj__minhash, __dj__simhash...); this engine "
            f"keeps those hashes out of the rows, so it cannot. Remove "
            f"keep_hashes_in_res_ds (without it Data-Juicer drops them too)",
        )
    return ExportOptions(
        keep_hashes_in_res_ds=keep_hashes, export_in_parallel=_bool(data, "export_in_parallel", True, err)
    )


__all__ = [
    "DJ_FIELD_NAMES",
    "DJ_HASH_FIELDS",
    "DJ_STATS_FIELDS",
    "ENGINE_COLUMNS",
    "ExportOptions",
    "check_export_keys",
    "clean_for_export",
    "dropped_columns",
    "is_engine_column",
]
