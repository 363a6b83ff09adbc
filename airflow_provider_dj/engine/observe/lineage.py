"""Per-row lineage, recorded: what each op did to which input row, committed with the checkpoints.

Why: "why is input row N not in my export?" must have an exact answer for every row, on a running,
failed, stopped or finished job, and it must follow resumes and retries exactly as the data does.
So a segment run notes, per op, the input rows the op changed, filtered (with the statistic that
decided), removed as duplicates or failed (with the reason), and at each checkpoint point writes
those notes as one small Parquet file, ``lineage/partition_<p>/op_<i>.parquet`` (``layout.lineage_file``),
before that checkpoint's own write.  Each file names the op its notes start after (``start_op`` in
the file's metadata), so the files of a partition form a chain from its latest commit down to its
input: a resume from checkpoint k starts a new chunk after k, and a retried chunk rewrites its own
file.  A kept row needs no entry: rows keep input order, so its export row is its rank among the
kept rows (``engine/observe/lineage_query.py``).

The notes are columnar and small: ``input_row`` (int64, delta-encoded), ``fate`` (uint8),
``op_index`` (uint16), ``stat`` (float32, filters only) and ``reason`` (failed rows only); a chunk with
duplicates adds what each matched (``MATCH_FIELDS``: the input row it was kept against, the MinHash
band, or the earlier job and export row of a history duplicate), which the global step decided
(``engine/execution/dedup_matches.py``).  Nothing is added to the data: the rows' input numbers
(``INPUT_ROW_COLUMN``) are already in every table.
"""

from __future__ import annotations

import io
import json

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from airflow_provider_dj import settings
from airflow_provider_dj.core import fs as storage
from airflow_provider_dj.engine.jobdir.layout import lineage_file
from airflow_provider_dj.engine.storage.global_op_state import MASK_COLUMN
from airflow_provider_dj.ops.base import Deduplicator, Filter
from airflow_provider_dj.ops.columns import INPUT_ROW_COLUMN, STATS_COLUMN
from airflow_provider_dj.ops.stats import get_stat

#: Fate codes in the ``fate`` column.  A kept, unchanged row has no entry.
CHANGED, FILTERED, DUPLICATE, FAILED = 1, 2, 3, 4
FATE_NAMES = {CHANGED: "changed", FILTERED: "filtered", DUPLICATE: "duplicate", FAILED: "failed"}

SCHEMA = pa.schema(
    [
        ("input_row", pa.int64()),
        ("fate", pa.uint8()),
        ("op_index", pa.uint16()),
        ("stat", pa.float32()),
        ("reason", pa.string()),
    ]
)
#: Written only in a chunk where some entry has a value (a duplicate's match, ``dedup_matches.py``);
#: a reader pads a chunk without them with nulls (``full_schema``).
MATCH_FIELDS = [
    ("dup_of_row", pa.int64()),  # the input row a duplicate was kept against
    ("dup_band", pa.int16()),  # MinHash: the LSH band it matched through
    ("history_job", pa.string()),  # a history duplicate: the earlier job ...
    ("history_row", pa.int64()),  # ... and its export row
]
FULL_SCHEMA = pa.schema(list(SCHEMA) + [pa.field(n, t) for n, t in MATCH_FIELDS])
_MATCH_SOURCES = {  # lineage column -> the mask table's column (engine/execution/dedup_matches.py)
    "dup_of_row": "dup_of",
    "dup_band": "dup_band",
    "history_job": "history_job",
    "history_row": "history_row",
}


def full_schema(table: pa.Table) -> pa.Table:
    """A chunk as read, with the match columns it did not write as nulls (older chunks too)."""
    for name, typ in MATCH_FIELDS:
        if name not in table.column_names:
            table = table.append_column(pa.field(name, typ), pa.nulls(table.num_rows, typ))
    return table.select(FULL_SCHEMA.names)


def lineage_enabled() -> bool:
    return bool(settings.get("lineage"))


def _rows(table: pa.Table) -> np.ndarray:
    return table.column(INPUT_ROW_COLUMN).to_numpy() if table.num_rows else np.zeros(0, dtype=np.int64)


def _same_buffers(a: pa.ChunkedArray, b: pa.ChunkedArray) -> bool:
    """The same Arrow buffers: an op passed the column through, so nothing in it changed (no compare)."""
    if a.type != b.type or a.num_chunks != b.num_chunks or len(a) != len(b):
        return False
    for ca, cb in zip(a.chunks, b.chunks):
        if ca.offset != cb.offset or [x.address if x else 0 for x in ca.buffers()] != [
            x.address if x else 0 for x in cb.buffers()
        ]:
            return False
    return True


