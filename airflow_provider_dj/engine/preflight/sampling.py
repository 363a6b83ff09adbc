"""The probe's sample: a few hundred rows, read at a cost proportional to the sample.

Why not reuse the partition reader: planning a job indexes every row of the
input (a full scan), and the preflight runs *before* planning.  A probe of
a terabyte corpus must not read the terabyte, so this module reads only:

* **head** (default): the first rows, streaming line by line (JSONL) or row
  group by row group (Parquet) and stopping as soon as the sample is full;
* **offset** (``gpu_probe_sample_offset``): the same, after skipping that
  many leading rows (JSONL has no row index yet, so the skipped lines are
  streamed past; Parquet skips whole row groups from the footer);
* **shuffle** (``gpu_probe_sample_shuffle``): randomly ordered *blocks*,
  seeded by ``gpu_probe_sample_seed``.  A block is a fixed byte range of a
  plain JSONL file (seek, drop the partial first line, read the lines that
  start inside it), a row group of a Parquet file, or a whole compressed
  JSONL file (gzip/zstd cannot seek; its head is read).  Block indices are
  drawn without building a list of all blocks.  Shuffle and offset are
  exclusive: with shuffle on, an offset is ignored with a warning.

File discovery, ordering and decompression come from ``engine.input.sources``
so the probe sees the rows the job will see.
"""

from __future__ import annotations

import bisect
import io
import math
import random
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.json as pajson
import pyarrow.parquet as pq

from airflow_provider_dj.core import fs as storage
from airflow_provider_dj.engine.input.sources import InputError, InputFile, iter_stream, list_input_files

JSONL_BLOCK_BYTES = 64 << 10
_READ_CHUNK = 64 << 10


class EmptySampleError(InputError):
    """The probe sample has no rows: the GPU preflight cannot measure anything."""


@dataclass
class Sample:
    table: pa.Table
    origin: dict
    warnings: list[str] = field(default_factory=list)


def _parse_lines(lines: list[bytes], where: str) -> pa.Table:
    if not lines:
        return pa.table({})
    data = b"\n".join(lines) + b"\n"
    try:
        return pajson.read_json(
            io.BytesIO(data), read_options=pajson.ReadOptions(block_size=max(1 << 20, len(data) + 1))
        )
    except pa.ArrowInvalid as exc:
        raise InputError(f"{where}: the probe sample is not valid JSON lines: {exc}") from exc


def _iter_lines(f: InputFile, start: int = 0, stats: dict | None = None):
    """Yield (line_start_offset, line_bytes) for lines of a JSONL stream from ``start``, lazily."""
    buf = b""
    buf_start = start
    for block in iter_stream(f, start, None, chunk=_READ_CHUNK):
        if stats is not None:
            stats["bytes_read"] += len(block)
        buf += block
        pos = 0
        while True:
            nl = buf.find(b"\n", pos)
            if nl < 0:
                break
            yield buf_start + pos, buf[pos:nl]
            pos = nl + 1
        buf = buf[pos:]
        buf_start += pos
    if buf:
        yield buf_start, buf


def _jsonl_head(f: InputFile, skip: int, want: int, stats: dict) -> tuple[list[bytes], int]:
    """Up to ``want`` non-blank lines after skipping ``skip`` non-blank lines; returns (lines, skipped)."""
    lines: list[bytes] = []
    skipped = 0
    for _, line in _iter_lines(f, 0, stats):
        if not line.strip():
            continue
        if skipped < skip:
            skipped += 1
            continue
        lines.append(line)
        if len(lines) >= want:
            break
    return lines, skipped


def _parquet_rows(f: InputFile, skip: int, want: int, stats: dict) -> tuple[pa.Table | None, int]:
    with storage.open_read(f.path) as fh:
        pf = pq.ParquetFile(fh)
        meta = pf.metadata
        skipped = 0
        pieces: list[pa.Table] = []
        got = 0
        for g in range(meta.num_row_groups):
            n = meta.row_group(g).num_rows
            if skipped + n <= skip:
                skipped += n
                continue
            local_skip = skip - skipped
            skipped = skip
            stats["row_groups_read"] += 1
            for batch in pf.iter_batches(batch_size=max(1, local_skip + want - got), row_groups=[g]):
                t = pa.Table.from_batches([batch]).slice(local_skip)
                local_skip = max(0, local_skip - batch.num_rows)
                t = t.slice(0, want - got)
                pieces.append(t)
                got += t.num_rows
                if got >= want:
                    break
            if got >= want:
                break
    return (pa.concat_tables(pieces, promote_options="permissive") if pieces else None), skipped


def _head_sample(files: list[InputFile], n: int, offset: int) -> Sample:
    stats = {"bytes_read": 0, "row_groups_read": 0}
    tables: list[pa.Table] = []
    used: list[dict] = []
    remaining_skip, got = offset, 0
    for f in files:
        if got >= n:
            break
        if f.format == "jsonl":
            lines, skipped = _jsonl_head(f, remaining_skip, n - got, stats)
            t = _parse_lines(lines, f.path) if lines else None
        else:
            t, skipped = _parquet_rows(f, remaining_skip, n - got, stats)
        remaining_skip -= skipped
        if t is not None and t.num_rows:
            tables.append(t)
            used.append({"path": f.path, "rows": t.num_rows, "first_row_in_file": skipped})
            got += t.num_rows
    table = pa.concat_tables(tables, promote_options="permissive") if tables else pa.table({})
    origin = {
        "mode": "offset" if offset else "head",
        "offset": offset,
        "rows": table.num_rows,
        "requested_rows": n,
        "files": used,
        **stats,
    }
    return Sample(table, origin)


