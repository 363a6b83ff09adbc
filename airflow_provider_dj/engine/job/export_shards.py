"""The export step for a set of shard files, committed as a set: Data-Juicer's (``export_shard_size``
> 0) or one shard per partition (``export_layout: partition_shards``).

``engine/output/shards.py`` holds the rules (count, split points, names) and the writer that stages
the shards and commits them with a manifest written last; this module feeds it the export's rows
and fires the fault points, for ``engine/job/export.py``.

**One shard per partition.**  Data-Juicer's split points move when a night adds rows, so none of its
shards could be kept from one night to the next.  A partition's rows (with ``partition.align: file``
and nightly reuse) are the same night after night, so with one shard per partition a night writes
only the shards of the partitions it computed: the shard of a partition whose final checkpoint was
reused, and whose bytes the last export holds in a shard of their own, is hard-linked from that shard
after its length and xxh3 are checked (``ShardSetWriter.link_next``).  The shards concatenated are
the single-file export byte for byte, as for Data-Juicer's split points.

**Parallel parts are the shards.**  When Ray workers serialize the partitions (engine/output/parts.py),
each part file holds exactly one shard's bytes, so on a local export the part is hard-linked into the
set under its staged name instead of copied: the bytes are written once, by the worker, and the export
process only reads them once for the set's checksum (xxh3-128 of the shards concatenated, which no
per-part digest can give) and commits.  Each shard's size and xxh3 come from the worker, hashed as it
wrote.  The link is made where a copy would have been written, so the fault points and the commit keep
their meaning: a crash before the commit leaves staged names (removed by the next attempt, whose workers
write new part files) and the previous set; the parts are removed only after the commit, and from then
on the shard's name holds the file alone.  Where no link can be made (another file system, a link
refused) ``link_next`` copies in the kernel; to or from an object store the part is copied through this
process as before.
"""

from __future__ import annotations

from typing import Callable, Iterator

import pyarrow as pa
import pyarrow.parquet as pq

from airflow_provider_dj.core import fs as storage
from airflow_provider_dj.engine.jobdir.faults import load_faults, maybe_fail
from airflow_provider_dj.engine.output import shards
from airflow_provider_dj.engine.output.arrow_size import table_nbytes
from airflow_provider_dj.engine.output.hashing import HashingWriter
from airflow_provider_dj.engine.storage.context import JobContext


def write_shards(
    job_dir: str, ctx: JobContext, tables, markers: dict[int, dict], write_jsonl: Callable[[HashingWriter], int]
) -> tuple[int, str, int, dict]:
    """Write and commit the shard set; return (rows, xxh3-128 of the shards concatenated, their bytes,
    the manifest with its ``path``).

    ``tables``: the export's ``_FinalTables`` (each partition's export table, in order);
    ``write_jsonl(out)`` writes the JSONL export's bytes into ``out`` and returns the rows.  The
    JSONL shards are those bytes cut at row boundaries, so every way of making them (parallel parts,
    this process) gives the same shards, and their concatenation is the single-file export.  Any
    failure before the commit removes the staged shards and leaves the previous set and its manifest
    as they were; a disk-full error names the shard.  The ``export_commit`` fault point fires once
    the shards are in place, before the manifest is written."""
    recipe = ctx.recipe
    total = sum(int(markers[p["partition_id"]]["num_rows"]) for p in tables.parts)
    count = shards.shard_count(table_nbytes(tables.tables()), total, recipe.export_shard_size)
    bounds = shards.shard_bounds(total, count)
    writer = shards.ShardSetWriter(recipe.export_path, bounds, job_id=ctx.job_id, shard_size=recipe.export_shard_size)
    out = HashingWriter(writer)
    try:
        if recipe.export_path.endswith(".parquet"):
            loaded = list(tables.tables())
            table = pa.concat_tables(loaded, promote_options="permissive") if loaded else pa.table({})
            for start, end in bounds:
                writer.write_table(table.slice(start, end - start), out.h, _write_parquet)
            rows = table.num_rows
        else:
            rows = write_jsonl(out)
        manifest = _commit(writer, out, job_dir, load_faults(job_dir), rows)
    except BaseException as exc:
        _abort(writer, exc)
        raise
    return rows, manifest["checksum_xxh3_128"], manifest["total_bytes"], {**manifest, "path": writer.manifest}


def _commit(writer, out: HashingWriter, job_dir: str, fault_spec: list[dict], rows: int) -> dict:
    """Commit the staged set: the ``export_commit`` fault point fires once the shards are in place,
    then the manifest is written; returns the manifest."""
    return writer.commit(
        total_rows=rows,
        checksum=out.h.hexdigest(),
        before_manifest=lambda: maybe_fail(job_dir, fault_spec, None, None, point="export_commit"),
    )


def _abort(writer, exc: BaseException) -> None:
    """Take the staged shards down after ``exc``; raise the disk-full error naming the shard when the
    writer made one (the caller re-raises ``exc`` otherwise)."""
    full = writer.abort(exc)
    if full is not None:
        raise full from exc


