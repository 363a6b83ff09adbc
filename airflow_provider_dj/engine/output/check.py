"""Check an export file against what its producer announced (rows and xxh3-128 of its bytes).

Why: a consumer started by an asset event (or by anything else that was told
"job X exported N rows with hash H") should not trust a path alone.  The
file may have been rewritten by a later run, truncated by a full disk, or
copied incompletely.  Reading it once, streaming, costs about as much as
copying it and proves it is the export that was announced.
"""

from __future__ import annotations

import xxhash

from airflow_provider_dj.core import fs as storage
from airflow_provider_dj.engine.output.errors import ExportMismatchError


def check_export_file(path: str, *, rows: int, checksum: str) -> int:
    """Return the row count of ``path`` after checking its hash and rows; raise ExportMismatchError.

    Rows are JSON lines for ``.jsonl``/``.json`` exports and the footer's row
    count for ``.parquet``.
    """
    if not storage.exists(path):
        raise ExportMismatchError(f"export {path} does not exist; it was announced with {rows} rows, xxh3 {checksum}")
    h = xxhash.xxh3_128()
    lines = 0
    with storage.open_read(path) as fh:
        for chunk in storage.iter_chunks(fh):
            h.update(chunk)
            lines += chunk.count(b"\n")
    got = h.hexdigest()
    if got != checksum:
        raise ExportMismatchError(
            f"export {path} has xxh3 {got}, but {checksum} was announced: the file changed "
            f"after its job exported it (a later run, a copy, a full disk); do not use it"
        )
    if path.endswith(".parquet"):
        import pyarrow.parquet as pq

        with storage.open_read(path) as fh:
            counted = pq.ParquetFile(fh).metadata.num_rows
    else:
        counted = lines
    if counted != rows:
        raise ExportMismatchError(f"export {path} has {counted} rows, but {rows} were announced")
    return counted