def changed_rows(table_in: pa.Table, out: pa.Table) -> np.ndarray:
    """Input rows of ``out`` whose values differ from ``table_in``'s (a mapper's output, failed rows gone).

    Only columns present on both sides and not passed through are compared, so a cleaning mapper
    costs one compare of the column it rewrote."""
    if out.num_rows == 0:
        return np.zeros(0, dtype=np.int64)
    if out.num_rows != table_in.num_rows:  # failed rows left: line the input up with the output
        table_in = table_in.filter(pa.array(np.isin(_rows(table_in), _rows(out))))
    changed = None
    for name in out.column_names:
        if name == INPUT_ROW_COLUMN or name not in table_in.column_names:
            continue
        old, new = table_in.column(name), out.column(name)
        if _same_buffers(old, new):
            continue
        try:
            diff = pc.fill_null(pc.not_equal(old, new), False)
            diff = pc.or_(diff, pc.xor(pc.is_null(old), pc.is_null(new)))
        except (pa.ArrowNotImplementedError, pa.ArrowInvalid):  # structs, lists: no element-wise compare
            diff = pa.chunked_array([pa.array([a != b for a, b in zip(old.to_pylist(), new.to_pylist())])])
        changed = diff if changed is None else pc.or_(changed, diff)
    if changed is None:
        return np.zeros(0, dtype=np.int64)
    flags = changed.to_numpy(zero_copy_only=False) if isinstance(changed, pa.ChunkedArray) else changed.to_numpy()
    return _rows(out)[flags.astype(bool)]


class LineageRecorder:
    """The lineage notes of one partition in one segment run, committed chunk by chunk."""

    def __init__(self, job_dir: str, partition_id: int, plan, enabled: bool | None = None) -> None:
        self.job_dir = job_dir
        self.partition_id = partition_id
        self.plan = plan
        self.enabled = lineage_enabled() if enabled is None else enabled
        self.start_op: int | None = None  # the state this chunk's notes start after
        self._pieces: list[dict[str, np.ndarray | list]] = []
        self._stat_keys: dict[str, str] = {}  # op index -> the stat its ``stat`` values are

    def begin(self, op_index: int) -> None:
        """The run starts from the state after op ``op_index`` (-1: the input rows)."""
        if self.start_op is None:
            self.start_op = op_index

    def observe(self, op_index: int, op, table_in: pa.Table, outcome, matches: pa.Table | None = None) -> None:
        """Note what op ``op_index`` did to ``table_in`` (its ``OpOutcome``); ``matches``: a global
        deduplicator's mask table, row for row with ``table_in``, naming what each removed row matched."""
        if not self.enabled:
            return
        out = outcome.table
        failed = _rows(outcome.failed_rows) if outcome.failed_rows is not None else np.zeros(0, dtype=np.int64)
        if failed.size:
            self._add(failed, FAILED, op_index, reasons=list(outcome.failed_reasons))
        if isinstance(op, Deduplicator):
            keep = outcome.delta.keep.to_numpy(zero_copy_only=False) if outcome.delta is not None else None
            if keep is None and failed.size:  # rows its key phase failed: the mask table still holds the decision
                keep = _global_decision(matches, table_in.num_rows)
            removed = _rows(table_in)[~keep] if keep is not None else self._removed(table_in, out, failed)
            self._add(removed, DUPLICATE, op_index, match=match_values(matches, keep, removed.size))
        elif isinstance(op, Filter):
            self._note_filter(op_index, op, table_in, outcome, failed)
        else:
            self._add(changed_rows(table_in, out), CHANGED, op_index)

    def _note_filter(self, op_index: int, op, table_in: pa.Table, outcome, failed: np.ndarray) -> None:
        delta, stat = outcome.delta, None
        if delta is not None:  # keep flags over the input rows, stats beside them
            drop = ~delta.keep.to_numpy(zero_copy_only=False)
            removed = _rows(table_in)[drop]
            key = getattr(op, "stat_key", None)
            if key:
                self._stat_keys[str(op_index)] = key
            if key and removed.size and STATS_COLUMN in delta.columns.column_names:
                values = get_stat(delta.columns, key)
                if values is not None:
                    try:
                        stat = pc.cast(values, pa.float32()).to_numpy(zero_copy_only=False)[drop]
                    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                        stat = None  # a non-numeric statistic: the reason names the op only
        else:
            removed = self._removed(table_in, outcome.table, failed)
        self._add(removed, FILTERED, op_index, stat=stat)

    @staticmethod
    def _removed(table_in: pa.Table, out: pa.Table, failed: np.ndarray) -> np.ndarray:
        rows = _rows(table_in)
        gone = ~np.isin(rows, _rows(out))
        if failed.size:
            gone &= ~np.isin(rows, failed)
        return rows[gone]

    def _add(self, rows: np.ndarray, fate: int, op_index: int, *, stat=None, reasons=None, match=None) -> None:
        if rows.size:
            piece = {"rows": rows, "fate": fate, "op": op_index, "stat": stat, "reasons": reasons, "match": match}
            self._pieces.append(piece)

    def writer(self, op_index: int):
        """The commit of the notes since ``start_op`` as lineage chunk ``op_index``, as a call (run it
        before that op's checkpoint write, in the same background slot); None when recording is off."""
        if not self.enabled:
            return None
        table = self._table()
        start, self.start_op, self._pieces = self.start_op, op_index, []
        stat_keys, self._stat_keys = self._stat_keys, {}
        meta = {
            b"stat_keys": json.dumps(stat_keys).encode(),
            b"start_op": str(-1 if start is None else start).encode(),
            b"end_op": str(op_index).encode(),
            b"fingerprint": str(self.plan.ops[op_index].fingerprint).encode(),
        }
        job_dir, pid = self.job_dir, self.partition_id
        return lambda: write_chunk(job_dir, pid, op_index, table, meta)

    def _table(self) -> pa.Table:
        if not self._pieces:
            return SCHEMA.empty_table()
        cols: dict[str, list] = {n: [] for n in SCHEMA.names}
        for p in self._pieces:
            n = p["rows"].size
            cols["input_row"].append(pa.array(p["rows"], type=pa.int64()))
            cols["fate"].append(pa.array(np.full(n, p["fate"], dtype=np.uint8)))
            cols["op_index"].append(pa.array(np.full(n, p["op"], dtype=np.uint16)))
            cols["stat"].append(
                pa.array(p["stat"], type=pa.float32()) if p["stat"] is not None else pa.nulls(n, pa.float32())
            )
            cols["reason"].append(
                pa.array(p["reasons"], type=pa.string()) if p["reasons"] else pa.nulls(n, pa.string())
            )
        table = pa.table({n: pa.chunked_array(v, type=SCHEMA.field(n).type) for n, v in cols.items()}, schema=SCHEMA)
        for name, typ in MATCH_FIELDS:  # only where some entry names a match: compact when unused
            if any(p["match"] and name in p["match"] for p in self._pieces):
                chunks = [
                    p["match"][name] if p["match"] and name in p["match"] else pa.nulls(p["rows"].size, typ)
                    for p in self._pieces
                ]
                table = table.append_column(pa.field(name, typ), pa.chunked_array(chunks, type=typ))
        return table


