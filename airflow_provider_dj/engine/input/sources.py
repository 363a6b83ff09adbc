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

from airflow_provider_dj.core import fs as storage
from airflow_provider_dj.core.errors import DJError
from airflow_provider_dj.engine.config.path_confinement import PathOutsideRootsError, allowed_roots

JSONL_SUFFIXES = (".jsonl", ".json", ".jsonl.gz", ".json.gz", ".jsonl.zst", ".json.zst")
PARQUET_SUFFIXES = (".parquet",)


class InputError(DJError, ValueError):
    """The dataset path does not name readable input; the message says what to fix."""


class InputOutsideRootsError(PathOutsideRootsError, InputError):
    """A file the input lists lies outside the deployment's ``allowed_roots`` (a symlink inside a root
    that points out of it): refused as a bad input is, before any file is read."""


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
    _confine_listed(dataset_path, paths)
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


def _confine_listed(dataset_path: str, paths: list[str]) -> None:
    """Each listed file, symlinks followed, must lie under the allowed roots: the recipe check confines
    ``dataset_path`` itself, but a directory or glob inside a root may still list a link to outside it."""
    roots = allowed_roots()
    if roots is None:
        return
    for p in paths:
        message = roots.refusal(p, what=f"input file {p!r} (listed from {dataset_path!r})")
        if message:
            raise InputOutsideRootsError(None, "dataset_path", message)


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
    """Find where each non-blank line starts (blank lines are not rows, as in pyarrow/HF readers).

    The same pass refuses, before any partition is planned, the two defects a
    byte scan can prove at almost no cost (Arrow checks UTF-8 in place at
    about 10 GB/s; the index scan itself runs near 1 GB/s): bytes that are not UTF-8, and a
    non-blank line that is not a JSON object.  Either would otherwise fail
    one partition task deep into the run.
    """
    starts: list[np.ndarray] = []
    rows = 0
    # An uncompressed file keeps the offset of every ROW_STRIDE-th row only (RowStarts finds the others
    # by reading a few lines), so planning holds 8 bytes per ROW_STRIDE rows, not 8 per row; a compressed
    # stream cannot be entered in the middle, so it keeps every row's.
    stride = ROW_STRIDE if f.compression is None else 1
    pos = 0
    pending_start = 0  # start offset of the line currently open
    carry = b""  # bytes of the open line, not yet UTF-8 checked (a newline never splits a character)
    for block in iter_stream(f):
        arr = np.frombuffer(block, dtype=np.uint8)
        nl = np.flatnonzero(arr == 10) + pos
        line_starts = np.concatenate(([pending_start], nl + 1))
        line_ends = np.concatenate((nl, [pos + len(block)]))
        # Every line but the last is complete within what we've seen so far.
        complete_s, complete_e = line_starts[:-1], line_ends[:-1]
        if len(nl):
            first, cut = int(nl[0]) + 1 - pos, int(nl[-1]) + 1 - pos
            if carry:  # the line open at the previous block's end, completed here (one line: a small copy)
                _check_utf8(f, carry + block[:first], pos - len(carry))
            _check_utf8(f, block, pos, first if carry else 0, cut)  # zero-copy over the block
            carry = block[cut:]
        else:
            carry += block
        kept = _non_blank(complete_s, complete_e, block, pos, f)
        starts.append(kept[(-rows) % stride :: stride].copy())  # a copy: a view would keep the block's array
        rows += len(kept)
        pending_start = int(line_starts[-1])
        pos += len(block)
    _check_utf8(f, carry, pos - len(carry))
    if pending_start < pos:
        last = _non_blank(np.array([pending_start]), np.array([pos]), None, 0, f)
        starts.append(last[(-rows) % stride :: stride].copy())
        rows += len(last)
    sampled = np.concatenate(starts).astype(np.int64) if starts else np.zeros(0, dtype=np.int64)
    f.stream_len = pos
    f.num_rows = rows
    f.row_starts = RowStarts(f, sampled, stride) if stride > 1 else np.concatenate((sampled, [pos]))


