"""Input discovery, row indexing and row-range reads.

The planner scans the input once to learn where every row starts (JSONL:
byte offsets of non-blank lines; Parquet: row-group sizes from the footer).
A partition task then reads only its own row range: a byte-range read for
plain JSONL, a subset of row groups for Parquet.  Compressed JSONL (.gz,
.zst) cannot be seeked, so a task streams and discards the bytes before its
range; use plain JSONL or Parquet for very large inputs.

Files are processed in sorted path order so the row order — and with it the
export order and the partition hashes — is deterministic.
"""

from __future__ import annotations

import glob as globmod
import gzip
import io
import os
from dataclasses import dataclass, field
from typing import IO, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.json as pajson
import pyarrow.parquet as pq

from airflow_provider_dj.engine import storage

JSONL_SUFFIXES = (".jsonl", ".json", ".jsonl.gz", ".json.gz", ".jsonl.zst", ".json.zst")
PARQUET_SUFFIXES = (".parquet",)


class InputError(ValueError):
    """The dataset path does not name readable input; the message says what to fix."""


@dataclass
class InputFile:
    path: str
    format: str  # "jsonl" | "parquet"
    compression: str | None  # None | "gzip" | "zstd"
    size: int
    num_rows: int = 0
    # JSONL: byte offset (in the decompressed stream) where each row starts,
    # plus the stream length as a final sentinel.  Kept in memory only while
    # planning; partition boundaries store what they need.
    row_starts: np.ndarray | None = field(default=None, repr=False)
    stream_len: int = 0
    # Parquet: rows per row group.
    row_group_rows: list[int] | None = None

    def describe(self) -> dict:
        return {
            "path": self.path,
            "format": self.format,
            "compression": self.compression,
            "size": self.size,
            "num_rows": self.num_rows,
        }


def _format_of(path: str) -> tuple[str, str | None] | None:
    lower = path.lower()
    if lower.endswith(PARQUET_SUFFIXES):
        return "parquet", None
    for suf in JSONL_SUFFIXES:
        if lower.endswith(suf):
            comp = "gzip" if suf.endswith(".gz") else "zstd" if suf.endswith(".zst") else None
            return "jsonl", comp
    return None


def list_input_files(dataset_path: str) -> list[InputFile]:
    """Resolve a file, directory or glob into input files in sorted order."""
    if storage.is_url(dataset_path):
        fs, inner = storage.get_fs(dataset_path)
        protocol = dataset_path.split("://", 1)[0]
        if any(ch in inner for ch in "*?["):
            found = sorted(fs.glob(inner))
        elif fs.isdir(inner):
            found = sorted(fs.find(inner))
        elif fs.exists(inner):
            found = [inner]
        else:
            raise InputError(f"dataset_path {dataset_path!r} does not exist")
        paths = [f"{protocol}://{p}" for p in found]
    elif any(ch in dataset_path for ch in "*?["):
        paths = sorted(p for p in globmod.glob(dataset_path, recursive=True) if os.path.isfile(p))
    elif os.path.isdir(dataset_path):
        paths = sorted(
            os.path.join(root, name)
            for root, _dirs, names in os.walk(dataset_path)
            for name in names
            if not name.startswith(".")
        )
    elif os.path.isfile(dataset_path):
        paths = [dataset_path]
    else:
        raise InputError(
            f"dataset_path {dataset_path!r} does not exist; give a .jsonl/.parquet file, a directory or a glob"
        )
    files: list[InputFile] = []
    for p in paths:
        fmt = _format_of(p)
        if fmt is None:
            if len(paths) == 1:
                raise InputError(
                    f"dataset_path {p!r}: unsupported file type; use .jsonl (optionally .gz/.zst) or .parquet"
                )
            continue  # directories may hold READMEs and such
        files.append(InputFile(path=p, format=fmt[0], compression=fmt[1], size=storage.size(p)))
    if not files:
        raise InputError(f"dataset_path {dataset_path!r} matches no .jsonl or .parquet files")
    formats = {f.format for f in files}
    if len(formats) > 1:
        raise InputError(
            f"dataset_path {dataset_path!r} mixes JSONL and Parquet files; point it at one format "
            f"(e.g. a glob like '*.jsonl')"
        )
    return files


def _open_stream(f: InputFile) -> IO[bytes]:
    raw = storage.open_read(f.path)
    if f.compression == "gzip":
        return gzip.GzipFile(fileobj=raw)
    if f.compression == "zstd":
        import zstandard

        return zstandard.ZstdDecompressor().stream_reader(raw, read_across_frames=True)
    return raw


