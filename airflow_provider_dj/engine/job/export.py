"""Export, row accounting, job summary and retention.

The export concatenates each partition's final checkpoint in partition
order — partitions are contiguous row ranges and every op preserves order,
so the result is in input order whatever the partition count (invariant 5).
It is written atomically: a crash mid-export leaves the previous export (or
nothing), never half a file.  Before writing anything the accounting of
every op is checked (invariant 6); a mismatch fails the job.
"""

from __future__ import annotations

import io
import logging
import time
from dataclasses import dataclass, field
from typing import Callable, Iterator

import pyarrow as pa
import pyarrow.parquet as pq
import xxhash

from airflow_provider_dj.core import fs as storage
from airflow_provider_dj.engine.job.retention import apply_retention
from airflow_provider_dj.engine.jobdir.events import EventLog
from airflow_provider_dj.engine.jobdir.faults import load_faults, maybe_fail
from airflow_provider_dj.engine.jobdir.identity import resume_command
from airflow_provider_dj.engine.jobdir.layout import JOB_SUMMARY, write_json
from airflow_provider_dj.engine.output.accounting import check_accounting
from airflow_provider_dj.engine.output.errors import (
    AccountingError,
    MissingFinalCheckpointError,
)
from airflow_provider_dj.engine.output.fields import clean_for_export
from airflow_provider_dj.engine.output.hashing import HashingWriter
from airflow_provider_dj.engine.output.media import (
    export_media,
    export_media_dir,
    exported_media,
    remove_unnamed,
    rewrite_media_paths,
    write_media_record,
)
from airflow_provider_dj.engine.storage.checkpoints import CheckpointStore
from airflow_provider_dj.engine.storage.context import JobContext
from airflow_provider_dj.engine.storage.jsonl_writer import write_jsonl
from airflow_provider_dj.ops.columns import INPUT_ROW_COLUMN

log = logging.getLogger(__name__)


def _write_table(table: pa.Table, out) -> int:
    write_jsonl(table, out)
    return table.num_rows


def _jsonl_parts(part_source: Callable[[], Iterator[dict]], out, record: list | None = None) -> Iterator[int]:
    """Copy each part file into the export in order; yield its row count.  ``record`` gets each part's
    range in the export (partition, offset, length, xxh3, rows) for nightly reuse."""
    for part in part_source():
        start, h = out.n, xxhash.xxh3_128()
        with storage.open_read(part["path"]) as fh:
            for chunk in storage.iter_chunks(fh):
                h.update(chunk)
                out.write(chunk)
        if record is not None:
            record.append((part["partition_id"], start, out.n - start, h.hexdigest(), part["rows"]))
        yield part["rows"]


def export_job(
    job_dir: str,
    *,
    event_defaults: dict | None = None,
    started_at: float | None = None,
    part_source: Callable[[], Iterator[dict]] | None = None,
) -> dict:
    """``part_source`` (JSONL exports only): yields each partition's serialized part, in partition
    order, from parallel workers (engine/output/parts.py); without it, this process serializes."""
    ctx = JobContext(job_dir)
    recipe, plan = ctx.recipe, ctx.plan
    parts = ctx.partitioning_info["partitions"]
    store = CheckpointStore(job_dir, ctx.storage_format)
    events = EventLog(job_dir, ctx.job_id, defaults=event_defaults)
    t0 = time.perf_counter()
    events.emit("export_start", export_path=recipe.export_path, partitions=len(parts))

    markers = _final_markers(store, plan, parts)
    per_op = _checked_accounting(job_dir, ctx, parts, markers)
    # Media files ops wrote (image_blur_mapper): in the export's media folder before the export commits.
    media, media_files = exported_media(job_dir, markers, recipe.export_path)
    media_report = export_media(media) if media else None
    tables = _FinalTables(ctx, store, parts, media)
    if not recipe.export_in_parallel:  # Data-Juicer's key: same bytes, written by this process alone
        part_source = None
    ledger = _PartLedger()
    rows, checksum, nbytes, manifest = _write_export(job_dir, ctx, tables, markers, part_source, ledger)
    expected = per_op[-1]["rows_out"] if per_op else 0
    if rows != expected:
        raise AccountingError(f"export wrote {rows} rows but the final op produced {expected}")
    if media:
        remove_unnamed(recipe.export_path, media)
    history = _commit_dedup_history(job_dir, ctx, tables)
    duration = time.perf_counter() - t0
    events.emit(
        "export_complete",
        export_path=recipe.export_path,
        output_rows=rows,
        duration=round(duration, 6),
        checksum=checksum,
        serialized_in_parallel=part_source is not None or None,
        parts_linked_as_shards=ledger.worker_parts_linked,
        manifest=manifest["path"] if manifest else None,
        shards=[s["file"] for s in manifest["shards"]] if manifest else None,
    )
    summary = _completed_summary(
        ctx,
        markers,
        per_op,
        history,
        export={"rows": rows, "bytes": nbytes, "checksum": checksum, "manifest": manifest},
        started_at=started_at,
    )
    if media_report is not None:
        # The copies' record, sealed here, is what a re-run of the completed job checks them against.
        record = write_media_record(job_dir, media, media_files)
        summary["export"]["media"] = {"dir": export_media_dir(recipe.export_path), **media_report, "record": record}
    summary = _finish_summary(ctx, summary, markers, ledger)
    write_json(ctx.path(JOB_SUMMARY), summary)
    from airflow_provider_dj.engine.job.summary import after_summary_written

    after_summary_written(job_dir, summary)
    log.info("exported %d rows to %s (%d bytes, xxh3 %s)", rows, summary["export"]["path"], nbytes, checksum)
    return summary


