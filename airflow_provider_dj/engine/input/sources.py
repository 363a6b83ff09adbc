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
from airflow_provider_dj.core.errors import RefusedError
from airflow_provider_dj.engine.config.path_confinement import PathOutsideRootsError, allowed_roots

JSONL_SUFFIXES = (".jsonl", ".json", ".jsonl.gz", ".json.gz", ".jsonl.zst", ".json.zst")
PARQUET_SUFFIXES = (".parquet",)


class InputError(RefusedError, ValueError):
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


def line_number(f: InputFile, offset: int) -> int:
    """1-based line of the byte at ``offset`` (counts the newlines before it; error paths only)."""
    return 1 + sum(block.count(b"\n") for block in iter_stream(f, 0, offset))


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
