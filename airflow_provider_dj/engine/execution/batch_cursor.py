"""Run an expensive op over a partition in small batches, each committed durably with a cursor.

Why: an embedding or LLM op can spend hours on one partition.  Running it as
one call means a crash (or a stop request) throws all of that away.  Here the
partition's rows are cut into slices of the op's ``batch_size``; each slice's
output is written atomically as an Arrow IPC file and then recorded in a
cursor file, so a crash loses at most the batch in flight and a resume runs
only the batches after the cursor.  The reassembled output is the same table
an uninterrupted run produces.

Layout (one directory per op and partition)::

    {job}/batches/op_{i:03d}_{op}/partition_{p:05d}/
        cursor.json                  binding + one entry per committed batch
        batch_{b:06d}.arrow          the batch's output rows (kept rows with stats, for a filter)
        batch_{b:06d}.failed.arrow   rows set aside by skip_op_error, with the reason

Commit protocol: the batch files are written first (atomically), the cursor
last; the cursor is the only thing a resume believes, so a batch file
without a cursor entry is recomputed and overwritten, never read.

A cursor is trusted only when it is bound to the same partition content
hash, op pipeline fingerprint, hash of the op's input table and batch size.
Anything else (recipe edited, upstream op changed, different input) is
discarded with a logged reason and the batches are recomputed; committed
batches of a different input are never mixed in.  A batch entry whose file
is missing or torn (size/checksum) ends the trusted prefix: it and the
batches after it are recomputed.

Write-back is keyed by the ``__dj__input_row__`` column that travels with
every row: each output row is put back at its input row's place.  A row
whose key is missing, null, duplicated or not among the batch's input rows
is an error (:class:`BatchKeyError`), never an insert.

The batch directory is removed once a checkpoint at or after the op is
committed (:func:`discard_superseded`); until then it is the op's durable
state.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

import pyarrow as pa
import pyarrow.compute as pc

from airflow_provider_dj.core import fs as storage
from airflow_provider_dj.core.errors import DJError
from airflow_provider_dj.engine.execution.op_runner import OpOutcome, apply_op
from airflow_provider_dj.engine.input import hashing
from airflow_provider_dj.engine.jobdir import faults
from airflow_provider_dj.engine.jobdir.integrity import file_digest
from airflow_provider_dj.engine.jobdir.layout import BATCHES_DIR, CURSOR_FILE, op_dir_name, partition_name
from airflow_provider_dj.engine.jobdir.stop_control import check_stop
from airflow_provider_dj.engine.storage.checkpoints import StorageFormat
from airflow_provider_dj.ops.base import Filter, Mapper, Op
from airflow_provider_dj.ops.columns import BATCH_FAILURE_REASON_COLUMN, INPUT_ROW_COLUMN

if TYPE_CHECKING:
    from airflow_provider_dj.engine.jobdir.events import EventLog

log = logging.getLogger(__name__)

CURSOR_VERSION = 1
KEY_COLUMN = INPUT_ROW_COLUMN  # a cursor keys its committed rows by the input row
REASON_COLUMN = BATCH_FAILURE_REASON_COLUMN
_IPC = StorageFormat("arrow", "none")  # Arrow IPC file, uncompressed: vectors barely compress


class BatchKeyError(DJError, RuntimeError):
    """A batch output row cannot be written back to an input row (no key, unknown key, duplicate)."""


class BatchSizeError(DJError, ValueError):
    """An expensive op was given a batch size that is not a positive integer."""


def op_batches_dir(job_dir: str, op_index: int, op_name: str) -> str:
    return storage.join(job_dir, BATCHES_DIR, op_dir_name(op_index, op_name))


def batch_dir(job_dir: str, op_index: int, op_name: str, partition_id: int) -> str:
    return storage.join(op_batches_dir(job_dir, op_index, op_name), partition_name(partition_id))


def batch_size_for(op: Op) -> int:
    """The op's own ``batch_size`` attribute, else the recipe's common ``batch_size``, else its default."""
    size = getattr(op, "batch_size", None)
    if size is None:
        size = op.common_args.get("batch_size")
    if size is None:
        size = op.default_batch_size
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise BatchSizeError(
            f"{op.name}: batch_size must be a positive integer, got {size!r}; fix the op's batch_size in the recipe"
        )
    return size


@dataclass(frozen=True)
class _Binding:
    """What a cursor must match to be trusted."""

    partition_hash: str
    fingerprint: str
    input_hash: str
    input_rows: int
    batch_size: int

    def mismatch(self, cursor: dict[str, Any]) -> str | None:
        for key in ("partition_hash", "fingerprint", "input_hash", "input_rows", "batch_size"):
            if cursor.get(key) != getattr(self, key):
                return f"{key} is {cursor.get(key)!r} in the cursor but {getattr(self, key)!r} now"
        if cursor.get("version") != CURSOR_VERSION:
            return f"cursor version {cursor.get('version')!r} is not {CURSOR_VERSION}"
        return None


def _write_ipc(path: str, table: pa.Table) -> dict[str, Any]:
    data = _IPC.encode(table)
    storage.atomic_write_bytes(path, data)
    return {"file": storage.basename(path), "size": len(data), "checksum": file_digest(data)}


def _read_ipc(directory: str, ref: dict[str, Any]) -> pa.Table | None:
    """The file ``ref`` names if it is intact, else None."""
    try:
        data = storage.read_bytes(storage.join(directory, ref["file"]))
    except (FileNotFoundError, KeyError):
        return None
    if len(data) != ref.get("size") or file_digest(data) != ref.get("checksum"):
        return None
    return _IPC.decode(data)


def _align(op: Op, batch_no: int, out: pa.Table, in_keys: pa.Array, what: str) -> pa.Table:
    """``out`` reordered to its rows' input order; raises BatchKeyError for any row without a valid key."""
    where = f"{op.name} batch {batch_no} {what}"
    if KEY_COLUMN not in out.column_names:
        raise BatchKeyError(
            f"{where} has no {KEY_COLUMN!r} column, so its rows cannot be written back to their "
            f"input rows; an op must keep every input column it does not rewrite"
        )
    if out.num_rows == 0:
        return out
    keys = out.column(KEY_COLUMN).combine_chunks()
    if keys.null_count:
        raise BatchKeyError(
            f"{where}: {keys.null_count} row(s) have a null {KEY_COLUMN}; refusing to insert rows "
            f"that belong to no input row"
        )
    pos = pc.index_in(keys, value_set=in_keys)
    if pos.null_count:
        bad = keys.filter(pc.is_null(pos))[0].as_py()
        raise BatchKeyError(
            f"{where}: row with {KEY_COLUMN}={bad} is not one of the batch's input rows; refusing to insert it"
        )
    if len(pc.unique(pos)) != len(pos):
        raise BatchKeyError(f"{where}: an input row appears more than once in the output")
    return out.take(pc.sort_indices(pos))