def _final_markers(store: CheckpointStore, plan, parts: list[dict]) -> dict[int, dict]:
    """Each partition's final-op commit marker, by partition id.

    Raises MissingFinalCheckpointError naming the first partition whose final output is not committed:
    nothing is exported until every partition is."""
    final = plan.final_op_index
    markers: dict[int, dict] = {}
    for p in parts:
        pid = p["partition_id"]
        if not store.is_committed(final, plan.ops[final].name, pid, p["content_hash"], plan.ops[final].fingerprint):
            raise MissingFinalCheckpointError(
                f"partition {pid} (rows {p['start_row']}-{p['end_row'] - 1}) has no committed final output; "
                f"clear its partition task to compute it"
            )
        markers[pid] = store.read_marker(final, plan.ops[final].name, pid)
    return markers


def _checked_accounting(job_dir: str, ctx: JobContext, parts: list[dict], markers: dict[int, dict]) -> list[dict]:
    """The per-op accounting of the whole job (invariant 6), after the job-wide failure-rate guard.

    Raises AccountingError (or the guard's error) before anything is written."""
    recipe = ctx.recipe
    per_op = check_accounting(
        {pid: m["accounting"] for pid, m in markers.items()},
        len(ctx.plan.ops),
        {p["partition_id"]: p["num_rows"] for p in parts},
    )
    # The failure-rate guard over the whole job (engine/execution/failure_guard.py), before anything is written.
    from airflow_provider_dj.engine.execution.failure_guard import check_job, load_settings

    check_job(
        job_dir,
        load_settings(job_dir, recipe),
        per_op,
        {pid: m["accounting"] for pid, m in markers.items()},
        resume=resume_command(recipe.source_file, ctx.job_id),
    )
    return per_op


class _FinalTables:
    """Each partition's final checkpoint as a table, loaded on each call.

    With a dedup history in the recipe, every loaded table's input-row column is kept in
    ``exported_rows`` (partition -> input row of each exported row): the history commit needs it."""

    def __init__(
        self, ctx: JobContext, store: CheckpointStore, parts: list[dict], media: dict[str, str] | None = None
    ) -> None:
        self.ctx, self.store, self.parts = ctx, store, parts
        self.media = media or {}  # media file in the job dir -> its copy beside the export
        self.exported_rows: dict[int, object] = {}

    def final_table(self, p: dict) -> pa.Table:
        """The partition's final checkpoint; MissingFinalCheckpointError when it is torn."""
        plan, recipe = self.ctx.plan, self.ctx.recipe
        final = plan.final_op_index
        cp = self.store.load_valid(
            final, plan.ops[final].name, p["partition_id"], p["content_hash"], plan.ops[final].fingerprint
        )
        if cp is None:
            raise MissingFinalCheckpointError(
                f"partition {p['partition_id']}: final checkpoint is torn; clear its task"
            )
        if recipe.dedup_history is not None:
            self.exported_rows[p["partition_id"]] = cp.table.column(INPUT_ROW_COLUMN).to_numpy()
        return cp.table

    def table_of(self, p: dict) -> pa.Table:
        """The partition's final table with the columns the recipe does not keep removed, naming the
        export's copies of its media files."""
        recipe = self.ctx.recipe
        table = clean_for_export(self.final_table(p), recipe.keep_stats_in_res_ds, recipe.keep_hashes_in_res_ds)
        return rewrite_media_paths(table, self.media)

    def tables(self) -> Iterator[pa.Table]:
        """Every partition's export table, in partition order."""
        for p in self.parts:
            yield self.table_of(p)


