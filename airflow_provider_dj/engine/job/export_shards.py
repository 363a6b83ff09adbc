"""The export step for ``export_shard_size`` > 0: Data-Juicer's shard files, committed as a set.

``engine/output/shards.py`` holds the rules (count, split points, names) and the writer that stages
the shards and commits them with a manifest written last; this module feeds it the export's rows
and fires the fault points, for ``engine/job/export.py``.
"""

from __future__ import annotations

from typing import Callable

import pyarrow as pa
import pyarrow.parquet as pq

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
        fault_spec = load_faults(job_dir)
        manifest = writer.commit(
            total_rows=rows,
            checksum=out.h.hexdigest(),
            before_manifest=lambda: maybe_fail(job_dir, fault_spec, None, None, point="export_commit"),
        )
    except BaseException as exc:
        full = writer.abort(exc)
        if full is not None:
            raise full from exc
        raise
    return rows, manifest["checksum_xxh3_128"], manifest["total_bytes"], {**manifest, "path": writer.manifest}


def _write_parquet(table: pa.Table, fh) -> None:
    pq.write_table(table, fh, compression="snappy")


__all__ = ["write_shards"]