def write_partition_shards(
    job_dir: str,
    ctx: JobContext,
    tables,
    markers: dict[int, dict],
    part_source: Callable[[], Iterator[dict]] | None,
    ledger,
) -> tuple[int, str, int, dict]:
    """``export_layout: partition_shards``: write and commit one JSONL shard per non-empty partition, in
    partition order; return what ``write_shards`` returns.

    Without ``part_source`` a partition's shard is linked from the last export's shard when its final
    checkpoint was reused and that shard is intact, copied when the last export holds its bytes inside
    a larger file, else serialized here.  With ``part_source`` (the parallel workers' part files) every
    part becomes its shard: hard-linked on a local export, copied otherwise (``_worker_parts``).
    ``ledger`` (export.py's ``_PartLedger``) gets the parts reused or linked and, once committed, each
    shard as an entry to publish for the next night.  Fault points: ``export_mid`` after the first
    partition, ``export_commit`` before the manifest."""
    from airflow_provider_dj.engine.execution import reuse

    recipe = ctx.recipe
    live = [p for p in tables.parts if int(markers[p["partition_id"]]["num_rows"]) > 0]
    bounds, start = [], 0
    for p in live:
        bounds.append((start, start + int(markers[p["partition_id"]]["num_rows"])))
        start = bounds[-1][1]
    pids = [p["partition_id"] for p in live]
    writer = shards.ShardSetWriter(recipe.export_path, bounds, job_id=ctx.job_id, shard_size=0, partition_ids=pids)
    out = HashingWriter(writer)
    fault_spec = load_faults(job_dir)
    local = not storage.is_url(recipe.export_path)
    try:
        rows = 0
        if part_source is None:
            placed = (
                _partition_shard(ctx, tables, p, markers[p["partition_id"]], writer, out, ledger, local, reuse)
                for p in tables.parts
            )
        else:
            placed = _worker_parts(part_source, writer, out, ledger, local)
        for n, nrows in enumerate(placed):
            rows += nrows
            if n == 0:
                maybe_fail(job_dir, fault_spec, None, None, point="export_mid")
        manifest = _commit(writer, out, job_dir, fault_spec, rows)
    except BaseException as exc:
        _abort(writer, exc)
        raise
    ledger.written = [
        {
            "source": reuse.checkpoint_source(ctx.job_id, s["partition_id"], markers[s["partition_id"]]),
            "path": storage.join(writer.directory, s["file"]),
            "whole_file": True,
            "offset": 0,
            "length": s["bytes"],
            "xxh3": s["xxh3_128"],
            "rows": s["rows"],
        }
        for s in manifest["shards"]
    ]
    return rows, manifest["checksum_xxh3_128"], manifest["total_bytes"], {**manifest, "path": writer.manifest}


def _partition_shard(ctx, tables, p: dict, marker: dict, writer, out: HashingWriter, ledger, local: bool, reuse) -> int:
    """Put one partition's shard in ``writer``: linked, copied or serialized; return its rows."""
    from airflow_provider_dj.engine.storage.jsonl_writer import write_jsonl

    rows = int(marker["num_rows"])
    found = reuse.reused_export_file(ctx, p["partition_id"], marker) if rows else None
    if found is None:
        table = tables.table_of(p)
        write_jsonl(table, out)
        return table.num_rows
    data, path, digest = found
    if path is not None and local:
        writer.link_next(path, rows=rows, nbytes=len(data), digest=digest)
        out.count(data)
        ledger.parts_linked += 1
    else:
        out.write(data)
    ledger.parts_copied += 1
    ledger.bytes_copied += len(data)
    return rows


def _worker_parts(
    part_source: Callable[[], Iterator[dict]], writer, out: HashingWriter, ledger, local: bool
) -> Iterator[int]:
    """Make the parallel workers' part files the shards, in order; yield each part's rows.

    A non-empty part on a local export, with the size and xxh3 its worker recorded, is linked into
    ``writer`` (copied in the kernel where the file system refuses a link) and only read here, for
    the set's checksum; any other part (an object store, an empty partition: no shard) is copied
    through ``out``, where the writer cuts and hashes it."""
    ledger.worker_parts_linked = 0
    for part in part_source():
        rows = int(part["rows"])
        if rows and local and _linkable(part):
            how = writer.link_next(part["path"], rows=rows, nbytes=int(part["bytes"]), digest=part["xxh3_128"])
            _count_file(writer.staged[len(writer.shards) - 1], out)
            ledger.worker_parts_linked += how == "linked"
        else:
            with storage.open_read(part["path"]) as fh:
                for chunk in storage.iter_chunks(fh):
                    out.write(chunk)
        yield rows


def _linkable(part: dict) -> bool:
    """Whether a worker's part can be linked: a local file whose size and xxh3 the worker recorded."""
    return "bytes" in part and "xxh3_128" in part and not storage.is_url(part["path"])


def _count_file(path: str, out: HashingWriter) -> None:
    """Feed the local file ``path``'s bytes to ``out``'s hash and count, mapped rather than copied."""
    view = storage.map_read(path)
    if view is not None:
        with view:
            out.count(view)


def _write_parquet(table: pa.Table, fh) -> None:
    pq.write_table(table, fh, compression="snappy")


__all__ = ["write_partition_shards", "write_shards"]