@dataclass
class _PartLedger:
    """Where each partition's bytes lie in the export, for nightly reuse.

    ``written``: the parts this process wrote or copied, as published entries; ``copied_ranges``: the
    parallel path's parts as (partition, offset, length, xxh3, rows); ``parts_copied``: how many parts
    came from the last export's bytes, ``bytes_copied`` their size; ``parts_linked``: how many of those
    were hard-linked shards (``export_layout: partition_shards``); ``worker_parts_linked``: how many of
    the parallel workers' part files became shards by a hard link, not a copy (the same layout; None
    when there were no such parts)."""

    written: list[dict] = field(default_factory=list)
    copied_ranges: list[tuple] = field(default_factory=list)
    parts_copied: int = 0
    bytes_copied: int = 0
    parts_linked: int = 0
    worker_parts_linked: int | None = None


def _write_export(
    job_dir: str,
    ctx: JobContext,
    tables: _FinalTables,
    markers: dict[int, dict],
    part_source: Callable[[], Iterator[dict]] | None,
    ledger: _PartLedger,
) -> tuple[int, str, int, dict | None]:
    """Write the export atomically; return (rows written, xxh3-128 hex digest, bytes, the shard manifest
    with its ``path``, or None for a single file).

    The parallel workers' part files are removed only once the export is committed."""
    recipe = ctx.recipe
    if recipe.export_layout == "partition_shards":  # one shard per partition, committed as a set
        from airflow_provider_dj.engine.job.export_shards import write_partition_shards

        result = write_partition_shards(job_dir, ctx, tables, markers, part_source, ledger)
        _remove_parts(job_dir, part_source)
        return result
    if recipe.export_shard_size > 0:  # Data-Juicer's shard files, committed as a set
        from airflow_provider_dj.engine.job.export_shards import write_shards

        result = write_shards(
            job_dir,
            ctx,
            tables,
            markers,
            lambda out: _write_jsonl_export(job_dir, ctx, tables, markers, part_source, ledger, out),
        )
        _remove_parts(job_dir, part_source)
        return result
    rows = 0
    with storage.AtomicFileWriter(recipe.export_path, tmp_tag=ctx.job_id, what="the export") as raw:
        out = HashingWriter(raw)
        if recipe.export_path.endswith(".parquet"):
            loaded = [t for t in tables.tables()]
            table = pa.concat_tables(loaded, promote_options="permissive") if loaded else pa.table({})
            pq.write_table(table, out, compression="snappy")
            rows = table.num_rows
        else:
            rows = _write_jsonl_export(job_dir, ctx, tables, markers, part_source, ledger, out)
    _remove_parts(job_dir, part_source)
    from airflow_provider_dj.engine.output.shards import retire_shard_set

    retire_shard_set(recipe.export_path)  # an earlier night's shard set must not look current beside it
    return rows, out.h.hexdigest(), out.n, None


def _remove_parts(job_dir: str, part_source: Callable[[], Iterator[dict]] | None) -> None:
    """Remove the parallel workers' part files, once the export is committed."""
    if part_source is not None:
        from airflow_provider_dj.engine.output.parts import remove_parts

        remove_parts(job_dir)


