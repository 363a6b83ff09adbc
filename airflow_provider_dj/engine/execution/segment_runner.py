"""Run one segment of the pipeline on one partition, resuming from checkpoints.

This is the function a Ray task executes (or the operator in-process).  On
every call — first try, retry, UI clear — it looks for the partition's
latest valid checkpoint inside the segment, loads it, and runs only the
ops after it.  A partition whose segment output is already committed does
no work at all.  Because a checkpoint is only trusted when it derives from
the same partition content and op pipeline, resuming can never mix rows of
different inputs or recipes (invariant 2).
"""

from __future__ import annotations

import functools
import logging
import time
from dataclasses import dataclass, field

import pyarrow as pa

from airflow_provider_dj.engine.execution import faults
from airflow_provider_dj.engine.execution.batch_cursor import discard_superseded, run_expensive_op
from airflow_provider_dj.engine.execution.failure_guard import FailureRateExceededError, check_partition, load_settings
from airflow_provider_dj.engine.execution.global_op_state import KEYS_COLUMN, MASK_COLUMN, keys_store, mask_store
from airflow_provider_dj.engine.execution.op_runner import apply_keep_mask, apply_op, mapper_delta
from airflow_provider_dj.engine.execution.resume_point import INPUT_ROW_COLUMN, read_input_rows
from airflow_provider_dj.engine.jobdir import stop_control
from airflow_provider_dj.engine.jobdir.integrity import FAILED_FILE_KEY, file_seal
from airflow_provider_dj.engine.jobdir.layout import JobContext
from airflow_provider_dj.engine.observe.events import EventLog
from airflow_provider_dj.engine.observe.progress_log import PartitionProgressLog
from airflow_provider_dj.engine.observe.tracer import tracer_for_partition
from airflow_provider_dj.engine.storage import fs as storage
from airflow_provider_dj.engine.storage.checkpoint_pipeline import CheckpointPipeline
from airflow_provider_dj.engine.storage.checkpoints import MAX_DELTA_CHAIN, CheckpointStore
from airflow_provider_dj.ops.registry import create_op

__all__ = [  # the names global_op_state and resume_point now own stay importable from here
    "INPUT_ROW_COLUMN",
    "KEYS_COLUMN",
    "MASK_COLUMN",
    "MissingUpstreamStateError",
    "SegmentResult",
    "keys_store",
    "mask_store",
    "run_segment",
]

log = logging.getLogger(__name__)


class MissingUpstreamStateError(RuntimeError):
    """The state this segment starts from is gone; an upstream task must be re-run."""


@dataclass
class SegmentResult:
    partition_id: int
    segment_index: int
    resumed_from_op: int | None  # op index of the checkpoint loaded; -1 = input; None = nothing to do
    ops_run: list[int] = field(default_factory=list)
    rows_out: int = 0
    failed_rows: int = 0
    skipped: bool = False

    def to_dict(self) -> dict:
        return self.__dict__.copy()


def _write_failed(ctx: JobContext, op_index: int, op_name: str, pid: int, rows: pa.Table, reasons: list[str]) -> dict:
    """failed/op_<i>_<op>/partition_<p>.jsonl: the sample, its input row, the op and the error.

    Returns the file's seal (relative path, size, xxh3) for the op's accounting entry, which the next
    checkpoint's marker commits, so a changed or torn failed file is caught on load (engine/jobdir/integrity.py)."""
    from airflow_provider_dj.engine.output.jsonl_writer import write_jsonl

    n = rows.num_rows
    rows = rows.append_column("__dj__error_type__", pa.array([r.split(":", 1)[0] for r in reasons], type=pa.string()))
    rows = rows.append_column("__dj__error__", pa.array(reasons, type=pa.string()))
    rows = rows.append_column("__dj__failed_op__", pa.array([op_name] * n, type=pa.string()))
    rows = rows.append_column("__dj__failed_op_index__", pa.array([op_index] * n, type=pa.int64()))
    rows = rows.append_column("__dj__partition__", pa.array([pid] * n, type=pa.int64()))
    import io

    buf = io.BytesIO()
    write_jsonl(rows, buf)
    rel = f"failed/op_{op_index:03d}_{op_name}/partition_{pid:05d}.jsonl"
    data = buf.getvalue()
    storage.atomic_write_bytes(
        storage.join(ctx.job_dir, *rel.split("/")),
        data,
        what=f"the failed samples of op {op_index} ({op_name}) partition {pid}",
    )
    return {"path": rel, **file_seal(data)}