def _draw_blocks(rng: random.Random, total: int, limit: int):
    """Distinct random block indices in draw order, without materializing ``range(total)``."""
    seen: set[int] = set()
    while len(seen) < min(total, limit):
        if total <= 4 * limit:  # small: a permutation is cheap and ends the rejection loop
            order = list(range(total))
            rng.shuffle(order)
            yield from (b for b in order if b not in seen)
            return
        b = rng.randrange(total)
        if b not in seen:
            seen.add(b)
            yield b


def _jsonl_block(f: InputFile, start: int, end: int, want: int, stats: dict) -> list[bytes]:
    lines: list[bytes] = []
    first = True
    for line_start, line in _iter_lines(f, start, stats):
        if first and start > 0:
            first = False
            continue  # the tail of a line that began in the previous block
        first = False
        if line_start >= end:
            break
        if line.strip():
            lines.append(line)
            if len(lines) >= want:
                break
    return lines


def _shuffle_sample(files: list[InputFile], n: int, seed: int | None) -> Sample:
    rng = random.Random(seed)
    stats = {"bytes_read": 0, "row_groups_read": 0}
    # Blocks per file, from sizes/footers only.
    counts: list[int] = []
    rg_rows: list[list[int] | None] = []
    for f in files:
        if f.format == "parquet":
            with storage.open_read(f.path) as fh:
                meta = pq.ParquetFile(fh).metadata
            rows = [meta.row_group(i).num_rows for i in range(meta.num_row_groups)]
            rg_rows.append(rows)
            counts.append(len(rows))
        else:
            rg_rows.append(None)
            counts.append(1 if f.compression else max(1, math.ceil(f.size / JSONL_BLOCK_BYTES)))
    bounds = [0]
    for c in counts:
        bounds.append(bounds[-1] + c)
    total = bounds[-1]
    tables: list[pa.Table] = []
    blocks: list[dict] = []
    got = 0
    for b in _draw_blocks(rng, total, limit=max(64, 4 * n)):
        if got >= n:
            break
        fi = bisect.bisect_right(bounds, b) - 1
        f, local = files[fi], b - bounds[fi]
        if f.format == "parquet":
            t, _ = _parquet_rows_group(f, local, n - got, stats)
            desc = {"path": f.path, "row_group": local}
        elif f.compression:
            lines, _ = _jsonl_head(f, 0, n - got, stats)
            t = _parse_lines(lines, f.path) if lines else None
            desc = {"path": f.path, "block": "whole-file-head"}
        else:
            start = local * JSONL_BLOCK_BYTES
            lines = _jsonl_block(f, start, start + JSONL_BLOCK_BYTES, n - got, stats)
            t = _parse_lines(lines, f.path) if lines else None
            desc = {"path": f.path, "byte_start": start, "byte_end": min(f.size, start + JSONL_BLOCK_BYTES)}
        if t is not None and t.num_rows:
            tables.append(t)
            blocks.append({**desc, "rows": t.num_rows})
            got += t.num_rows
    table = pa.concat_tables(tables, promote_options="permissive") if tables else pa.table({})
    origin = {
        "mode": "shuffle",
        "seed": seed,
        "rows": table.num_rows,
        "requested_rows": n,
        "blocks_total": total,
        "blocks": blocks,
        **stats,
    }
    return Sample(table, origin)


def _parquet_rows_group(f: InputFile, group: int, want: int, stats: dict) -> tuple[pa.Table | None, int]:
    with storage.open_read(f.path) as fh:
        pf = pq.ParquetFile(fh)
        stats["row_groups_read"] += 1
        for batch in pf.iter_batches(batch_size=max(1, want), row_groups=[group]):
            return pa.Table.from_batches([batch]), 0
    return None, 0


def read_sample(
    dataset_path: str, n_rows: int, *, offset: int = 0, shuffle: bool = False, seed: int | None = 42
) -> Sample:
    """Read the probe sample of ``n_rows`` rows; raises EmptySampleError when nothing is there."""
    if n_rows < 1:
        raise ValueError(f"n_rows must be >= 1, got {n_rows}")
    files = list_input_files(dataset_path)
    warnings: list[str] = []
    if shuffle:
        if offset:
            warnings.append(
                f"gpu_probe_sample_shuffle is on, so gpu_probe_sample_offset={offset} is ignored "
                f"(shuffle and offset are exclusive); set the offset to 0 to silence this"
            )
        sample = _shuffle_sample(files, n_rows, seed)
    else:
        sample = _head_sample(files, n_rows, offset)
    sample.warnings = warnings + sample.warnings
    sample.origin["dataset_path"] = dataset_path
    if sample.table.num_rows == 0:
        where = f" after skipping gpu_probe_sample_offset={offset} rows" if offset and not shuffle else ""
        raise EmptySampleError(
            f"dataset_path {dataset_path!r} gave no rows for the GPU probe sample{where}; "
            f"check the input (or lower partition.gpu_probe_sample_offset)"
        )
    return sample
