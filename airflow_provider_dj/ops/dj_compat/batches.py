"""Arrow tables <-> Data-Juicer batches, and calling a Data-Juicer op on them.

Imported only when an adapted op processes data (``ops.dj_compat.adapter``);
Data-Juicer itself is imported inside ``build_dj_op`` and ``_nested`` so the
conversion helpers stay usable (and testable) without it.

Data-Juicer works on a *batch*: a dict of column name -> list of Python
values.  Its executor calls a batched op with ``op.batch_size`` rows at a time
and any other op with one-row batches, always through its "nested access"
wrapper (``a.b`` keys reach into dicts); this module calls ops the same way,
so an op behaves here as under ``dj-process``.  Two columns get special care:

* ``__dj__stats__`` is an Arrow struct here and a dict per row there.  Null
  fields are left out of the dict (Data-Juicer treats a present key as
  "already computed"), and new statistics are merged back field by field,
  keeping the types and values of fields that were already there.
* ``__dj__meta__`` (tags) is handed over the same way, dicts without nulls.

The engine's own columns (``ops/columns.ENGINE_COLUMNS``, e.g. the input row
number) never reach Data-Juicer and are re-attached unchanged, in their order,
which is only sound because the row count cannot change: an op that splits or
merges samples is refused (``OpFatalError``).
"""

from __future__ import annotations

from typing import Any, Callable

import pyarrow as pa
import pyarrow.compute as pc
import xxhash

from airflow_provider_dj.ops.base import OpFatalError
from airflow_provider_dj.ops.columns import ENGINE_COLUMNS, STATS_COLUMN
from airflow_provider_dj.ops.stats import get_stat, set_stat

META_COLUMN = "__dj__meta__"
_DICT_COLUMNS = (STATS_COLUMN, META_COLUMN)


class RowCountChangedError(OpFatalError):
    """A Data-Juicer mapper returned more or fewer samples than it was given."""


# -- building -------------------------------------------------------------
def build_dj_op(name: str, args: dict, text_key: str):
    """Instantiate Data-Juicer's op ``name`` (imports Data-Juicer).

    ``skip_op_error`` is forced off: Data-Juicer would silently drop a sample
    that raises, while this engine isolates it into ``failed/`` itself
    (recipe-level ``skip_op_error``, engine.execution.op_runner).
    """
    import data_juicer
    import data_juicer.ops
    from data_juicer.ops.base_op import OPERATORS

    cls = OPERATORS.modules.get(name)
    if cls is None:
        from airflow_provider_dj.ops.dj_compat.op_catalog import DJ_VERSION

        raise OpFatalError(
            f"Data-Juicer {data_juicer.__version__} installed here has no op {name!r} (the "
            f"provider's catalog is of Data-Juicer {DJ_VERSION}); install py-data-juicer=={DJ_VERSION}"
        )
    kwargs = {k: v for k, v in args.items() if k != "skip_op_error"}
    kwargs["text_key"] = text_key
    return cls(skip_op_error=False, **kwargs)


def _nested(fn: Callable) -> Callable:
    from data_juicer.core.data import wrap_func_with_nested_access

    return wrap_func_with_nested_access(fn)


# -- conversion ------------------------------------------------------------
def _plain(value: Any) -> Any:
    """Data-Juicer's nested dict wrappers -> plain dicts/lists Arrow can infer."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _dict_cell(value: Any) -> dict:
    if value is None:
        return {}
    return {k: v for k, v in value.items() if v is not None}


def table_to_batch(table: pa.Table, ensure: tuple[str, ...] = ()) -> dict[str, list]:
    """The table's data columns as a Data-Juicer batch; ``ensure`` adds empty dict columns."""
    batch: dict[str, list] = {}
    for name in table.column_names:
        if name in ENGINE_COLUMNS:
            continue
        values = table.column(name).to_pylist()
        if name in _DICT_COLUMNS:
            values = [_dict_cell(v) for v in values]
        batch[name] = values
    for name in ensure:
        if name not in batch:
            batch[name] = [{} for _ in range(table.num_rows)]
    return batch


def _slices(batch: dict[str, list], n: int, size: int):
    for start in range(0, n, max(1, size)):
        yield {k: v[start : start + size] for k, v in batch.items()}


def call_op(
    fn: Callable, batch: dict[str, list], n: int, *, batched: bool, batch_size: int, op_name: str
) -> dict[str, list]:
    """Call a Data-Juicer batch function the way its executor does; returns one merged batch."""
    wrapped = _nested(fn)
    size = batch_size if batched else 1
    parts: list[dict] = []
    for piece in _slices(batch, n, size):
        out = wrapped(piece)
        if not isinstance(out, dict):
            raise OpFatalError(
                f"Data-Juicer op {op_name} returned {type(out).__name__}, expected a batch (dict of lists)"
            )
        parts.append(out)
    keys: list[str] = []
    for part in parts:
        keys.extend(k for k in part if k not in keys)
    merged: dict[str, list] = {}
    for k in keys:
        col: list = []
        for part, piece_n in zip(parts, (len(next(iter(p.values()), [])) for p in parts)):
            col.extend(part[k] if k in part else [None] * piece_n)
        merged[k] = col
    return merged


def _check_rows(out: dict[str, list], n: int, op_name: str) -> None:
    for k, v in out.items():
        if len(v) != n:
            raise RowCountChangedError(
                f"Data-Juicer op {op_name} turned {n} samples into {len(v)} (column {k!r}); ops that split or "
                f"merge samples cannot run in this engine, whose checkpoints, accounting and resume follow one "
                f"output row per input row. Run it in Data-Juicer itself, or split the data before this recipe"
            )


