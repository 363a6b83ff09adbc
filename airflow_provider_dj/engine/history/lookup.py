"""The global step's history check: tonight's kept rows whose key is in the pinned history are removed.

The in-night decision stays the op's own (Data-Juicer's first occurrence, or MinHash's cluster
representative); only the rows it keeps are looked up, so a row removed in-night is never also counted
as a history duplicate, and the duplicates of a history duplicate are removed in-night, as they would
be in one run over both nights.  A history duplicate is removed as a duplicate of that op: the row
accounting (in = out + filtered + duplicates + failed) is unchanged in form.

Every history duplicate is recorded in ``dedup_history/op_<i>_<op>.parquet`` of the job directory with
the earlier job and export row it matched (and, for MinHash, the band), written before the keep masks
commit, so a crash in between recomputes it.
"""

from __future__ import annotations

import io
import logging
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from airflow_provider_dj.core import fs as storage
from airflow_provider_dj.engine.history.index import HistoryIndex
from airflow_provider_dj.engine.history.keys import keys_per_row, row_keys
from airflow_provider_dj.engine.history.pin import read_pin
from airflow_provider_dj.engine.jobdir.layout import DEDUP_HISTORY_DIR, op_dir_name
from airflow_provider_dj.engine.storage.global_op_state import unkeyed_rows
from airflow_provider_dj.ops.columns import INPUT_ROW_COLUMN

log = logging.getLogger(__name__)


@dataclass
class HistoryDuplicates:
    """Rows removed as history duplicates: global positions among the op's input rows, and what they matched."""

    positions: np.ndarray
    input_rows: np.ndarray
    job_ids: list[str]
    export_rows: np.ndarray
    export_paths: list[str]
    bands: np.ndarray  # -1 for exact keys
    version: int

    def __len__(self) -> int:
        return len(self.positions)

    def table(self) -> pa.Table:
        return pa.table(
            {
                INPUT_ROW_COLUMN: pa.array(self.input_rows, pa.int64()),
                "history_job_id": pa.array(self.job_ids, pa.string()),
                "history_export_row": pa.array(self.export_rows, pa.int64()),
                "history_export_path": pa.array(self.export_paths, pa.string()),
                "band": pa.array(self.bands, pa.int64()),
            }
        )


def matches_path(job_dir: str, op_index: int, op_name: str) -> str:
    return storage.join(job_dir, DEDUP_HISTORY_DIR, f"{op_dir_name(op_index, op_name)}.parquet")


def checks_history(recipe, op_name: str) -> bool:
    return recipe.dedup_history is not None and op_name in recipe.dedup_history.ops


def remove_history_duplicates(
    ctx, op_index: int, op_impl, keys: list[pa.Table], mask: np.ndarray
) -> tuple[np.ndarray, HistoryDuplicates | None]:
    """``mask`` (the op's in-night keep flags) with history duplicates cleared, and the duplicates.

    Returns ``(mask, None)`` when the op does not check history."""
    recipe = ctx.recipe
    if not checks_history(recipe, op_impl.name):
        return mask, None
    # A partition with rows its key phase could not key has their reasons in one more column.
    table = pa.concat_tables(keys, promote_options="permissive") if keys else None
    unkeyed = None if table is None else unkeyed_rows(table)
    cand = np.flatnonzero(mask if unkeyed is None else mask & ~unkeyed)  # an unkeyed row is never a duplicate
    if table is None or not len(cand):
        return mask, empty_history_duplicates(ctx.job_dir)
    dups = find_history_duplicates(ctx.job_dir, op_impl, table, cand, memory_bytes=recipe.dedup_history.memory_mb << 20)
    out = mask.copy()
    out[dups.positions] = False
    write_history_duplicates(ctx.job_dir, op_index, op_impl.name, dups, candidates=len(cand))
    return out, dups


def empty_history_duplicates(job_dir: str) -> HistoryDuplicates:
    """No history duplicates, against the job's pinned version."""
    empty = np.zeros(0, np.int64)
    return HistoryDuplicates(empty, empty, [], empty, [], empty, int(read_pin(job_dir)["version"]))


#: Peak bytes per query key of a lookup: the key's words and row (24), its result (16), the prefix
#: sort's keys, order and sorted copies (40), the per-chunk search bounds (16), rounded up.
LOOKUP_BYTES_PER_KEY = 128


