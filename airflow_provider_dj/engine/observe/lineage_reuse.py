"""Lineage of a partition reused from an earlier job: the source's chunks, copied into this job.

Why: with ``intermediate_storage.reuse_across_jobs`` a partition's state after op k can come from an
earlier job (``engine/execution/reuse.py``); its rows went through ops 0..k there, not here, so without
this the reused ops' steps would say "not recorded" and its kept rows would have no export row.

What is copied: the source partition's chunk chain that ends at k (``lineage/partition_<p>/op_<i>``),
rewritten under this job's partition id.  Copied, not referenced: the chunks are a few hundred bytes,
and a copy in this job's directory is as safe from ``dj-airflow gc`` as the job itself (the source is
pinned before anything of it is read anyway).  It is written *before* the reuse marker commits, so a
crash in between leaves no reused checkpoint without its lineage; a chain that is incomplete in the
source (an older job, ``DJ_LINEAGE=0``) is not copied at all, and the steps then say "not recorded".

What is rewritten: row numbers need none -- the reuse index key holds the partition's first row and
row count (``reuse_index.entry_key``), so both jobs number these rows alike (checked: every entry must
lie inside this partition).  A duplicate's match (``dup_of_row``, the band, a history row) is replaced
by *this* job's, from this job's mask table of that global op: the masks are equal bit for bit (the
reuse condition), but the row a duplicate was kept against, or the history it matched, may differ.
"""

from __future__ import annotations

import logging

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from airflow_provider_dj.engine.observe.lineage import (
    DUPLICATE,
    FAILED,
    FILTERED,
    MATCH_FIELDS,
    full_schema,
    lineage_enabled,
    match_values,
    write_chunk,
)
from airflow_provider_dj.engine.observe.lineage_query import read_chunk
from airflow_provider_dj.engine.storage.global_op_state import MASK_COLUMN, mask_store

log = logging.getLogger(__name__)

_REMOVED = pa.array([FILTERED, DUPLICATE, FAILED], pa.uint8())


def source_chain(source_dir: str, source_pid: int, upto: int, plan) -> list[tuple[int, pa.Table]] | None:
    """The source partition's chunks from op ``upto`` down to its input, or None when incomplete."""
    chain, k = [], upto
    while k >= 0:
        chunk = read_chunk(source_dir, source_pid, k, plan)
        if chunk is None:
            return None
        chain.append((k, chunk))
        k = int(chunk.schema.metadata[b"start_op"])
    return chain


def copy_reused_lineage(sc, upto: int, source_dir: str, source_pid: int) -> int:
    """Copy the lineage of the reused state after op ``upto`` into this job; returns the chunks written."""
    if not lineage_enabled():
        return 0
    chain = source_chain(source_dir, source_pid, upto, sc.plan)
    if chain is None:
        log.info("%s: the reused job %s has no lineage up to op %d: not copied", sc.label, source_dir, upto)
        return 0
    start, end = int(sc.part["start_row"]), int(sc.part["end_row"])
    entries = pa.concat_tables([full_schema(t.replace_schema_metadata(None)) for _, t in chain])
    rows = entries.column("input_row").to_numpy()
    if rows.size and (rows.min() < start or rows.max() >= end):
        log.info("%s: the reused lineage names rows outside rows %d-%d: not copied", sc.label, start, end - 1)
        return 0
    for k, chunk in chain:
        table = _with_this_jobs_matches(sc, full_schema(chunk.replace_schema_metadata(None)), entries, start, end)
        meta = {key: v for key, v in chunk.schema.metadata.items() if not key.startswith(b"ARROW:")}
        write_chunk(sc.job_dir, sc.partition_id, k, table, meta)
    return len(chain)


def _with_this_jobs_matches(sc, table: pa.Table, entries: pa.Table, start: int, end: int) -> pa.Table:
    """``table`` with its duplicates' match columns taken from this job's mask tables."""
    fate, ops = table.column("fate").to_numpy(), table.column("op_index").to_numpy()
    columns = {name: table.column(name).combine_chunks() for name, _ in MATCH_FIELDS}
    for g in sorted({int(o) for o in ops[fate == DUPLICATE]}):
        op = sc.plan.ops[g]
        if not op.is_global:
            continue
        at = np.flatnonzero((fate == DUPLICATE) & (ops == g))
        mask_cp = mask_store(sc.job_dir).load_valid(g, op.name, sc.partition_id, sc.phash, op.fingerprint)
        new = None
        if mask_cp is not None:
            keep = mask_cp.table.column(MASK_COLUMN).to_numpy(zero_copy_only=False)
            before = entries.filter(
                pc.and_(pc.less(entries.column("op_index"), g), pc.is_in(entries.column("fate"), _REMOVED))
            )
            # the rows of this partition no op before g removed (arange is sorted and unique, so is the result)
            reached = np.setdiff1d(np.arange(start, end), before.column("input_row").to_numpy(), assume_unique=True)
            dropped = reached[~keep] if len(reached) == len(keep) else None
            if dropped is not None and np.array_equal(dropped, table.column("input_row").to_numpy()[at]):
                new = match_values(mask_cp.table, keep, len(at)) or {}
        at_mask = np.zeros(table.num_rows, dtype=bool)
        at_mask[at] = True
        for name, typ in MATCH_FIELDS:  # this job's match, or none (never the source's)
            values = new.get(name) if new is not None else None
            fill = pa.array(values.to_pylist(), typ) if values is not None else pa.nulls(len(at), typ)
            columns[name] = pc.replace_with_mask(columns[name], pa.array(at_mask), fill)
    for name, typ in MATCH_FIELDS:
        table = table.set_column(table.schema.get_field_index(name), pa.field(name, typ), columns[name])
    return table