def _to_arrow(values: list, like: pa.ChunkedArray | None, column: str, op_name: str) -> pa.Array | pa.ChunkedArray:
    values = [_plain(v) for v in values]
    if like is not None:
        if values == like.to_pylist():
            return like  # unchanged: keep the exact type and buffers
        try:
            return pa.array(values, type=like.type)
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, OverflowError):
            pass
    try:
        return pa.array(values)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, OverflowError) as exc:
        raise OpFatalError(
            f"Data-Juicer op {op_name} wrote values to column {column!r} that do not fit one Arrow type ({exc})"
        ) from exc


def merge_stats(table: pa.Table, stats: list[dict], op_name: str) -> pa.Table:
    """Merge Data-Juicer's per-row stats dicts into the ``__dj__stats__`` struct, field by field."""
    stats = [_plain(s) or {} for s in stats]
    keys: list[str] = []
    for s in stats:
        keys.extend(k for k in s if k not in keys)
    for key in keys:
        new = _to_arrow([s.get(key) for s in stats], None, f"{STATS_COLUMN}.{key}", op_name)
        old = get_stat(table, key)
        if old is not None and old.type != pa.null() and new.type != old.type:
            try:
                new = new.cast(old.type)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                old = None  # the statistic changed type: take Data-Juicer's values as they are
        if old is not None and old.type != pa.null() and new.type == old.type:
            new = pc.coalesce(old, new)
        table = set_stat(table, key, new)
    # No statistic at all: the table stays as it was (an empty struct column
    # cannot be written to parquet, and filters add the column when needed).
    return table


def batch_to_table(table: pa.Table, out: dict[str, list], op_name: str) -> pa.Table:
    """Data-Juicer's output batch back to Arrow, engine columns re-attached unchanged."""
    arrays: dict[str, Any] = {}
    for name in out:
        if name == STATS_COLUMN:
            continue
        like = table.column(name) if name in table.column_names else None
        arrays[name] = _to_arrow(out[name], like, name, op_name)
    result = pa.table(arrays) if arrays else pa.table({})
    if STATS_COLUMN in out:
        base = table.select([STATS_COLUMN]) if STATS_COLUMN in table.column_names else pa.table({})
        base = base if base.num_columns else pa.table({"_": pa.nulls(table.num_rows)})
        merged = merge_stats(base, out[STATS_COLUMN], op_name)
        if STATS_COLUMN in merged.column_names:
            result = result.append_column(STATS_COLUMN, merged.column(STATS_COLUMN))
    for name in table.column_names:  # in the table's order: the set's order differs between processes
        if name in ENGINE_COLUMNS:
            result = result.append_column(name, table.column(name))
    if not result.num_columns:
        return table
    return result


# -- the three kinds ---------------------------------------------------------
def run_mapper(dj_op, op_name: str, table: pa.Table, *, tagging: bool) -> pa.Table:
    n = table.num_rows
    if n == 0:
        return table
    batch = table_to_batch(table, ensure=(META_COLUMN,) if tagging else ())
    out = call_op(dj_op.process, batch, n, batched=dj_op.is_batched_op(), batch_size=dj_op.batch_size, op_name=op_name)
    _check_rows(out, n, op_name)
    return batch_to_table(table, out, op_name)


def compute_stats(dj_op, op_name: str, table: pa.Table, *, non_stats: bool) -> pa.Table:
    n = table.num_rows
    if n == 0:
        return table
    batch = table_to_batch(table, ensure=() if non_stats else (STATS_COLUMN,))
    out = call_op(
        dj_op.compute_stats, batch, n, batched=dj_op.is_batched_op(), batch_size=dj_op.batch_size, op_name=op_name
    )
    _check_rows(out, n, op_name)
    if STATS_COLUMN not in out:
        return table
    return merge_stats(table, out[STATS_COLUMN], op_name)


def keep_flags(dj_op, op_name: str, table: pa.Table) -> pa.Array:
    n = table.num_rows
    if n == 0:
        return pa.array([], pa.bool_())
    batch = table_to_batch(table)
    wrapped = _nested(dj_op.process)
    size = dj_op.batch_size if dj_op.is_batched_op() else 1
    flags: list[bool] = []
    for piece in _slices(batch, n, size):
        flags.extend(bool(f) for f in wrapped(piece))
    if len(flags) != n:
        raise OpFatalError(f"Data-Juicer filter {op_name} returned {len(flags)} keep flags for {n} samples")
    return pa.array(flags, pa.bool_())


def hash_key(value: Any) -> bytes:
    """16-byte key of a Data-Juicer hash value (a hex string, or a tuple of them)."""
    return xxhash.xxh3_128_digest(repr(value).encode("utf-8"))


def dedup_keys(dj_op, op_name: str, table: pa.Table, fields: list[str], empty_keeps: bool) -> pa.Table:
    n = table.num_rows
    if n == 0:
        return pa.table({"key": pa.array([], pa.binary(16)), "keep_always": pa.array([], pa.bool_())})
    batch = table_to_batch(table)
    out = call_op(
        dj_op.compute_hash, batch, n, batched=dj_op.is_batched_op(), batch_size=dj_op.batch_size, op_name=op_name
    )
    _check_rows(out, n, op_name)
    missing = [f for f in fields if f not in out]
    if missing:
        raise OpFatalError(f"Data-Juicer deduplicator {op_name} wrote no {missing[0]!r} hash field")
    values = list(zip(*(out[f] for f in fields))) if len(fields) > 1 else out[fields[0]]
    keep_always = [bool(empty_keeps and not v) for v in values]
    keys = [hash_key(v) for v in values]
    return pa.table({"key": pa.array(keys, pa.binary(16)), "keep_always": pa.array(keep_always, pa.bool_())})