def find_history_duplicates(
    job_dir: str, op_impl, keys: pa.Table, rows: np.ndarray, *, memory_bytes: int, query_bytes: int = 0
) -> HistoryDuplicates:
    """Of the rows ``rows`` of ``keys`` (positions in it, ascending), those whose key the job's pinned
    history version holds; ``positions`` are positions in ``keys``.  A row's result depends on its own
    keys only, so the single-process step (all partitions' keys) and a partition's mask task (its
    keys, engine/execution/shard_stages.py) find the same duplicates, in the same order.

    ``memory_bytes`` bounds the history side (``HistoryIndex.lookup``); ``query_bytes`` > 0 also bounds
    the query side: the rows are looked up in batches of at most that many bytes of query keys, each
    batch streaming the history again (a mask task's budget; the single-process step holds every key
    anyway)."""
    rows = np.asarray(rows, dtype=np.int64)
    per_row = keys_per_row(op_impl) * LOOKUP_BYTES_PER_KEY
    batch = max(1, query_bytes // per_row) if query_bytes > 0 else len(rows)
    if len(rows) > batch:
        parts = [_find(job_dir, op_impl, keys, rows[i : i + batch], memory_bytes) for i in range(0, len(rows), batch)]
        return concat_history_duplicates(parts, [0] * len(parts), parts[0].version)
    return _find(job_dir, op_impl, keys, rows, memory_bytes)


def _find(job_dir: str, op_impl, keys: pa.Table, rows: np.ndarray, memory_bytes: int) -> HistoryDuplicates:
    pin = read_pin(job_dir)
    index = HistoryIndex(pin["path"])
    version = int(pin["version"])
    if not len(rows):
        return empty_history_duplicates(job_dir)
    k0, k1, which = row_keys(op_impl, keys, rows)
    job, erow = index.lookup(version, op_impl.name, k0, k1, memory_bytes=memory_bytes)
    found = np.flatnonzero(job >= 0)
    # The first key (lowest band) that matched names each duplicate's history row.
    first = found[np.unique(which[found], return_index=True)[1]] if len(found) else found
    positions = rows[which[first]]
    jobs = index.manifest(version)["jobs"]
    input_rows = keys.column(INPUT_ROW_COLUMN).to_numpy()[positions] if len(positions) else np.zeros(0, np.int64)
    bands = k1[first].astype(np.int64) if op_impl.name != "document_deduplicator" else np.full(len(first), -1)
    return HistoryDuplicates(
        positions=positions,
        input_rows=np.asarray(input_rows, dtype=np.int64),
        job_ids=[jobs[int(j)]["job_id"] for j in job[first]],
        export_rows=erow[first],
        export_paths=[jobs[int(j)]["export_path"] for j in job[first]],
        bands=bands,
        version=version,
    )


def concat_history_duplicates(parts: list[HistoryDuplicates], offsets: list[int], version: int) -> HistoryDuplicates:
    """One partition's duplicates after another (partition order is input order), each partition's
    ``positions`` moved by its ``offsets`` entry: what the single-process step finds over all partitions."""

    def cat(arrays: list[np.ndarray]) -> np.ndarray:
        return np.concatenate(arrays).astype(np.int64, copy=False) if arrays else np.zeros(0, np.int64)

    return HistoryDuplicates(
        positions=cat([d.positions + np.int64(off) for d, off in zip(parts, offsets)]),
        input_rows=cat([d.input_rows for d in parts]),
        job_ids=[j for d in parts for j in d.job_ids],
        export_rows=cat([d.export_rows for d in parts]),
        export_paths=[p for d in parts for p in d.export_paths],
        bands=cat([d.bands for d in parts]),
        version=version,
    )


def write_history_duplicates(
    job_dir: str, op_index: int, op_name: str, dups: HistoryDuplicates, *, candidates: int
) -> None:
    """Write ``dedup_history/op_<i>_<op>.parquet``, before the op's keep masks commit (a crash in between
    re-runs the step, which writes it again)."""
    buf = io.BytesIO()
    pq.write_table(dups.table(), buf)
    storage.atomic_write_bytes(
        matches_path(job_dir, op_index, op_name),
        buf.getvalue(),
        what=f"the history duplicates of op {op_index} ({op_name})",
    )
    log.info(
        "global op %d (%s): %d of %d kept rows duplicate history version %d of %s",
        op_index,
        op_name,
        len(dups),
        candidates,
        dups.version,
        read_pin(job_dir)["path"],
    )


def read_history_duplicates(job_dir: str, op_index: int, op_name: str) -> pa.Table | None:
    """The history duplicates the global step recorded for op ``op_index`` (None: the op checks no history)."""
    path = matches_path(job_dir, op_index, op_name)
    try:
        return pq.read_table(io.BytesIO(storage.read_bytes(path)))
    except FileNotFoundError:
        return None
