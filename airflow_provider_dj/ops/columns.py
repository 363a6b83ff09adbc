"""The reserved ``__dj__*`` column names this package sets on tables, each defined once.

Ops and the engine both read these columns (an op keys its durable records by the input row;
the engine strips its own columns from every export), and ``ops/`` may not import ``engine/``,
so the names live here, at the lowest layer that needs them.

* ``STATS_COLUMN``: Data-Juicer's per-row statistics struct; exported when
  ``keep_stats_in_res_ds``.
* ``ENGINE_COLUMNS`` (and ``ENGINE_COLUMN_PREFIXES``): the bookkeeping columns of this
  package; never exported, never handed to a Data-Juicer op.  A test scans the package for
  ``"__dj__..."`` literals and fails on one that is neither here nor a field Data-Juicer
  defines (``engine/output/fields.py``), so a new internal column cannot leak into exports.
"""

from __future__ import annotations

#: Data-Juicer's statistics struct (filters write their stats into it).
STATS_COLUMN = "__dj__stats__"
#: A Mapper may add this string column to flag per-sample failures (null = ok, text = the reason,
#: e.g. an LLM's empty answer).  The engine moves flagged rows to ``failed/`` and counts them as
#: failed, whatever ``skip_op_error`` says: a bad answer is a sample's failure, not the op crashing.
ROW_ERROR_COLUMN = "__dj__row_error__"
#: The input row number of every row.  The engine sets it when it reads a partition; it travels
#: through every op (lineage, the tracer, batch cursors and call records key by it).
INPUT_ROW_COLUMN = "__dj__input_row__"
#: Why a committed batch of an expensive op failed (the batch cursor's failed rows).
BATCH_FAILURE_REASON_COLUMN = "__dj__batch_failure_reason__"
#: A reused segment output's row count (a placeholder table stands for the rows).
REUSED_ROWS_COLUMN = "__dj__reused_rows__"
#: A delta checkpoint's keep flag per row of the state before it.
DELTA_KEEP_COLUMN = "__dj__delta_keep__"
#: + a column name: which rows of a patched column an op changed (delta checkpoints).
DELTA_SET_PREFIX = "__dj__delta_set__"
#: The columns of a ``failed/`` row: the reason, its exception type, the op and the partition.
FAILED_ERROR_COLUMN = "__dj__error__"
FAILED_ERROR_TYPE_COLUMN = "__dj__error_type__"
FAILED_OP_COLUMN = "__dj__failed_op__"
FAILED_OP_INDEX_COLUMN = "__dj__failed_op_index__"
FAILED_PARTITION_COLUMN = "__dj__partition__"

#: Columns this package adds for its own bookkeeping; never exported.
ENGINE_COLUMNS = frozenset(
    {
        INPUT_ROW_COLUMN,
        ROW_ERROR_COLUMN,
        BATCH_FAILURE_REASON_COLUMN,
        REUSED_ROWS_COLUMN,
        DELTA_KEEP_COLUMN,
        FAILED_ERROR_COLUMN,
        FAILED_ERROR_TYPE_COLUMN,
        FAILED_OP_COLUMN,
        FAILED_OP_INDEX_COLUMN,
        FAILED_PARTITION_COLUMN,
    }
)
ENGINE_COLUMN_PREFIXES = (DELTA_SET_PREFIX,)


def is_engine_column(name: str) -> bool:
    """Whether ``name`` is one of this package's bookkeeping columns."""
    return name in ENGINE_COLUMNS or name.startswith(ENGINE_COLUMN_PREFIXES)


__all__ = [
    "BATCH_FAILURE_REASON_COLUMN",
    "DELTA_KEEP_COLUMN",
    "DELTA_SET_PREFIX",
    "ENGINE_COLUMNS",
    "ENGINE_COLUMN_PREFIXES",
    "FAILED_ERROR_COLUMN",
    "FAILED_ERROR_TYPE_COLUMN",
    "FAILED_OP_COLUMN",
    "FAILED_OP_INDEX_COLUMN",
    "FAILED_PARTITION_COLUMN",
    "INPUT_ROW_COLUMN",
    "REUSED_ROWS_COLUMN",
    "ROW_ERROR_COLUMN",
    "STATS_COLUMN",
    "is_engine_column",
]
