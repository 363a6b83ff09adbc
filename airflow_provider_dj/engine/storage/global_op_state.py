"""Where a global op's per-partition state lives: its dedup keys and its keep masks.

Written by the key phase of a segment (``segment_runner``) and by the global phase
(``global_ops``), read by the next segment, the tracer and the sensors.  It sits in the storage
layer, below every one of them, so each can import it without importing the segment runner.
The prefixes are part of the job-directory format: an old job directory still resumes.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from airflow_provider_dj.core.errors import DJError
from airflow_provider_dj.engine.jobdir.layout import DEDUP_KEYS_STORE, DEDUP_MASK_STORE
from airflow_provider_dj.engine.storage.checkpoints import CheckpointStore, StorageFormat

KEYS_COLUMN = "key"
MASK_COLUMN = "keep"
#: In a keys table and, copied, in the mask table: why the key phase could not key a row (null: it
#: could); such a row is kept by the global step and set aside in ``failed/`` (execution/key_rows.py).
KEY_ERROR_COLUMN = "error"
KEYS_FORMAT = StorageFormat("arrow", "none")


def keys_store(job_dir: str) -> CheckpointStore:
    return CheckpointStore(job_dir, KEYS_FORMAT, prefix=DEDUP_KEYS_STORE)


def mask_store(job_dir: str) -> CheckpointStore:
    return CheckpointStore(job_dir, KEYS_FORMAT, prefix=DEDUP_MASK_STORE)


class MissingKeysError(DJError, RuntimeError):
    """A partition's committed keys are missing or torn when a global step reads them; the message names
    the partition and says to clear its segment task."""


def unkeyed_rows(keys: pa.Table) -> np.ndarray | None:
    """Per row of a keys table, whether its key phase could not key it (None: every row was keyed).
    Such a row is never a duplicate, so it is never looked up in history either."""
    if KEY_ERROR_COLUMN not in keys.column_names:
        return None
    return keys.column(KEY_ERROR_COLUMN).is_valid().to_numpy(zero_copy_only=False)


def key_errors(keys: pa.Table) -> dict:
    """One partition's key-phase failure reasons, as a column for its mask table ({} without any)."""
    return {KEY_ERROR_COLUMN: keys.column(KEY_ERROR_COLUMN)} if KEY_ERROR_COLUMN in keys.column_names else {}


def save_keep_mask(job_dir: str, op, op_index: int, part: dict, keep, columns: dict) -> None:
    """Commit partition ``part``'s keep mask for global op ``op_index`` (``keep``: one flag per row) with its
    lineage match ``columns`` (engine/execution/dedup_matches.py), as the one-process and the sharded steps
    both commit it."""
    mask_store(job_dir).save(
        op_index=op_index,
        op_name=op.name,
        partition_id=part["partition_id"],
        table=pa.table({MASK_COLUMN: pa.array(keep, type=pa.bool_()), **columns}),
        partition_hash=part["content_hash"],
        fingerprint=op.fingerprint,
        accounting=[],
    )
