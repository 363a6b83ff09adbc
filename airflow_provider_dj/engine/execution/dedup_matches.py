"""What each removed duplicate matched, decided once in the global step and committed beside its keep mask.

Why here: only the global step sees every partition's keys, so only it can name, for a row removed as
a duplicate, the row it was kept against -- the first occurrence of its key (exact dedup), or its
cluster's representative, the lowest row of its union-find cluster that survives (MinHash, SimHash, the
Data-Juicer adapter's deduplicators) -- and, for a history duplicate, the earlier job and export row.
The segment that applies the mask hands these columns to the lineage recorder
(``observe/lineage.py``), which writes them for the removed rows only.

The columns ride in the partition's keep-mask table (``global_op_state.mask_store``), so they commit
atomically with the mask and follow its retries exactly; ``keep`` is unchanged, so the reuse check
(``reuse._same_masks``) still compares the decision only:

* ``dup_of``: the input row (global, 0-based) it duplicates; -1 for a kept row, a history duplicate, or
  an op that cannot name one;
* ``dup_band``: MinHash only, the LSH band through which it matched (-1: it shares no band with its
  representative, it reached the cluster through other rows);
* ``history_job`` / ``history_row``: with ``dedup_history`` only, the earlier job and its export row.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from airflow_provider_dj.engine.storage.global_op_state import KEYS_COLUMN
from airflow_provider_dj.ops.base import SignatureDeduplicator
from airflow_provider_dj.ops.columns import INPUT_ROW_COLUMN
from airflow_provider_dj.ops.kernels.keys import first_occurrence_index

if TYPE_CHECKING:
    from airflow_provider_dj.ops.base import Op

DUP_OF_COLUMN = "dup_of"
DUP_BAND_COLUMN = "dup_band"
HISTORY_JOB_COLUMN = "history_job"
HISTORY_ROW_COLUMN = "history_row"


def keep_and_representatives(op_impl: Op, keys: list[pa.Table]) -> tuple[np.ndarray, np.ndarray | None]:
    """The op's keep flags over all global positions and, per position, the position of the row it is
    kept against (itself when kept; None when the op cannot tell), computed together where the op can."""
    if isinstance(op_impl, SignatureDeduplicator):
        mask, rep = op_impl.keep_and_representatives(keys)
        return np.asarray(mask, dtype=bool), None if rep is None else np.asarray(rep, dtype=np.int64)
    rep = first_occurrence_index([k.column(KEYS_COLUMN) for k in keys])
    return rep == np.arange(len(rep)), rep


def _input_rows(keys: list[pa.Table]) -> np.ndarray | None:
    """The input row of every global position (the key phase carries them when lineage is on)."""
    if any(INPUT_ROW_COLUMN not in k.column_names for k in keys if k.num_rows):
        return None  # keys of an older job (reused): the rows are not named
    parts = [k.column(INPUT_ROW_COLUMN).to_numpy() for k in keys if k.num_rows]
    return np.concatenate(parts).astype(np.int64) if parts else np.zeros(0, np.int64)


def match_columns(
    op_impl: Op, keys: list[pa.Table], rep: np.ndarray | None, in_night: np.ndarray, history: Any
) -> dict[str, Any]:
    """The match columns over all global positions (see the module docstring), as numpy/list columns."""
    n = len(in_night)
    dup_of = np.full(n, -1, dtype=np.int64)
    rows = _input_rows(keys)
    removed = np.flatnonzero(~in_night)
    if rep is not None:
        removed = removed[rep[removed] != removed]  # a removed row must name another row (else: not named)
    if rep is not None and rows is not None and len(removed):
        dup_of[removed] = rows[rep[removed]]
    cols: dict[str, Any] = {DUP_OF_COLUMN: dup_of}
    band = None
    if rep is not None and len(removed):
        band_of = (
            op_impl.matching_band(keys, removed, rep[removed]) if isinstance(op_impl, SignatureDeduplicator) else None
        )
        if band_of is not None:
            band = np.full(n, -1, dtype=np.int16)
            band[removed] = band_of
    if history is not None:
        job = np.full(n, None, dtype=object)
        hrow = np.full(n, -1, dtype=np.int64)
        if len(history):
            job[history.positions] = history.job_ids
            hrow[history.positions] = history.export_rows
            if np.any(history.bands >= 0):
                band = np.full(n, -1, dtype=np.int16) if band is None else band
                band[history.positions] = history.bands
        cols[HISTORY_JOB_COLUMN], cols[HISTORY_ROW_COLUMN] = job, hrow
    if band is not None:
        cols[DUP_BAND_COLUMN] = band
    return cols


def partition_columns(cols: dict[str, Any], start: int, stop: int) -> dict[str, pa.Array]:
    """One partition's slice of ``match_columns``, as Arrow arrays for its mask table."""
    types = {
        DUP_OF_COLUMN: pa.int64(),
        DUP_BAND_COLUMN: pa.int16(),
        HISTORY_JOB_COLUMN: pa.string(),
        HISTORY_ROW_COLUMN: pa.int64(),
    }
    return {
        name: pa.array(v[start:stop].tolist() if v.dtype == object else v[start:stop], types[name])
        for name, v in cols.items()
    }