def write_chunk(job_dir: str, partition_id: int, op_index: int, table: pa.Table, meta: dict) -> None:
    """Commit one chunk atomically as ``lineage_file(partition_id, op_index)``; a match column that no
    entry uses is left out (compact), and a reader pads it back (``full_schema``)."""
    unused = [n for n, _ in MATCH_FIELDS if n in table.column_names and table.column(n).null_count == table.num_rows]
    table = table.drop_columns(unused) if unused else table
    buf = io.BytesIO()
    pq.write_table(
        table.replace_schema_metadata(meta),
        buf,
        compression="zstd",
        use_dictionary=False,
        write_statistics=False,
        column_encoding={n: "DELTA_BINARY_PACKED" for n in ("input_row", "dup_of_row") if n in table.column_names},
    )
    path = storage.join(job_dir, *lineage_file(partition_id, op_index).split("/"))
    storage.atomic_write_bytes(path, buf.getvalue(), what=f"the lineage of partition {partition_id}")


def _global_decision(matches: pa.Table | None, n: int) -> np.ndarray | None:
    """The global step's keep flags from a mask table of ``n`` rows (a row its key phase failed is kept
    there: it is removed as failed, not as a duplicate), or None without one."""
    if matches is None or MASK_COLUMN not in matches.column_names or matches.num_rows != n:
        return None
    return matches.column(MASK_COLUMN).to_numpy(zero_copy_only=False)


def match_values(matches: pa.Table | None, keep: np.ndarray | None, n: int) -> dict[str, pa.Array] | None:
    """The removed rows' match columns (nulls for "none": -1 in the mask table), or None without any."""
    if matches is None or keep is None or not n or matches.num_rows != len(keep):
        return None
    drop = pa.array(~keep)
    out: dict[str, pa.Array] = {}
    for name, source in _MATCH_SOURCES.items():
        if source not in matches.column_names:
            continue
        col = matches.column(source).filter(drop).combine_chunks()
        if pa.types.is_integer(col.type):
            col = pc.if_else(pc.less(col, 0), pa.scalar(None, col.type), col)
        if col.null_count < len(col):
            out[name] = col.cast(FULL_SCHEMA.field(name).type)
    return out or None
