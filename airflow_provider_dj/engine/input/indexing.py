"""Indexing the input: where each row starts, found by tasks that run in parallel.

JSONL: the byte offsets of non-blank lines; Parquet: row-group sizes from the footer.  An uncompressed
JSONL file is cut into chunks of ``[dj] planning_chunk_mb`` at line starts, and each chunk is scanned by a
task of its own (``scan_lines``), so indexing time falls with the cores (or Ray workers) that
``run_tasks`` has; a compressed stream cannot be entered in the middle and is one task.  The scan also
refuses, before any partition is planned, the two defects a byte scan proves at almost no cost: bytes
that are not UTF-8 and a non-blank line that is not a JSON object (the error names the file, line and
byte, whichever task found it).

Every task returns values (row counts, sampled offsets), never mutates its argument, so the same code
runs in this process, on threads, or as Ray tasks (``engine/input/task_map.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from airflow_provider_dj.core import fs as storage
from airflow_provider_dj.engine.input.sources import InputError, InputFile, iter_stream, line_number
from airflow_provider_dj.engine.input.task_map import RunTasks, run_in_process

#: Rows between two offsets an uncompressed JSONL file's index keeps (RowStarts).
ROW_STRIDE = 1024
#: Bytes a chunk boundary search reads at a time (a boundary moves to the next line start).
_BOUNDARY_WINDOW = 1 << 16
_WS = frozenset(b" \t\r\n\x0b\x0c")


@dataclass(frozen=True)
class LineScan:
    """What one chunk's scan found: its rows, the offsets of its rows 0, stride, 2*stride, ... (counted
    from the chunk's first row) and the stream position where it ended."""

    rows: int
    sampled: np.ndarray
    end: int


class RowStarts:
    """The byte offset where each row of an uncompressed JSONL file starts, ``starts[num_rows]`` being the
    stream's length, from the offsets of every ``stride``-th row of each chunk: another row's is found by
    reading forward from the sample before it, counting non-blank lines as the index does (at most
    ``stride`` lines; planning looks up only the partitions' boundary rows)."""

    def __init__(self, f: InputFile, scans: list[LineScan], stride: int) -> None:
        self.f, self.stride = f, stride
        self.first_rows = np.cumsum([0] + [s.rows for s in scans[:-1]]).astype(np.int64)
        self.first_samples = np.cumsum([0] + [len(s.sampled) for s in scans[:-1]]).astype(np.int64)
        self.sampled = np.concatenate([s.sampled for s in scans]) if scans else np.zeros(0, dtype=np.int64)

    def __getitem__(self, row: int) -> int:
        row = int(row)
        if row == self.f.num_rows:
            return int(self.f.stream_len)
        if not 0 <= row < self.f.num_rows:
            raise IndexError(f"{self.f.path}: row {row} of {self.f.num_rows}")
        chunk = int(np.searchsorted(self.first_rows, row, side="right")) - 1
        base, ahead = divmod(row - int(self.first_rows[chunk]), self.stride)
        start = int(self.sampled[int(self.first_samples[chunk]) + base])
        return start if not ahead else _row_start_after(self.f, start, ahead)


def index_inputs(files: list[InputFile], run_tasks: RunTasks = run_in_process, chunk_bytes: int = 0) -> int:
    """Index every file (``num_rows``, ``stream_len``, ``row_starts`` or ``row_group_rows``) by tasks over
    ``run_tasks``: one per JSONL chunk of ``chunk_bytes`` (0: ``[dj] planning_chunk_mb``), one per Parquet
    or compressed file, all of them in one batch; return how many tasks ran."""
    if not files:
        return 0
    chunk_bytes = chunk_bytes or _chunk_bytes_setting()
    tasks: list[tuple] = []
    owners: list[int] = []
    for idx, f in enumerate(files):
        for bounds in _chunks(f, chunk_bytes):
            tasks.append((f, *bounds))
            owners.append(idx)
    results = run_tasks(index_task, tasks)
    by_file: dict[int, list] = {}
    for idx, result in zip(owners, results):
        by_file.setdefault(idx, []).append(result)
    for idx, f in enumerate(files):
        _adopt(f, by_file.get(idx, []))
    return len(tasks)


