"""Apply one op to one table, with row accounting and per-sample failure isolation.

With ``skip_op_error`` an op that raises on a batch is retried row by row
so that only the rows that really fail are set aside — with the op and the
reason — in ``failed/``; they never reach the export silently, and they are
counted (invariant 6: in = out + filtered + duplicates + failed).
"""

from __future__ import annotations

import time
import traceback
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc

from airflow_provider_dj.ops.base import ROW_ERROR_COLUMN, Deduplicator, Filter, Mapper, Op, OpFatalError


@dataclass
class OpOutcome:
    table: pa.Table
    accounting: dict
    failed_rows: pa.Table | None = None
    failed_reasons: list[str] = field(default_factory=list)


class InvalidOutputError(ValueError):
    """An op returned an empty/invalid value where a value is required."""


def _apply_whole(op: Op, table: pa.Table) -> tuple[pa.Table, int]:
    """Returns (output, filtered count)."""
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
        return out, 0
    if isinstance(op, Filter):
        with_stats = op.compute_stats(table)
        mask = op.keep_mask(with_stats)
        if len(mask) != table.num_rows:
            raise RuntimeError(f"{op.name} returned {len(mask)} keep flags for {table.num_rows} rows")
        mask = pc.fill_null(mask, False)
        out = with_stats.filter(mask)
        return out, table.num_rows - out.num_rows
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


def apply_op(op: Op, op_index: int, table: pa.Table, skip_op_error: bool) -> OpOutcome:
    t0 = time.perf_counter()
    rows_in = table.num_rows
    failed: list[pa.Table] = []
    reasons: list[str] = []
    try:
        out, filtered = _apply_whole(op, table)
    except Exception as exc:
        if not skip_op_error or isinstance(exc, OpFatalError):
            raise
        # Isolate the failing rows: process one row at a time.
        pieces: list[pa.Table] = []
        filtered = 0
        for i in range(rows_in):
            row = table.slice(i, 1)
            try:
                o, f = _apply_whole(op, row)
                pieces.append(o)
                filtered += f
            except Exception as exc:  # noqa: BLE001 - recorded with the sample
                failed.append(row)
                reasons.append(f"{type(exc).__name__}: {exc}".strip()[:2000] or traceback.format_exc(limit=1))
        pieces = [p for p in pieces if p.num_rows]
        out = pa.concat_tables(pieces, promote_options="permissive") if pieces else table.slice(0, 0)
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
    return OpOutcome(out, acct, failed_table, reasons)


def apply_keep_mask(op: Deduplicator, op_index: int, table: pa.Table, mask: pa.Array, duration_s: float = 0.0) -> OpOutcome:
    if len(mask) != table.num_rows:
        raise RuntimeError(
            f"{op.name}: keep mask has {len(mask)} entries but the partition has {table.num_rows} rows; "
            f"the previous segment's output changed after the global step — clear the global step too"
        )
    t0 = time.perf_counter()
    out = table.filter(mask)
    acct = {
        "op_index": op_index,
        "op_name": op.name,
        "kind": op.kind,
        "rows_in": table.num_rows,
        "rows_out": out.num_rows,
        "filtered": 0,
        "duplicates": table.num_rows - out.num_rows,
        "failed": 0,
        "duration_s": round(duration_s + time.perf_counter() - t0, 6),
    }
    return OpOutcome(out, acct)
