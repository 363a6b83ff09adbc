"""Apply one op to one table, with row accounting and per-sample failure isolation.

The op runs on slices of the table bounded by bytes of text (engine/execution/table_slices.py), in
order; a partition under the bound is one slice.  With ``skip_op_error`` an op that raises on a
slice is run again on its two halves, and so on down to the rows that really fail, which are set
aside (with the op and the reason) in ``failed/``: k bad rows among n cost about k·log2(n) op calls,
not n.  They never reach the export silently, and they are counted (invariant 6: in = out +
filtered + duplicates + failed).  An error that is not about a row (``ArrowCapacityError``, out of
memory) halves the slice too, whatever ``skip_op_error`` says, and fails only a single row that
alone is too big.
"""

from __future__ import annotations

import time
import traceback
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from airflow_provider_dj.core.errors import DJError
from airflow_provider_dj.engine.execution.table_slices import byte_slices, concat_in_order
from airflow_provider_dj.engine.storage.checkpoints import PATCH_FLAG_PREFIX
from airflow_provider_dj.ops.base import ROW_ERROR_COLUMN, Filter, Mapper, Op, OpFatalError
from airflow_provider_dj.ops.columns import INPUT_ROW_COLUMN


@dataclass
class RowDelta:
    """How an op's output derives from its input, when it only drops rows and sets a few columns.

    ``columns`` holds the columns the op added or replaced, over the *input*
    rows (so it lines up with ``keep``); every other output column is the
    input's, untouched.  A checkpoint can then store just this
    (engine/storage/checkpoints.py, delta checkpoints) instead of the whole table.
    """

    keep: pa.Array  # bool, one flag per input row
    columns: pa.Table  # added or replaced columns, one row per input row


@dataclass
class OpOutcome:
    table: pa.Table
    accounting: dict[str, Any]
    failed_rows: pa.Table | None = None
    failed_reasons: list[str] = field(default_factory=list)
    delta: RowDelta | None = None


def _same_data(a: pa.ChunkedArray, b: pa.ChunkedArray) -> bool:
    """True when both columns are the very same buffers (an op passed the column through)."""
    if a.type != b.type or a.num_chunks != b.num_chunks or len(a) != len(b):
        return False
    for ca, cb in zip(a.chunks, b.chunks):
        if ca.offset != cb.offset or len(ca) != len(cb):
            return False
        if [x.address if x is not None else 0 for x in ca.buffers()] != [
            x.address if x is not None else 0 for x in cb.buffers()
        ]:
            return False
    return True


_ROW_ID = INPUT_ROW_COLUMN


def _sparse(values: pa.ChunkedArray, changed: pa.ChunkedArray) -> pa.Array:
    """``values`` on the ``changed`` rows, null elsewhere, holding only the changed rows' data
    (``if_else`` against a null scalar keeps every string's bytes)."""
    flags = (
        changed.to_numpy() if isinstance(changed, pa.Array) else changed.combine_chunks().to_numpy(zero_copy_only=False)
    )
    picked = values.filter(changed)
    index = pa.array(np.cumsum(flags, dtype=np.int64) - 1, mask=~flags)
    return picked.take(index)


def mapper_delta(table: pa.Table, out: pa.Table) -> RowDelta | None:
    """The delta of a row-preserving op's output against its input: per column, the rows it changed.

    A cleaning mapper rewrites a few rows (those with an e-mail address, odd
    whitespace): a changed column is stored as its new values on the changed
    rows only (nulls elsewhere) plus a flag column, so the checkpoint costs
    what changed, not the whole text again.  None when rows moved, or when
    most of the data changed (a whole checkpoint is then as cheap).
    """
    if out.num_rows != table.num_rows:
        return None
    if (
        _ROW_ID in table.column_names
        and _ROW_ID in out.column_names
        and not _same_data(table.column(_ROW_ID), out.column(_ROW_ID))
        and not table.column(_ROW_ID).equals(out.column(_ROW_ID))
    ):
        return None  # same count, other rows: not a per-row edit
    cols: dict[str, pa.ChunkedArray] = {}
    for c in out.column_names:
        new = out.column(c)
        if c not in table.column_names or table.column(c).type != new.type:
            cols[c] = new  # added (or retyped): stored whole
            continue
        old = table.column(c)
        if _same_data(old, new):
            continue
        try:
            both_null = pc.and_(pc.is_null(old), pc.is_null(new))
            changed = pc.and_(pc.invert(both_null), pc.fill_null(pc.not_equal(old, new), True))
        except (pa.ArrowNotImplementedError, pa.ArrowInvalid):  # no element-wise compare (structs, lists)
            cols[c] = new
            continue
        if not pc.any(changed).as_py():
            continue  # rebuilt, same values
        cols[c] = _sparse(new, changed)
        cols[PATCH_FLAG_PREFIX + c] = changed
    patch = pa.table(cols) if cols else pa.table({})
    if cols and patch.nbytes > out.nbytes // 2:  # (whitespace normalization touches ~30 % of the sample corpus)
        return None
    return RowDelta(keep=pa.array(np.ones(out.num_rows, dtype=bool)), columns=patch)