def run_segment(
    job_dir: str,
    segment_index: int,
    partition_id: int,
    *,
    try_number: int | None = None,
    event_defaults: dict | None = None,
    progress=None,
    op_factory=None,
) -> SegmentResult:
    """``op_factory(planned_op, text_key) -> Op`` supplies op instances; None
    creates a fresh one per call.  An actor of a group's pool passes one that
    keeps stateful ops (models) alive across partitions (engine/execution/actor_pool.py)."""
    ctx = JobContext(job_dir)
    plan = ctx.plan
    seg = plan.segments[segment_index]
    part = ctx.partition(partition_id)
    phash = part["content_hash"]
    recipe = ctx.recipe
    store = CheckpointStore(job_dir, ctx.storage_format)
    kstore = keys_store(job_dir)
    ops_by_index = {o.index: o for o in plan.ops}
    events = EventLog(job_dir, ctx.job_id, defaults=dict(event_defaults or {}, try_number=try_number))
    points = set(plan.checkpoint_points)
    fault_spec = faults.load_faults(job_dir)
    target = seg.end - 1  # state index this segment must leave behind
    result = SegmentResult(partition_id, segment_index, None)
    label = f"partition {partition_id} (rows {part['start_row']}-{part['end_row'] - 1})"
    tracer = tracer_for_partition(ctx, partition_id, phash)  # None when open_tracer is off: no tracing work
    guard = load_settings(job_dir, recipe)  # the limits the last validate recorded (a resume may raise them)

    def fp(i: int) -> str:
        return plan.ops[i].fingerprint

    def make_op(i: int):
        if op_factory is not None:
            return op_factory(ops_by_index[i], recipe.text_key)
        return create_op(ops_by_index[i].name, ops_by_index[i].args, recipe.text_key)

    # -- already done? ------------------------------------------------------
    target_done = target < 0 or store.is_committed(target, ops_by_index[target].name, partition_id, phash, fp(target))
    keys_done = seg.keys_for_global is None or kstore.is_committed(
        seg.keys_for_global, ops_by_index[seg.keys_for_global].name, partition_id, phash, fp(seg.keys_for_global)
    )
    if (
        target_done
        and keys_done
        and (target < 0 or store.load_valid(target, ops_by_index[target].name, partition_id, phash, fp(target)))
    ):
        marker = store.read_marker(target, ops_by_index[target].name, partition_id) if target >= 0 else {}
        result.skipped = True
        result.rows_out = int((marker or {}).get("num_rows", part["num_rows"]))
        events.emit(
            "partition_complete",
            partition_id=partition_id,
            segment=segment_index,
            status="already_complete",
            output_rows=result.rows_out,
        )
        log.info("%s: segment %d already complete; nothing to do", label, segment_index)
        return result

    ckpt = CheckpointPipeline()  # mid-segment checkpoints overlap the next op (engine.storage.checkpoint_pipeline)

    written: dict[int, int] = {}  # op index -> delta depth of its checkpoint (0: whole table), stored or loaded

    def checkpoint_writer(i: int, table_in: pa.Table, out: pa.Table, outcome, base_state: int | None):
        """The write of op i's checkpoint, as a call: a delta on the checkpoint of state i-1 when that
        checkpoint holds exactly the op's input and the op dropped rows or changed little, else whole.
        The delta of a mapper is worked out inside the call, so in the background writer.

        The segment's output (``target``) is read again by the next segment and by the export, so
        it is a delta only when at most two levels lead to a whole checkpoint: a long chain made the
        export of a 1M-row every_op job 2-4 s slower (measured), more than writing it whole costs."""
        acct = list(accounting)
        name = ops_by_index[i].name
        if base_state == i - 1 and store.supports_delta:

            def write() -> None:
                delta = None
                if i != target or written.get(i - 1, MAX_DELTA_CHAIN) <= 1:
                    delta = outcome.delta if outcome.delta is not None else mapper_delta(table_in, out)
                written[i] = 0 if delta is None else written.get(i - 1, MAX_DELTA_CHAIN) + 1
                if delta is None:
                    _save_and_discard(store, events, i, name, partition_id, out, phash, fp(i), acct, job_dir)
                    return
                path = store.save_delta(
                    op_index=i,
                    op_name=name,
                    partition_id=partition_id,
                    keep=delta.keep,
                    columns=delta.columns,
                    out_columns=out.column_names,
                    out_rows=out.num_rows,
                    base_op_index=i - 1,
                    base_op_name=ops_by_index[i - 1].name,
                    base_fingerprint=fp(i - 1),
                    partition_hash=phash,
                    fingerprint=fp(i),
                    accounting=acct,
                    depth=written[i],
                )
                events.emit(
                    "checkpoint_save",
                    partition_id=partition_id,
                    op_index=i,
                    op_name=name,
                    output_rows=out.num_rows,
                    checkpoint_path=path,
                    delta_of_op=i - 1,
                )
                discard_superseded(job_dir, partition_id, i)

            return write
        written[i] = 0
        return functools.partial(
            _save_and_discard, store, events, i, name, partition_id, out, phash, fp(i), acct, job_dir
        )

    def stop_point(after_op: int | None) -> None:
        """A committed boundary: honour a pending stop request here (engine.jobdir.stop_control)."""
        try:
            stop_control.check_stop(job_dir)
        except stop_control.StopRequested as exc:
            ckpt.flush()  # the checkpoint after ``after_op`` commits before the stop is reported
            exc.partition_ids = [partition_id]
            events.emit(
                "partition_stopped",
                partition_id=partition_id,
                segment=segment_index,
                status="stopped",
                after_op=after_op,
                force=exc.force,
            )
            log.info(
                "%s: stop requested (%s); stopping after op %s with its checkpoint committed",
                label,
                exc.request.get("requested_by"),
                after_op,
            )
            raise

    stop_point(None)  # a stop pending before this partition started: do nothing at all
    events.emit(
        "partition_start",
        partition_id=partition_id,
        segment=segment_index,
        status="running",
        start_row=part["start_row"],
        end_row=part["end_row"],
        input_rows=part["num_rows"],
    )
    plog = PartitionProgressLog(job_dir, partition_id, segment=segment_index, try_number=try_number)
    plog.partition_start(
        start_row=part["start_row"],
        end_row=part["end_row"],
        input_rows=part["num_rows"],
        ops=len(seg.op_indices) + (seg.applies_global is not None),
    )
    t_start = time.perf_counter()

    # -- find the latest valid checkpoint inside this segment ----------------
    table: pa.Table | None = None
    accounting: list[dict] = []
    state = None  # op index of the state held in `table` (-1 = input rows)
    committed_state = None  # op index whose checkpoint holds exactly `table` (the base for a delta checkpoint)
    lowest = seg.start - 1
    for k in range(target, lowest - 1, -1):
        if k < 0 or k not in points:
            continue
        loaded = store.load_valid(k, ops_by_index[k].name, partition_id, phash, fp(k))
        if loaded is not None:
            table, accounting, state = loaded.table, list(loaded.marker.get("accounting", [])), k
            committed_state = k
            written[k] = _delta_depth(loaded.marker)
            events.emit(
                "checkpoint_load",
                partition_id=partition_id,
                op_index=k,
                op_name=ops_by_index[k].name,
                output_rows=table.num_rows,
                checkpoint_path=store.data_path(k, ops_by_index[k].name, partition_id),
            )
            events.emit(
                "partition_resume",
                partition_id=partition_id,
                segment=segment_index,
                resumed_after_op=k,
                status="resumed",
                op_index=k,
                op_name=ops_by_index[k].name,
            )
            plog.resumed(k, ops_by_index[k].name, table.num_rows)
            log.info(
                "%s: resuming from checkpoint after op %d (%s), %d rows", label, k, ops_by_index[k].name, table.num_rows
            )
            break

    if table is None:
        g = seg.applies_global
        if g is not None:
            # Start from the previous segment's output and apply the global keep mask.
            base_idx = g - 1
            if base_idx >= 0:
                base = store.load_valid(base_idx, ops_by_index[base_idx].name, partition_id, phash, fp(base_idx))
                if base is None:
                    raise MissingUpstreamStateError(
                        f"{label}: the output of op {base_idx} ({ops_by_index[base_idx].name}) is missing or invalid; "
                        f"clear the upstream segment task for this partition (with downstream) to recompute it"
                    )
                table, accounting = base.table, list(base.marker.get("accounting", []))
                committed_state = base_idx
                written[base_idx] = _delta_depth(base.marker)
                events.emit(
                    "checkpoint_load",
                    partition_id=partition_id,
                    op_index=base_idx,
                    op_name=ops_by_index[base_idx].name,
                    output_rows=table.num_rows,
                    checkpoint_path=store.data_path(base_idx, ops_by_index[base_idx].name, partition_id),
                )
            else:
                table, accounting = read_input_rows(ctx, partition_id), []
            mask_cp = mask_store(job_dir).load_valid(g, ops_by_index[g].name, partition_id, phash, fp(g))
            if mask_cp is None:
                raise MissingUpstreamStateError(
                    f"{label}: the keep mask of global op {g} ({ops_by_index[g].name}) is missing; "
                    f"clear the task {plan.global_task_id(g)} to recompute it"
                )
            op = make_op(g)
            op.bind_run_context(job_dir=job_dir, op_index=g, partition_id=partition_id)
            events.emit(
                "op_start",
                partition_id=partition_id,
                op_index=g,
                op_name=op.name,
                input_rows=table.num_rows,
                status="running",
            )
            faults.maybe_fail(job_dir, fault_spec, partition_id, g, point="op_start")
            outcome = apply_keep_mask(op, g, table, mask_cp.table.column(MASK_COLUMN).combine_chunks())
            table_in, table = table, outcome.table
            accounting.append(outcome.accounting)
            events.emit(
                "op_complete",
                partition_id=partition_id,
                op_index=g,
                op_name=op.name,
                input_rows=outcome.accounting["rows_in"],
                output_rows=table.num_rows,
                duplicates=outcome.accounting["duplicates"],
                duration=outcome.accounting["duration_s"],
                status="success",
            )
            plog.op_done(
                g,
                op.name,
                rows_in=outcome.accounting["rows_in"],
                rows_out=table.num_rows,
                duration=outcome.accounting["duration_s"],
                n=1,
                total=1 + len(seg.op_indices),
                duplicates=outcome.accounting["duplicates"],
            )
            result.ops_run.append(g)
            state = g
            if g in points:
                checkpoint_writer(g, table_in, table, outcome, committed_state)()
                committed_state = g
            else:
                committed_state = None
            faults.maybe_fail(job_dir, fault_spec, partition_id, g)
        else:
            table = read_input_rows(ctx, partition_id)
            state = -1
        result.resumed_from_op = -1 if seg.applies_global is None else seg.applies_global - 1
    else:
        result.resumed_from_op = state

    # -- run the remaining ops of this segment --------------------------------
    total_ops = target - state
    for n, i in enumerate(range(state + 1, target + 1), start=1):
        op = make_op(i)
        op.bind_run_context(job_dir=job_dir, op_index=i, partition_id=partition_id)
        events.emit(
            "op_start",
            partition_id=partition_id,
            op_index=i,
            op_name=op.name,
            input_rows=table.num_rows,
            status="running",
        )
        plog.op_start(i, op.name, table.num_rows, n, total_ops)
        try:
            # Inside the try: an injected op_start fault is an op failure like any other (op_failed +
            # partition_failed events), not a silent exit.
            faults.maybe_fail(job_dir, fault_spec, partition_id, i, point="op_start")
            if op.expensive:  # batches committed with a cursor: a crash or stop loses at most one batch
                outcome = run_expensive_op(
                    op,
                    i,
                    table,
                    job_dir=job_dir,
                    partition_id=partition_id,
                    partition_hash=phash,
                    fingerprint=fp(i),
                    skip_op_error=recipe.skip_op_error,
                    events=events,
                    fault_spec=fault_spec,
                    label=label,
                )
            else:
                needs = tuple(type(op).input_fields(ops_by_index[i].args, recipe.text_key))
                outcome = apply_op(op, i, table, recipe.skip_op_error, needs)
        except stop_control.StopRequested as exc:  # an op's batch loop committed its batch and saw a stop
            ckpt.flush_quietly()
            exc.partition_ids = [partition_id]
            events.emit(
                "partition_stopped",
                partition_id=partition_id,
                segment=segment_index,
                status="stopped",
                op_index=i,
                op_name=op.name,
                force=exc.force,
                note="inside the op, at a batch boundary",
            )
            raise
        except Exception as exc:
            ckpt.flush_quietly()  # the checkpoint of the op before commits: the retry resumes after it
            events.emit(
                "op_failed",
                partition_id=partition_id,
                op_index=i,
                op_name=op.name,
                input_rows=table.num_rows,
                error_message=f"{type(exc).__name__}: {exc}",
                status="failed",
            )
            events.emit(
                "partition_failed",
                partition_id=partition_id,
                segment=segment_index,
                error_message=f"op {i} ({op.name}): {type(exc).__name__}: {exc}",
                status="failed",
            )
            plog.partition_failed(f"op {i} ({op.name}): {type(exc).__name__}: {exc}")
            raise
        if outcome.failed_rows is not None:
            outcome.accounting[FAILED_FILE_KEY] = _write_failed(
                ctx, i, op.name, partition_id, outcome.failed_rows, outcome.failed_reasons
            )
        try:  # past the failure-rate guard: fail here, before op i's checkpoint, with failed/ written
            check_partition(
                guard,
                outcome.accounting,
                outcome.failed_reasons,
                partition_id=partition_id,
                label=label,
                resume=f"dj-airflow run {recipe.source_file or '<recipe>'} --resume {ctx.job_id}",
            )
        except FailureRateExceededError as exc:
            ckpt.flush_quietly()
            events.emit(
                "op_failed",
                partition_id=partition_id,
                op_index=i,
                op_name=op.name,
                input_rows=table.num_rows,
                failed=exc.failed,
                error_message=str(exc),
                status="failed",
                reason="failure_rate_guard",
            )
            events.emit(
                "partition_failed",
                partition_id=partition_id,
                segment=segment_index,
                error_message=f"op {i} ({op.name}): {exc}",
                status="failed",
            )
            plog.partition_failed(f"op {i} ({op.name}): {exc}")
            raise
        if tracer is not None:  # candidates are durable before any checkpoint after op i (engine.observe.tracer)
            tracer.observe(i, op, table, outcome)
        table_in, table = table, outcome.table
        accounting.append(outcome.accounting)
        result.ops_run.append(i)
        result.failed_rows += outcome.accounting["failed"]
        events.emit(
            "op_complete",
            partition_id=partition_id,
            op_index=i,
            op_name=op.name,
            input_rows=outcome.accounting["rows_in"],
            output_rows=table.num_rows,
            filtered=outcome.accounting["filtered"],
            failed=outcome.accounting["failed"],
            duration=outcome.accounting["duration_s"],
            status="success",
        )
        log.info(
            "%s: op %d/%d %s done: %d -> %d rows in %.3fs (ops %d/%d of this segment)",
            label,
            i,
            plan.final_op_index,
            op.name,
            outcome.accounting["rows_in"],
            table.num_rows,
            outcome.accounting["duration_s"],
            n,
            total_ops,
        )
        plog.op_done(
            i,
            op.name,
            rows_in=outcome.accounting["rows_in"],
            rows_out=table.num_rows,
            duration=outcome.accounting["duration_s"],
            n=n,
            total=total_ops,
            filtered=outcome.accounting["filtered"],
            failed=outcome.accounting["failed"],
        )
        if progress is not None:
            progress(partition_id, i, n, total_ops)
        if i in points and i != target:
            # Mid-segment: written while op i+1 runs.  Batch cursors up to op i go only after the commit.
            ckpt.submit(checkpoint_writer(i, table_in, table, outcome, committed_state))
        elif i in points:
            ckpt.flush()
            checkpoint_writer(i, table_in, table, outcome, committed_state)()
        committed_state = i if i in points else None
        if fault_spec:
            ckpt.flush()  # an injected fault after op i finds op i's checkpoint committed, as without the pipeline
        faults.maybe_fail(job_dir, fault_spec, partition_id, i)
        if i in points and i != target:
            stop_point(i)  # op i is committed (or committing: a stop flushes first); a resume restarts after it
    ckpt.flush()

    # -- per-partition key phase of the global op that ends this segment ------
    if seg.keys_for_global is not None:
        g = seg.keys_for_global
        op = make_op(g)
        op.bind_run_context(job_dir=job_dir, op_index=g, partition_id=partition_id)
        t0 = time.perf_counter()
        keys = op.compute_hash(table)
        # One fixed-size key per row (exact dedup) or a table of per-row
        # signatures (e.g. MinHash bands) that the op's resolve_global reads.
        keys_table = keys if isinstance(keys, pa.Table) else pa.table({KEYS_COLUMN: keys})
        if keys_table.num_rows != table.num_rows:
            raise RuntimeError(f"{op.name}.compute_hash returned {keys_table.num_rows} rows for {table.num_rows}")
        kstore.save(
            op_index=g,
            op_name=op.name,
            partition_id=partition_id,
            table=keys_table,
            partition_hash=phash,
            fingerprint=fp(g),
            accounting=[],
            extra={"duration_s": round(time.perf_counter() - t0, 6)},
        )
        events.emit(
            "checkpoint_save",
            partition_id=partition_id,
            op_index=g,
            op_name=op.name,
            output_rows=keys_table.num_rows,
            checkpoint_path=kstore.data_path(g, op.name, partition_id),
            note="dedup keys",
        )

    result.rows_out = table.num_rows
    plog.partition_done(table.num_rows)
    events.emit(
        "partition_complete",
        partition_id=partition_id,
        segment=segment_index,
        output_rows=table.num_rows,
        duration=round(time.perf_counter() - t_start, 6),
        status="success",
        ops_run=result.ops_run,
    )
    return result


def _delta_depth(marker: dict) -> int:
    """How many delta levels lead from this checkpoint to a whole one (0: it is whole)."""
    delta = marker.get("delta")
    return 0 if not delta else int(delta.get("depth", MAX_DELTA_CHAIN))


def _save_and_discard(store, events, op_index, op_name, pid, table, phash, fingerprint, accounting, job_dir) -> None:
    _save(store, events, op_index, op_name, pid, table, phash, fingerprint, accounting)
    discard_superseded(job_dir, pid, op_index)


def _save(store, events, op_index, op_name, pid, table, phash, fingerprint, accounting) -> None:
    path = store.save(
        op_index=op_index,
        op_name=op_name,
        partition_id=pid,
        table=table,
        partition_hash=phash,
        fingerprint=fingerprint,
        accounting=accounting,
    )
    events.emit(
        "checkpoint_save",
        partition_id=pid,
        op_index=op_index,
        op_name=op_name,
        output_rows=table.num_rows,
        checkpoint_path=path,
    )