#: Rows between two offsets an uncompressed JSONL file's index keeps (RowStarts).
ROW_STRIDE = 1024


class RowStarts:
    """The byte offset where each row of an uncompressed JSONL file starts, ``starts[num_rows]`` being the
    stream's length, from the offsets of every ``stride``-th row: another row's is found by reading
    forward from the sample before it, counting non-blank lines as the index does (at most ``stride``
    lines; planning looks up only the partitions' boundary rows)."""

    def __init__(self, f: InputFile, sampled: np.ndarray, stride: int) -> None:
        self.f, self.sampled, self.stride = f, sampled, stride

    def __getitem__(self, row: int) -> int:
        row = int(row)
        if row == self.f.num_rows:
            return int(self.f.stream_len)
        if not 0 <= row < self.f.num_rows:
            raise IndexError(f"{self.f.path}: row {row} of {self.f.num_rows}")
        base, ahead = divmod(row, self.stride)
        start = int(self.sampled[base])
        return start if not ahead else _row_start_after(self.f, start, ahead)


def _row_start_after(f: InputFile, start: int, ahead: int) -> int:
    """The offset of the row ``ahead`` rows after the row that starts at ``start`` (rows are non-blank
    lines); the caller knows that row exists."""
    window = 1 << 16
    while True:
        end = min(f.stream_len, start + window)
        data = b"".join(iter_stream(f, start, end, chunk=window))
        offset, seen = 0, -1
        for line in data.split(b"\n"):
            if line.strip():
                seen += 1
                if seen == ahead:
                    return start + offset
            offset += len(line) + 1
        if end >= f.stream_len:
            raise InputError(f"{f.path}: row {ahead} after byte {start} is past the end of the file")
        window *= 4


def _check_utf8(f: InputFile, data: bytes, offset: int, start: int = 0, end: int | None = None) -> None:
    """Raise InputError naming the line and byte of the first invalid UTF-8 sequence in ``data[start:end]``
    (``offset``: the stream position of ``data[0]``).  Arrow validates the range in place, without a copy."""
    end = len(data) if end is None else end
    if end <= start:
        return
    bounds = pa.py_buffer(np.array([start, end], dtype=np.int64).tobytes())
    try:
        pa.LargeStringArray.from_buffers(1, bounds, pa.py_buffer(data)).validate(full=True)
        return
    except pa.ArrowInvalid:
        pass
    try:
        data[start:end].decode("utf-8")
        return  # pragma: no cover - Arrow and Python disagree; trust Python
    except UnicodeDecodeError as exc:
        at, bad = offset + start + exc.start, data[start + exc.start : start + exc.start + 4]
    raise InputError(
        f"{f.path}: line {line_number(f, at)} (byte {at}) is not valid UTF-8 ({bad!r}...); JSON Lines must be "
        f"UTF-8: re-encode the file (e.g. iconv -f latin1 -t utf-8) or remove the line, then start the job again"
    )


def line_number(f: InputFile, offset: int) -> int:
    """1-based line of the byte at ``offset`` (counts the newlines before it; error paths only)."""
    return 1 + sum(block.count(b"\n") for block in iter_stream(f, 0, offset))


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
    for i in unsure:  # rare: lines not starting with '{' (whitespace, blank lines, or not an object)
        first_byte = _first_content_byte(f, int(s[i]), int(e[i]))
        keep[i] = first_byte is not None
        if first_byte is not None and first_byte != ord("{"):
            at = int(s[i])
            raise InputError(
                f"{f.path}: line {line_number(f, at)} (byte {at}) is not a JSON object: it reads "
                f"{_peek(f, at, int(e[i]))!r}; every line of JSON Lines input must be one object "
                f'(like {{"text": "..."}}): fix or remove that line, then start the job again'
            )
    return s[keep].astype(np.int64)


def _first_content_byte(f: InputFile, start: int, end: int) -> int | None:
    for block in iter_stream(f, start, end):
        for b in block:
            if b not in _WS:
                return b
    return None