def row_delta(table: pa.Table, with_new: pa.Table, keep: pa.Array) -> RowDelta | None:
    """The delta of ``with_new.filter(keep)`` against ``table``, or None when it would not be small.

    ``with_new`` has one row per input row: the input's columns, some of them
    replaced, plus added ones.  Columns are compared by buffer identity, so a
    passed-through column is never copied; an op that rebuilt its columns
    simply gets no delta.
    """
    changed = [
        c
        for c in with_new.column_names
        if c not in table.column_names or not _same_data(table.column(c), with_new.column(c))
    ]
    cols = with_new.select(changed)
    if cols.nbytes > with_new.nbytes // 4:  # mostly new data: a whole checkpoint is as cheap to write
        return None
    return RowDelta(keep=keep, columns=cols)


class InvalidOutputError(DJError, ValueError):
    """An op returned an empty/invalid value where a value is required."""


def _apply_whole(op: Op, table: pa.Table) -> tuple[pa.Table, int, tuple[Any, ...] | None]:
    """Returns (output, filtered count, (filter input with stats, keep mask) or None for a mapper)."""
    if isinstance(op, Mapper):
        out = op.process_table(table)
        if out.num_rows != table.num_rows:
            raise RuntimeError(f"{op.name} changed the row count ({table.num_rows} -> {out.num_rows})")
        key = op.text_key
        if key in table.column_names and key in out.column_names:
            lost = pc.and_(pc.is_valid(table.column(key)), pc.is_null(out.column(key)))
            if ROW_ERROR_COLUMN in out.column_names:  # flagged rows fail anyway, with their own reason
                lost = pc.and_(lost, pc.is_null(out.column(ROW_ERROR_COLUMN)))
            if pc.any(lost).as_py():
                # A value where one is required came back empty: a failure,
                # never a success that quietly exports a null.
                raise InvalidOutputError(f"{op.name} returned no value for field {key!r}")
        return out, 0, None
    if isinstance(op, Filter):
        with_stats = op.compute_stats(table)
        mask = op.keep_mask(with_stats)
        if len(mask) != table.num_rows:
            raise RuntimeError(f"{op.name} returned {len(mask)} keep flags for {table.num_rows} rows")
        mask = pc.fill_null(mask, False)
        out = with_stats.filter(mask)
        return out, table.num_rows - out.num_rows, (with_stats, mask)
    raise TypeError(f"{op.name}: {type(op).__name__} is not a per-row op")


def _split_flagged_rows(out: pa.Table, failed: list[pa.Table], reasons: list[str]) -> pa.Table:
    """Move rows a Mapper flagged in ``ROW_ERROR_COLUMN`` to ``failed``; return the rest.

    Flagged rows fail whether or not ``skip_op_error`` is set: the op ran
    fine and judged those samples bad (an LLM's empty answer), which is a
    per-sample outcome like a filter's, not an op crash to be tolerated or
    not.  The failed rows are the op's output rows (input columns unchanged
    by convention), so the sample and its input row id are kept.
    """
    if ROW_ERROR_COLUMN not in out.column_names:
        return out
    flags = out.column(ROW_ERROR_COLUMN)
    bad = pc.is_valid(flags)
    if pc.any(bad).as_py():
        failed.append(out.filter(bad).drop_columns([ROW_ERROR_COLUMN]))
        reasons.extend(str(r) for r in flags.filter(bad).to_pylist())
        out = out.filter(pc.invert(bad))
    return out.drop_columns([ROW_ERROR_COLUMN])