def _write_jsonl_export(
    job_dir: str,
    ctx: JobContext,
    tables: _FinalTables,
    markers: dict[int, dict],
    part_source: Callable[[], Iterator[dict]] | None,
    ledger: _PartLedger,
    out: HashingWriter,
) -> int:
    """Write the JSONL export's parts in partition order into ``out``; return the rows written.

    The parts come from the parallel workers, through one buffer each for nightly reuse, or straight
    from this process's serialization.  The ``export_mid`` fault point fires after the first part."""
    recipe = ctx.recipe
    from airflow_provider_dj.engine.execution import reuse

    # Nightly reuse: each partition's bytes go through one buffer, so their range in the export is known
    # (published for the next night) and a reused final checkpoint's bytes can come from the last export.
    # A sharded export publishes no byte ranges: they would lie across shard files (engine/output/shards.py).
    ranges = reuse.reuse_enabled(recipe) and recipe.export_shard_size <= 0
    by_part = ranges and part_source is None and not recipe.export_path.endswith(".parquet")
    rows = 0
    fault_spec = load_faults(job_dir)
    if part_source:
        chunks = _jsonl_parts(part_source, out, ledger.copied_ranges if ranges else None)
    elif by_part:
        chunks = _reusing_parts(ctx, tables, markers, ledger, out)
    else:
        chunks = (_write_table(t, out) for t in tables.tables())
    for n, nrows in enumerate(chunks):
        rows += nrows
        if n == 0:
            out.flush()
            maybe_fail(job_dir, fault_spec, None, None, point="export_mid")
    return rows


def _reusing_parts(
    ctx: JobContext, tables: _FinalTables, markers: dict[int, dict], ledger: _PartLedger, out: HashingWriter
) -> Iterator[int]:
    """Write each partition's bytes whole, from the last export when its final checkpoint is reused,
    else serialized here; record each part's range in ``ledger``; yield each part's row count."""
    from airflow_provider_dj.engine.execution import reuse

    for p in tables.parts:
        pid = p["partition_id"]
        data = reuse.reused_export_part(ctx, pid, markers[pid])
        if data is None:
            buf = io.BytesIO()
            rows_p = _write_table(tables.table_of(p), buf)
            data = buf.getvalue()
        else:
            rows_p = int(markers[pid]["num_rows"])
            ledger.parts_copied += 1
            ledger.bytes_copied += len(data)
        ledger.written.append(
            {
                "source": reuse.checkpoint_source(ctx.job_id, pid, markers[pid]),
                "offset": out.n,
                "length": len(data),
                "xxh3": xxhash.xxh3_128_hexdigest(data),
                "rows": rows_p,
            }
        )
        out.write(data)
        yield rows_p


def _commit_dedup_history(job_dir: str, ctx: JobContext, tables: _FinalTables) -> dict | None:
    """Once the export is committed, its rows become the dedup history (engine/history/); return the
    commit, or None when the recipe keeps no history."""
    if ctx.recipe.dedup_history is None:
        return None
    from airflow_provider_dj.engine.history.commit import commit_history

    for p in tables.parts:  # partitions serialized by parallel workers or copied from a reused export
        if p["partition_id"] not in tables.exported_rows:
            tables.final_table(p)
    fault_spec = load_faults(job_dir)
    return commit_history(
        ctx,
        tables.exported_rows,
        before_current_moves=lambda: maybe_fail(job_dir, fault_spec, None, None, point="history_commit"),
    )