def _check_batch(
    op: Op, batch_no: int, batch: pa.Table, out: pa.Table, failed: pa.Table | None
) -> tuple[pa.Table, pa.Table | None]:
    in_keys = batch.column(KEY_COLUMN).combine_chunks()
    out = _align(op, batch_no, out, in_keys, "output")
    if failed is not None:
        failed = _align(op, batch_no, failed, in_keys, "failed rows")
        overlap = pc.is_in(out.column(KEY_COLUMN), value_set=failed.column(KEY_COLUMN).combine_chunks())
        if pc.any(overlap).as_py():
            raise BatchKeyError(f"{op.name} batch {batch_no}: a row is both in the output and in the failed rows")
    n_failed = 0 if failed is None else failed.num_rows
    if isinstance(op, Mapper) and out.num_rows + n_failed != batch.num_rows:
        raise BatchKeyError(
            f"{op.name} batch {batch_no}: {batch.num_rows} rows in but {out.num_rows} out and "
            f"{n_failed} failed; a mapper must account for every row"
        )
    return out, failed


def _load_cursor(directory: str, binding: _Binding, where: str) -> tuple[list[dict[str, Any]], str | None]:
    """(trusted committed batch entries, reason the cursor was not (fully) trusted or None)."""
    try:
        cursor = json.loads(storage.read_bytes(storage.join(directory, CURSOR_FILE)))
    except FileNotFoundError:
        return [], None
    except (ValueError, OSError) as exc:
        return [], f"unreadable cursor ({exc})"
    reason = binding.mismatch(cursor)
    if reason:
        return [], f"cursor belongs to a different input: {reason}"
    entries: list[dict[str, Any]] = []
    for n, entry in enumerate(cursor.get("batches", [])):
        if entry.get("batch") != n:
            return entries, f"cursor entry {n} names batch {entry.get('batch')!r}"
        entries.append(entry)
    return entries, None


