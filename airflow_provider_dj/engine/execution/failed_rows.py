"""The ``failed/`` file of one op on one partition: the rows it could not process, with the reasons.

Written by the segment runner after a per-row op and by the segment that applies a global op's mask
(rows its key phase could not key, ``key_rows.py``); both then commit the file's seal with the op's
accounting.
"""

from __future__ import annotations

import io
from typing import Any

import pyarrow as pa

from airflow_provider_dj.core import fs as storage
from airflow_provider_dj.engine.jobdir.integrity import file_seal
from airflow_provider_dj.engine.jobdir.layout import failed_file
from airflow_provider_dj.engine.storage.context import JobContext
from airflow_provider_dj.ops.columns import (
    FAILED_ERROR_COLUMN,
    FAILED_ERROR_TYPE_COLUMN,
    FAILED_OP_COLUMN,
    FAILED_OP_INDEX_COLUMN,
    FAILED_PARTITION_COLUMN,
)


def write_failed(
    ctx: JobContext, op_index: int, op_name: str, pid: int, rows: pa.Table, reasons: list[str]
) -> dict[str, Any]:
    """failed/op_<i>_<op>/partition_<p>.jsonl: the sample, its input row, the op and the error.

    Returns the file's seal (relative path, size, xxh3) for the op's accounting entry, which the next
    checkpoint's marker commits, so a changed or torn failed file is caught on load (engine/jobdir/integrity.py)."""
    from airflow_provider_dj.engine.storage.jsonl_writer import write_jsonl

    n = rows.num_rows
    rows = rows.append_column(
        FAILED_ERROR_TYPE_COLUMN, pa.array([r.split(":", 1)[0] for r in reasons], type=pa.string())
    )
    rows = rows.append_column(FAILED_ERROR_COLUMN, pa.array(reasons, type=pa.string()))
    rows = rows.append_column(FAILED_OP_COLUMN, pa.array([op_name] * n, type=pa.string()))
    rows = rows.append_column(FAILED_OP_INDEX_COLUMN, pa.array([op_index] * n, type=pa.int64()))
    rows = rows.append_column(FAILED_PARTITION_COLUMN, pa.array([pid] * n, type=pa.int64()))
    buf = io.BytesIO()
    write_jsonl(rows, buf)
    rel = failed_file(op_index, op_name, pid)
    data = buf.getvalue()
    storage.atomic_write_bytes(
        storage.join(ctx.job_dir, *rel.split("/")),
        data,
        what=f"the failed samples of op {op_index} ({op_name}) partition {pid}",
    )
    return {"path": rel, **file_seal(data)}