def split_missing_fields(
    op: Op, table: pa.Table, needs: tuple[str, ...]
) -> tuple[pa.Table, pa.Table | None, list[str]]:
    """(rows the op can read, rows it cannot, a reason per unreadable row) for the fields in ``needs``.

    Why before the op: a row without the field an op reads is the sample's
    failure, not the op's, whatever ``skip_op_error`` says; setting those
    rows aside at once gives each the same plain reason ("field 'text' is
    missing or null") instead of an op's KeyError or a silent filter, and
    spares the row-by-row retry.  A top-level field absent from every row of
    the table fails them all; for the op's text key a null also counts as
    missing (Data-Juicer's loader drops such rows silently; here they are
    counted and kept in ``failed/``).  Other fields may legitimately be null
    (``specified_field_filter`` compares None), so only their absence counts.
    """
    if not needs or table.num_rows == 0:
        return table, None, []
    for name in needs:
        if "." not in name and name not in table.column_names:
            fields = ", ".join(c for c in table.column_names if not c.startswith("__dj__")) or "(none)"
            reason = (
                f"MissingFieldError: field {name!r} is not in these rows (their fields: {fields}); {op.name} reads it"
            )
            return table.slice(0, 0), table, [reason] * table.num_rows
    key = op.text_key
    if key not in needs or key not in table.column_names or table.column(key).null_count == 0:
        return table, None, []
    missing = pc.is_null(table.column(key))
    reason = f"MissingFieldError: field {key!r} is missing or null in this row; {op.name} reads it"
    bad = table.filter(missing)
    return table.filter(pc.invert(missing)), bad, [reason] * bad.num_rows


#: Errors about the size of what an op was given, not about a row: the slice is halved.
RESOURCE_ERRORS = (pa.ArrowCapacityError, pa.ArrowMemoryError, MemoryError)


class _SlicedRun:
    """One op over a table's slices, in order: the outputs, the filtered count, and the rows that
    failed with their reasons.  A slice the op raises on is halved (see the module docstring)."""

    def __init__(self, op: Op, skip_op_error: bool) -> None:
        self.op, self.skip_op_error = op, skip_op_error
        self.outs: list[pa.Table] = []
        self.kept: list[tuple[Any, ...]] = []  # (filter input with stats, keep mask) per slice; mappers: none
        self.failed: list[pa.Table] = []
        self.reasons: list[str] = []
        self.filtered = 0
        self.calls = 0  # op calls made, halvings included

    def apply(self, piece: pa.Table) -> None:
        """The op on ``piece``.  (``apply_op`` does the same for each slice, unrolled, so that a job's call
        path to the op's ``process_table`` stays short: docs/architecture.md.)"""
        self.calls += 1
        try:
            out, filtered, kept = _apply_whole(self.op, piece)
        except OpFatalError:
            raise
        except Exception as exc:  # noqa: BLE001 - recover() re-raises what it does not set aside
            self.recover(piece, exc)
            return
        self.add(out, filtered, kept)

    def recover(self, piece: pa.Table, exc: Exception) -> None:
        """``piece`` raised ``exc``: halve it down to the rows that fail (with ``skip_op_error``, or on a
        resource error), set such a row aside with its reason, or re-raise."""
        if piece.num_rows > 1 and (self.skip_op_error or isinstance(exc, RESOURCE_ERRORS)):
            half = piece.num_rows // 2
            self.apply(piece.slice(0, half))
            self.apply(piece.slice(half))
            return
        if not self.skip_op_error:
            raise exc
        if piece.num_rows == 0:
            return  # no row to blame (an op that cannot run on an empty table): nothing failed
        self.failed.append(piece)  # one row: the sample's failure, recorded with it
        self.reasons.append(f"{type(exc).__name__}: {exc}".strip()[:2000] or traceback.format_exc(limit=1))

    def add(self, out: pa.Table, filtered: int, kept: tuple[Any, ...] | None) -> None:
        self.outs.append(out)
        self.filtered += filtered
        if kept is not None:
            self.kept.append(kept)

    def result(self, table: pa.Table) -> tuple[pa.Table, int, tuple[Any, ...] | None]:
        """(output, filtered, (input with stats, keep mask) when every row went through the op, else None)."""
        outs = [o for o in self.outs if o.num_rows] or self.outs[:1]
        out = concat_in_order(outs, table.slice(0, 0)) if outs else table.slice(0, 0)
        kept = None
        if self.kept and not self.failed:
            with_stats = concat_in_order([k[0] for k in self.kept])
            mask = concat_in_order([k[1] for k in self.kept])
            kept = (with_stats, mask)
        return out, self.filtered, kept