def _write_cursor(directory: str, binding: _Binding, meta: dict[str, Any], entries: list[dict[str, Any]]) -> None:
    cursor = {
        "version": CURSOR_VERSION,
        **meta,
        **binding.__dict__,
        "next_row": entries[-1]["end"] if entries else 0,
        "batches": entries,
    }
    storage.atomic_write_bytes(storage.join(directory, CURSOR_FILE), json.dumps(cursor, indent=1).encode())


@dataclass(frozen=True)
class _OpRun:
    """One partition's run of one op in committed batches: what every step names and reports."""

    op: Op
    op_index: int
    partition_id: int
    job_dir: str
    directory: str
    where: str
    meta: dict[str, Any]
    total: int
    events: EventLog | None


def run_expensive_op(
    op: Op,
    op_index: int,
    table: pa.Table,
    *,
    job_dir: str,
    partition_id: int,
    partition_hash: str,
    fingerprint: str,
    skip_op_error: bool,
    events: EventLog | None = None,
    fault_spec: list[dict[str, Any]] | None = None,
    label: str = "",
    on_rows_done: Callable[[int], None] | None = None,
) -> OpOutcome:
    """Apply ``op`` to ``table`` batch by batch with durable commits; same result and accounting as ``apply_op``.

    ``on_rows_done(rows)`` (optional) is told the rows done after each committed batch (the heartbeat)."""
    if not isinstance(op, (Mapper, Filter)):
        raise TypeError(f"{op.name}: only mappers and filters can run in committed batches, not {op.kind}s")
    if KEY_COLUMN not in table.column_names:
        raise BatchKeyError(f"{op.name}: the input has no {KEY_COLUMN!r} column to key batch output by")
    t0 = time.perf_counter()
    size = batch_size_for(op)
    total = table.num_rows
    if total == 0:
        return apply_op(op, op_index, table, skip_op_error)
    directory = batch_dir(job_dir, op_index, op.name, partition_id)
    binding = _Binding(partition_hash, fingerprint, hashing.hash_table(table), total, size)
    meta = {"op_index": op_index, "op_name": op.name, "partition_id": partition_id, "num_batches": -(-total // size)}
    where = f"{label or f'partition {partition_id}'} op {op_index} ({op.name})"
    run = _OpRun(op, op_index, partition_id, job_dir, directory, where, meta, total, events)
    entries, reason = _load_cursor(directory, binding, where)
    entries, reason, outs, fails = _load_committed_prefix(run, table, entries, reason)
    _report_resume(run, entries, reason)

    start = entries[-1]["end"] if entries else 0
    done_before = start
    computed_now = 0.0
    t_run = time.perf_counter()
    while start < total:
        b = len(entries)
        batch = table.slice(start, min(size, total - start))
        entry, out, failed = _compute_batch(run, b, start, batch, skip_op_error)
        if failed is not None:
            fails.append(failed)
        computed_now += entry["duration_s"]
        entries.append(entry)
        _write_cursor(directory, binding, meta, entries)  # the commit point of batch b
        outs.append(out)
        start = entry["end"]
        _report_commit(run, entry, batch, out, done_before, time.perf_counter() - t_run)
        if on_rows_done is not None:
            on_rows_done(start)
        if fault_spec:
            faults.maybe_fail(job_dir, fault_spec, partition_id, op_index, point="batch_commit", batch=b)
        check_stop(job_dir)
    return _assemble_outcome(run, table, outs, fails, entries, t0=t0, computed_now=computed_now)


def _load_committed_prefix(
    run: _OpRun, table: pa.Table, entries: list[dict[str, Any]], reason: str | None
) -> tuple[list[dict[str, Any]], str | None, list[pa.Table], list[pa.Table]]:
    """Verify and load the cursor's committed batches; return (the trusted entries, why the rest is not
    trusted or None, their outputs, their failed rows).  The first missing or torn file ends the prefix."""
    outs: list[pa.Table] = []
    fails: list[pa.Table] = []
    for entry in list(entries):
        b = entry["batch"]
        out = _read_ipc(run.directory, entry.get("output") or {})
        failed = _read_ipc(run.directory, entry["failed_rows"]) if entry.get("failed_rows") else None
        if out is None or (entry.get("failed_rows") and failed is None):
            reason = f"batch {b}'s file is missing or torn"
            entries = entries[:b]
            break
        outs.append(
            _check_batch(
                run.op,
                b,
                table.slice(entry["start"], entry["end"] - entry["start"]),
                out,
                failed.drop_columns([REASON_COLUMN]) if failed is not None else None,
            )[0]
        )
        if failed is not None:
            fails.append(failed)
    return entries, reason, outs, fails


def _report_resume(run: _OpRun, entries: list[dict[str, Any]], reason: str | None) -> None:
    """Log a distrusted cursor's reason; emit ``batch_resume`` and log where the run resumes, when
    batches are committed."""
    if reason:
        log.warning(
            "%s: not trusting batch cursor in %s beyond batch %d: %s; recomputing from there",
            run.where,
            run.directory,
            len(entries),
            reason,
        )
    if entries and run.events is not None:
        run.events.emit(
            "batch_resume",
            partition_id=run.partition_id,
            op_index=run.op_index,
            op_name=run.op.name,
            committed_batches=len(entries),
            next_row=entries[-1]["end"],
            input_rows=run.total,
            discarded_reason=reason,
        )
    if entries:
        log.info(
            "%s: resuming at batch %d/%d (row %d of %d) from the batch cursor",
            run.where,
            len(entries),
            run.meta["num_batches"],
            entries[-1]["end"],
            run.total,
        )


def _compute_batch(
    run: _OpRun, b: int, start: int, batch: pa.Table, skip_op_error: bool
) -> tuple[dict[str, Any], pa.Table, pa.Table | None]:
    """Apply the op to batch ``b`` and write its files; return (its cursor entry, its output, its failed
    rows with their reasons or None).  The batch is committed only once the cursor names it."""
    outcome = apply_op(run.op, run.op_index, batch, skip_op_error)
    out, failed = _check_batch(run.op, b, batch, outcome.table, outcome.failed_rows)
    entry = {
        "batch": b,
        "start": start,
        "end": start + batch.num_rows,
        "rows_in": batch.num_rows,
        "rows_out": out.num_rows,
        "filtered": outcome.accounting["filtered"],
        "failed": outcome.accounting["failed"],
        "duration_s": outcome.accounting["duration_s"],
        "output": _write_ipc(storage.join(run.directory, f"batch_{b:06d}.arrow"), out),
    }
    if failed is not None:
        failed = failed.append_column(REASON_COLUMN, pa.array(outcome.failed_reasons, type=pa.string()))
        entry["failed_rows"] = _write_ipc(storage.join(run.directory, f"batch_{b:06d}.failed.arrow"), failed)
    entry["committed_at"] = time.time()
    return entry, out, failed


def _report_commit(
    run: _OpRun, entry: dict[str, Any], batch: pa.Table, out: pa.Table, done_before: int, elapsed: float
) -> None:
    """Emit ``batch_commit`` and log the progress (rows done, rate over this call's batches, ETA)."""
    b, start, total = entry["batch"], entry["end"], run.total
    rate = (start - done_before) / elapsed if elapsed > 0 else 0.0
    eta = (total - start) / rate if rate > 0 else None
    if run.events is not None:
        run.events.emit(
            "batch_commit",
            partition_id=run.partition_id,
            op_index=run.op_index,
            op_name=run.op.name,
            batch=b,
            num_batches=run.meta["num_batches"],
            start_row=entry["start"],
            end_row=entry["end"],
            input_rows=batch.num_rows,
            output_rows=out.num_rows,
            failed=entry["failed"],
            rows_done=start,
            rows_total=total,
            rows_per_s=round(rate, 3),
            eta_s=None if eta is None else round(eta, 3),
            duration=entry["duration_s"],
        )
    log.info(
        "%s: batch %d/%d committed: %d/%d rows, %.1f rows/s, ETA %s",
        run.where,
        b + 1,
        run.meta["num_batches"],
        start,
        total,
        rate,
        "-" if eta is None else f"{eta:.1f}s",
    )


def _assemble_outcome(
    run: _OpRun,
    table: pa.Table,
    outs: list[pa.Table],
    fails: list[pa.Table],
    entries: list[dict[str, Any]],
    *,
    t0: float,
    computed_now: float,
) -> OpOutcome:
    """Concatenate every batch's output and failed rows into the op's outcome with its accounting.

    ``t0``: when this call started; ``computed_now``: the op's compute time in this call's batches
    (the rest of the call is its own overhead: cursor checks, commits, reassembly).  Raises
    RuntimeError when the batches' rows do not add up to the input's."""
    op, total = run.op, run.total
    result = pa.concat_tables(outs, promote_options="permissive") if outs else table.slice(0, 0)
    failed_all = pa.concat_tables(fails, promote_options="permissive") if fails else None
    reasons: list[str] = []
    if failed_all is not None:
        reasons = failed_all.column(REASON_COLUMN).to_pylist()
        failed_all = failed_all.drop_columns([REASON_COLUMN])
    acct = {
        "op_index": run.op_index,
        "op_name": op.name,
        "kind": op.kind,
        "rows_in": total,
        "rows_out": result.num_rows,
        "filtered": sum(e["filtered"] for e in entries),
        "duplicates": 0,
        "failed": sum(e["failed"] for e in entries),
        # op compute time over all attempts (every committed batch) plus this call's own overhead
        # (cursor checks, commits, reassembly), so a resumed op reports what the partition cost in total
        "duration_s": round(sum(e["duration_s"] for e in entries) + (time.perf_counter() - t0) - computed_now, 6),
    }
    if acct["rows_out"] + acct["filtered"] + acct["failed"] != total:
        raise RuntimeError(f"{run.where}: batch accounting does not add up: {acct}")
    return OpOutcome(result, acct, failed_all, reasons)


def discard_superseded(job_dir: str, partition_id: int, upto_op_index: int) -> list[str]:
    """Remove this partition's batch directories of ops <= ``upto_op_index``.

    Call only after a checkpoint at ``upto_op_index`` is committed: that
    checkpoint holds everything the batches did, so they are no longer
    needed for a resume.  Returns the directories removed.
    """
    root = storage.join(job_dir, BATCHES_DIR)
    removed = []
    for name in storage.listdir(root):
        try:
            idx = int(name.split("_", 2)[1])
        except (IndexError, ValueError):
            continue
        if not name.startswith("op_") or idx > upto_op_index:
            continue
        d = storage.join(root, name, partition_name(partition_id))
        if storage.exists(d):
            storage.remove_tree(d)
            removed.append(d)
    return removed