def _completed_summary(
    ctx: JobContext,
    markers: dict[int, dict],
    per_op: list[dict],
    history: dict | None,
    *,
    export: dict,
    started_at: float | None,
) -> dict:
    """The completed job's summary as the export leaves it: input, export (``export`` holds its rows,
    bytes and checksum), per-op and per-partition accounting, and how to resume."""
    recipe, plan, parts = ctx.recipe, ctx.plan, ctx.partitioning_info["partitions"]
    return {
        "job_id": ctx.job_id,
        "status": "completed",
        "project_name": recipe.project_name,
        "start_time": started_at,
        "end_time": time.time(),
        "duration_s": (time.time() - started_at) if started_at else None,
        "input": {
            "dataset_path": recipe.dataset_path,
            "total_rows": ctx.partitioning_info["total_rows"],
            "partitions": len(parts),
            "hash_algorithm": ctx.partitioning_info["algorithm"],
        },
        "export": {
            "path": export["manifest"]["path"] if export["manifest"] else recipe.export_path,
            "rows": export["rows"],
            "bytes": export["bytes"],
            "checksum_xxh3_128": export["checksum"],
            "keep_stats_in_res_ds": recipe.keep_stats_in_res_ds,
            "keep_hashes_in_res_ds": recipe.keep_hashes_in_res_ds,
            **(_shard_summary(export["manifest"]) if export["manifest"] else {}),
        },
        "ops": per_op,
        **({"dedup_history": _history_summary(ctx.job_dir, plan, history, per_op)} if history is not None else {}),
        "partitions": [
            {
                "partition_id": pid,
                "input_rows": parts[pid]["num_rows"],
                "output_rows": markers[pid]["num_rows"],
                "accounting": markers[pid]["accounting"],
            }
            for pid in sorted(markers)
        ],
        "failed_samples": sum(o["failed"] for o in per_op),
        "checkpoint_strategy": plan.strategy,
        "checkpoint_points": plan.checkpoint_points,
        "effective_config": ctx.effective_config,
        "resume_command": resume_command(recipe.source_file, ctx.job_id),
    }


def _shard_summary(manifest: dict) -> dict:
    """A sharded export in the summary: ``path`` is then its manifest, and these keys name the set."""
    return {
        "manifest": manifest["path"],
        "export_shard_size": manifest["export_shard_size"],
        **({"export_layout": manifest["layout"]} if manifest.get("layout") else {}),
        "shards": manifest["shards"],
    }


def _finish_summary(ctx: JobContext, summary: dict, markers: dict[int, dict], ledger: _PartLedger) -> dict:
    """Add traces, the enrichments, retention and what later jobs may reuse to the summary; return it.

    Retention runs after the enrichments (they count the checkpoints it removes) and before
    publishing (only what is kept is published)."""
    job_dir, recipe = ctx.job_dir, ctx.recipe
    from airflow_provider_dj.engine.execution import reuse

    if recipe.tracer.open_tracer:  # merge per-partition trace candidates into trace/*.jsonl (engine.observe.tracer)
        from airflow_provider_dj.engine.observe.tracer import merge_traces

        summary["trace"] = merge_traces(job_dir)
    from airflow_provider_dj.engine.job.summary import enrich_completed_summary

    summary = enrich_completed_summary(job_dir, summary)  # before retention removes the checkpoints it counts
    summary["retention"] = apply_retention(ctx, markers)
    from airflow_provider_dj.engine.execution.reuse import publish_job

    if summary.get("reuse") is not None:  # what later jobs may reuse of this one (after retention: only what is kept)
        summary["reuse"]["published_entries"] = publish_job(ctx)
        summary["reuse"]["export_parts_reused"] = ledger.parts_copied
        summary["reuse"]["export_bytes_reused"] = ledger.bytes_copied
        if recipe.export_layout == "partition_shards":
            summary["reuse"]["export_shards_linked"] = ledger.parts_linked
        ledger.written += [
            {
                "source": reuse.checkpoint_source(ctx.job_id, pid, markers[pid]),
                "offset": o,
                "length": n,
                "xxh3": h,
                "rows": r,
            }
            for pid, o, n, h, r in ledger.copied_ranges
        ]
        summary["reuse"]["published_entries"] += reuse.publish_export_parts(ctx, recipe.export_path, ledger.written)
    return summary


def _history_summary(job_dir: str, plan, commit: dict, per_op: list[dict]) -> dict:
    """The summary's ``dedup_history``: per history op, duplicates split into in-night and history, and the
    commit (version pinned, version written)."""
    from airflow_provider_dj.engine.history.lookup import read_history_duplicates

    dup_counts = {o["op_index"]: int(o["duplicates"]) for o in per_op}
    ops = []
    for op in plan.ops:
        dups = read_history_duplicates(job_dir, op.index, op.name) if op.is_global else None
        if dups is None:
            continue
        total = dup_counts.get(op.index, 0)
        ops.append(
            {
                "op_index": op.index,
                "op_name": op.name,
                "duplicates": total,
                "history_duplicates": dups.num_rows,
                "in_night_duplicates": total - dups.num_rows,
            }
        )
    return {"ops": ops, "commit": commit}