def index_jsonl(f: InputFile, run_tasks: RunTasks = run_in_process, chunk_bytes: int = 0) -> None:
    """Index one JSONL file (``index_inputs`` for one file)."""
    index_inputs([f], run_tasks, chunk_bytes)


def index_task(f: InputFile, start: int, end: int | None, stride: int) -> LineScan | list[int]:
    """One indexing task: a JSONL chunk's ``LineScan``, or a Parquet file's row-group sizes."""
    if f.format != "jsonl":
        with storage.open_read(f.path) as fh:
            meta = pq.ParquetFile(fh).metadata
            return [meta.row_group(i).num_rows for i in range(meta.num_row_groups)]
    return scan_lines(f, start, end, stride)


def _chunk_bytes_setting() -> int:
    from airflow_provider_dj import settings

    return max(1, int(settings.get("planning_chunk_mb"))) << 20


def _chunks(f: InputFile, chunk_bytes: int) -> list[tuple[int, int | None, int]]:
    """(start, end, stride) of each task over ``f``: consecutive ranges of whole lines of about
    ``chunk_bytes`` each for an uncompressed JSONL file, else the whole file."""
    if f.format != "jsonl" or f.compression is not None:
        return [(0, None, ROW_STRIDE if f.format == "jsonl" and f.compression is None else 1)]
    size = f.size
    starts = [0]
    for split in range(chunk_bytes, size, chunk_bytes):
        at = _line_start_at_or_after(f, split, size)
        if starts[-1] < at < size:
            starts.append(at)
    ends = [*starts[1:], None]
    return [(s, e, ROW_STRIDE) for s, e in zip(starts, ends)]


def _line_start_at_or_after(f: InputFile, pos: int, size: int) -> int:
    """The first offset at or after ``pos`` where a line starts (``size`` when none does)."""
    at = pos - 1  # a line starts at pos when the byte before it is a newline
    while at < size:
        data = b"".join(iter_stream(f, at, min(size, at + _BOUNDARY_WINDOW), chunk=_BOUNDARY_WINDOW))
        nl = data.find(b"\n")
        if nl >= 0:
            return at + nl + 1
        if not data:
            break
        at += len(data)
    return size


def _adopt(f: InputFile, results: list) -> None:
    """Set ``f``'s index from its tasks' results, in chunk order."""
    if f.format != "jsonl":
        (f.row_group_rows,) = results
        f.num_rows = int(sum(f.row_group_rows))
        return
    f.num_rows = sum(r.rows for r in results)
    f.stream_len = results[-1].end if results else 0
    if f.compression is None and ROW_STRIDE > 1:
        f.row_starts = RowStarts(f, results, ROW_STRIDE)
    else:
        f.row_starts = np.concatenate([*(r.sampled for r in results), [f.stream_len]]).astype(np.int64)


def scan_lines(f: InputFile, start: int, end: int | None, stride: int) -> LineScan:
    """Scan the lines of ``f`` that start in [start, end) (``start`` a line start; ``end`` one too, or
    the end of the stream): count the non-blank ones, keep every ``stride``-th one's offset, and check
    the bytes are UTF-8 and each non-blank line a JSON object (``InputError`` naming line and byte)."""
    starts: list[np.ndarray] = []
    rows = 0
    pos = start
    pending_start = start  # start offset of the line currently open
    carry = b""  # bytes of the open line, not yet UTF-8 checked (a newline never splits a character)
    for block in iter_stream(f, start, end):
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
    return LineScan(rows, sampled, pos)


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


__all__ = ["ROW_STRIDE", "LineScan", "RowStarts", "index_inputs", "index_jsonl", "index_task", "scan_lines"]