def iter_stream(f: InputFile, start: int = 0, end: int | None = None, chunk: int = 16 << 20) -> Iterator[bytes]:
    """Yield the decompressed bytes [start, end) of a JSONL file."""
    fh = _open_stream(f)
    try:
        pos = 0
        if start:
            if f.compression is None and hasattr(fh, "seek"):
                fh.seek(start)
                pos = start
            else:
                while pos < start:
                    skipped = fh.read(min(chunk, start - pos))
                    if not skipped:
                        return
                    pos += len(skipped)
        while end is None or pos < end:
            want = chunk if end is None else min(chunk, end - pos)
            block = fh.read(want)
            if not block:
                return
            pos += len(block)
            yield block
    finally:
        fh.close()


_WS = frozenset(b" \t\r\n\x0b\x0c")


def index_jsonl(f: InputFile) -> None:
    """Find where each non-blank line starts (blank lines are not rows, as in pyarrow/HF readers)."""
    starts: list[np.ndarray] = []
    pos = 0
    pending_start = 0  # start offset of the line currently open
    for block in iter_stream(f):
        arr = np.frombuffer(block, dtype=np.uint8)
        nl = np.flatnonzero(arr == 10) + pos
        line_starts = np.concatenate(([pending_start], nl + 1))
        line_ends = np.concatenate((nl, [pos + len(block)]))
        # Every line but the last is complete within what we've seen so far.
        complete_s, complete_e = line_starts[:-1], line_ends[:-1]
        starts.append(_non_blank(complete_s, complete_e, block, pos, f))
        pending_start = int(line_starts[-1])
        pos += len(block)
    if pending_start < pos:
        last = _non_blank(np.array([pending_start]), np.array([pos]), None, 0, f)
        starts.append(last)
    row_starts = np.concatenate(starts) if starts else np.zeros(0, dtype=np.int64)
    f.row_starts = np.concatenate((row_starts.astype(np.int64), [pos]))
    f.stream_len = pos
    f.num_rows = len(row_starts)


def _non_blank(s: np.ndarray, e: np.ndarray, block: bytes | None, block_pos: int, f: InputFile) -> np.ndarray:
    """Keep lines with a non-whitespace byte.  Fast path: a line starting with '{' is a row."""
    if len(s) == 0:
        return s.astype(np.int64)
    keep = e > s
    if block is not None:
        arr = np.frombuffer(block, dtype=np.uint8)
        inside = (s >= block_pos) & (s < block_pos + len(arr))
        first = np.zeros(len(s), dtype=np.uint8)
        first[inside] = arr[(s[inside] - block_pos)]
        sure = inside & (first == ord("{")) & keep
    else:
        sure = np.zeros(len(s), dtype=bool)
    unsure = np.flatnonzero(keep & ~sure)
    for i in unsure:  # rare: lines not starting with '{' (whitespace, blank lines)
        keep[i] = _line_has_content(f, int(s[i]), int(e[i]))
    return s[keep].astype(np.int64)


def _line_has_content(f: InputFile, start: int, end: int) -> bool:
    for block in iter_stream(f, start, end):
        if any(b not in _WS for b in block):
            return True
    return False


def index_parquet(f: InputFile) -> None:
    with storage.open_read(f.path) as fh:
        meta = pq.ParquetFile(fh).metadata
        f.row_group_rows = [meta.row_group(i).num_rows for i in range(meta.num_row_groups)]
    f.num_rows = int(sum(f.row_group_rows))


def index_inputs(files: list[InputFile]) -> None:
    for f in files:
        if f.format == "jsonl":
            index_jsonl(f)
        else:
            index_parquet(f)


# -- reading one partition ------------------------------------------------

def read_jsonl_range(f: dict, byte_start: int, byte_end: int) -> tuple[pa.Table, bytes]:
    """Rows of one JSONL byte range, and the raw bytes (for hash verification)."""
    info = InputFile(path=f["path"], format="jsonl", compression=f.get("compression"), size=f.get("size", 0))
    data = b"".join(iter_stream(info, byte_start, byte_end))
    if not data.strip():
        return pa.table({}), data
    try:
        table = pajson.read_json(io.BytesIO(data), read_options=pajson.ReadOptions(block_size=max(1 << 20, min(len(data) + 1, 1 << 30))))
    except pa.ArrowInvalid as exc:
        raise InputError(f"{f['path']}: bytes {byte_start}-{byte_end} are not valid JSON lines: {exc}") from exc
    return table, data


def read_parquet_range(f: dict, row_start: int, row_end: int, row_group_rows: list[int]) -> pa.Table:
    """Read only the row groups covering [row_start, row_end) and slice."""
    bounds = np.concatenate(([0], np.cumsum(row_group_rows)))
    first = int(np.searchsorted(bounds, row_start, side="right") - 1)
    last = int(np.searchsorted(bounds, row_end, side="left"))
    groups = list(range(first, max(first + 1, last)))
    with storage.open_read(f["path"]) as fh:
        table = pq.ParquetFile(fh).read_row_groups(groups)
    offset = row_start - int(bounds[first])
    return table.slice(offset, row_end - row_start)