def apply_op(op: Op, op_index: int, table: pa.Table, skip_op_error: bool, needs: tuple[str, ...] = ()) -> OpOutcome:
    """``needs``: the top-level fields the op reads (``Op.input_fields``); rows lacking one fail
    up front (``split_missing_fields``).  Empty: no such check (the op sees every row)."""
    t0 = time.perf_counter()
    rows_in = table.num_rows
    failed: list[pa.Table] = []
    reasons: list[str] = []
    table, missing_rows, missing_reasons = split_missing_fields(op, table, needs)
    if missing_rows is not None:
        failed.append(missing_rows)
        reasons.extend(missing_reasons)
    run = _SlicedRun(op, skip_op_error)
    # An empty table still goes through the op (its output columns), unless its rows failed up front.
    slices = byte_slices(table, op.text_key) or ([(0, 0)] if missing_rows is None else [])
    for offset, length in slices:  # run.apply, unrolled (see there)
        piece = table.slice(offset, length)
        run.calls += 1
        try:
            result = _apply_whole(op, piece)
        except OpFatalError:
            raise
        except Exception as exc:  # noqa: BLE001 - recover() re-raises what it does not set aside
            run.recover(piece, exc)
            continue
        run.add(*result)
    failed.extend(run.failed)
    reasons.extend(run.reasons)
    out, filtered, kept = run.result(table)
    out = _split_flagged_rows(out, failed, reasons)
    n_failed = sum(t.num_rows for t in failed)
    acct = {
        "op_index": op_index,
        "op_name": op.name,
        "kind": op.kind,
        "rows_in": rows_in,
        "rows_out": out.num_rows,
        "filtered": filtered,
        "duplicates": 0,
        "failed": n_failed,
        "duration_s": round(time.perf_counter() - t0, 6),
    }
    failed_table = pa.concat_tables(failed, promote_options="permissive") if failed else None
    if kept is not None and len(slices) > 1:
        # Delta checkpoints tell a passed-through column by its buffers: compare against the input
        # cut into the same slices the op saw.
        table = concat_in_order([table.slice(offset, length) for offset, length in slices])
    delta = row_delta(table, *kept) if kept is not None and not failed else None
    return OpOutcome(out, acct, failed_table, reasons, delta)


def apply_keep_mask(
    op: Op,
    op_index: int,
    table: pa.Table,
    mask: pa.Array,
    duration_s: float = 0.0,
    errors: pa.Array | pa.ChunkedArray | None = None,
) -> OpOutcome:
    """The global op's keep mask on this partition's rows.  ``errors``: per row, why the op's key phase
    could not key it (null: it could; execution/key_rows.py): those rows are the op's failed rows,
    returned with their reasons, not duplicates."""
    if len(mask) != table.num_rows:
        raise RuntimeError(
            f"{op.name}: keep mask has {len(mask)} entries but the partition has {table.num_rows} rows; "
            f"the previous segment's output changed after the global step — clear the global step too"
        )
    t0 = time.perf_counter()
    failed = pc.is_valid(errors) if errors is not None and errors.null_count < len(errors) else None
    keep = mask if failed is None else pc.and_(mask, pc.invert(failed))
    out = table.filter(keep)
    n_failed = 0 if failed is None else int(pc.sum(failed).as_py())
    acct = {
        "op_index": op_index,
        "op_name": op.name,
        "kind": op.kind,
        "rows_in": table.num_rows,
        "rows_out": out.num_rows,
        "filtered": 0,
        "duplicates": table.num_rows - out.num_rows - n_failed,
        "failed": n_failed,
        "duration_s": round(duration_s + time.perf_counter() - t0, 6),
    }
    if failed is None or errors is None:
        return OpOutcome(out, acct, delta=RowDelta(keep=mask, columns=pa.table({})))
    # No delta: its keep flags would count the failed rows as duplicates too (lineage reads them).
    return OpOutcome(out, acct, table.filter(failed), errors.filter(failed).to_pylist())