def _peek(f: InputFile, start: int, end: int, n: int = 40) -> str:
    data = b"".join(iter_stream(f, start, min(end, start + n)))
    return data.decode("utf-8", "replace").strip()


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
    read_options = pajson.ReadOptions(block_size=max(1 << 20, min(len(data) + 1, 1 << 30)))
    try:
        table = pajson.read_json(io.BytesIO(data), read_options=read_options)
        if _has_timestamps(table.schema):
            # Arrow turns strings that look like dates into timestamps, which would export
            # "2026-11-30" as "2026-11-30T00:00:00" (and type one partition's column
            # differently from another's): read those fields again as the strings they are.
            schema = pa.schema([pa.field(f.name, _timestamps_as_strings(f.type)) for f in table.schema])
            table = pajson.read_json(
                io.BytesIO(data), read_options=read_options, parse_options=pajson.ParseOptions(explicit_schema=schema)
            )
    except (pa.ArrowInvalid, UnicodeDecodeError) as exc:
        raise jsonl_error(info, data, byte_start, exc) from exc
    return table, data


def _has_timestamps(schema: pa.Schema) -> bool:
    return any(_timestamps_as_strings(f.type) != f.type for f in schema)


def _timestamps_as_strings(t: pa.DataType) -> pa.DataType:
    """``t`` with every timestamp (JSON has none: they were inferred from strings) made a string, at any depth."""
    if pa.types.is_timestamp(t):
        return pa.string()
    if pa.types.is_struct(t):
        return pa.struct([pa.field(f.name, _timestamps_as_strings(f.type), f.nullable) for f in t])
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        inner = _timestamps_as_strings(t.value_type)
        return pa.list_(inner) if pa.types.is_list(t) else pa.large_list(inner)
    return t


def jsonl_error(f: InputFile, data: bytes, offset: int, exc: Exception) -> InputError:
    """An InputError naming the first line of ``data`` Arrow cannot read, and why, in words a user can act on.

    Arrow reports a row number relative to its block and a JSON pointer; this
    re-reads the lines with Python's json to find the line in the file, the
    field and the two types (a ``text`` that is a number in line 7 after
    strings), or the syntax error."""
    found = diagnose_jsonl(data)
    if found is None:
        return InputError(f"{f.path}: bytes {offset}-{offset + len(data)} are not valid JSON Lines: {exc}")
    rel, reason = found
    at = offset + rel
    return InputError(
        f"{f.path}: line {line_number(f, at)} (byte {at}): {reason}. Fix that line (a field must hold one JSON "
        f"type in every row: quote numbers that are text, use null for no value), then start a new job: "
        f"this job was planned on the file as it is"
    )


def _json_kind(value: object) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return "null"


def diagnose_jsonl(data: bytes) -> tuple[int, str] | None:
    """(byte offset in ``data``, reason) of the first line that is not UTF-8, not a JSON object, or
    gives a field a different JSON type than earlier lines did; None when every line reads."""
    import json

    kinds: dict[str, tuple[str, int]] = {}  # field path -> (kind, line offset where first seen)
    pos = 0
    for line in data.split(b"\n"):
        start, pos = pos, pos + len(line) + 1
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except UnicodeDecodeError as exc:
            return start + exc.start, f"not valid UTF-8 ({line[exc.start : exc.start + 4]!r})"
        except ValueError as exc:
            return start, f"not valid JSON ({exc})"
        if not isinstance(value, dict):
            return start, f"a JSON {_json_kind(value)}, not an object"
        stack = [("", value)]
        while stack:
            prefix, obj = stack.pop()
            for key, v in obj.items():
                path = f"{prefix}{key}"
                kind = _json_kind(v)
                if kind == "null":
                    continue
                seen = kinds.setdefault(path, (kind, start))
                if seen[0] != kind:
                    return start, (
                        f"field {path!r} is a {kind} ({json.dumps(v)[:40]}) but a {seen[0]} in an earlier row"
                    )
                if kind == "object":
                    stack.append((path + ".", v))
    return None


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
