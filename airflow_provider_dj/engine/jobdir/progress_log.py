"""Human-readable progress logs: ``{job}/logs/partition_NNNNN.log`` and ``logs/job.log``.

Why files in the job directory as well as the Airflow task log: partition
work runs in Ray workers whose output does not reach the Airflow task log,
and a retried or cleared task starts a fresh task log.  One file per
partition, appended a line at a time, tells the whole story of that
partition across tries and segments: op starts and ends with rows and
rows/s, periodic progress inside long ops (rows done / total, rows/s, ETA),
resumes and failures.  The monitor and the partition task (to show progress
of running partitions in its own log) read the last lines back.

Each line is one ``write`` with ``O_APPEND`` (whole lines, never
interleaved on a local disk).  On an object store, which cannot append,
the writer rewrites its object; a partition is worked on by one task at a
time (the runner lock), so there is a single writer per file.
"""

from __future__ import annotations

import os
import threading
import time
from datetime import datetime, timezone

from airflow_provider_dj import settings
from airflow_provider_dj.core import fs as storage
from airflow_provider_dj.engine.jobdir.layout import JOB_LOG, LOGS_DIR, partition_name

_lock = threading.Lock()


def partition_log_path(job_dir: str, partition_id: int) -> str:
    return storage.join(job_dir, LOGS_DIR, f"{partition_name(partition_id)}.log")


def _stamp(now: float) -> str:
    return datetime.fromtimestamp(now, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def append_line(path: str, text: str, now: float | None = None) -> str:
    line = f"{_stamp(now or time.time())} {text}".rstrip("\n") + "\n"
    data = line.encode("utf-8")
    with _lock:
        if not storage.is_url(path):
            # One write, cut back if the disk took only part of it; a full disk names this log file.
            storage.append_bytes(path, data, what="a progress log line")
        else:
            try:
                old = storage.read_bytes(path)
            except FileNotFoundError:
                old = b""
            storage.atomic_write_bytes(path, old + data)
    return line


def append_job_log(job_dir: str, text: str) -> str:
    return append_line(storage.join(job_dir, LOGS_DIR, JOB_LOG), text)


def tail_lines(path: str, n: int = 1, max_bytes: int = 64 << 10) -> list[str]:
    """The last ``n`` whole lines of a log ([] when absent)."""
    try:
        if storage.is_url(path):
            data = storage.read_bytes(path)[-max_bytes:]
        else:
            with open(path, "rb") as fh:
                fh.seek(0, os.SEEK_END)
                size = fh.tell()
                fh.seek(max(0, size - max_bytes))
                data = fh.read()
    except FileNotFoundError:
        return []
    lines = data.decode("utf-8", "replace").split("\n")
    whole = lines[:-1] if lines else []
    if len(data) == max_bytes and whole:
        whole = whole[1:]  # the first piece may start mid-line
    return [ln for ln in whole if ln.strip()][-n:]


def _rate_eta(done: int, total: int, elapsed: float) -> str:
    if done <= 0 or elapsed <= 0:
        return ""
    rate = done / elapsed
    eta = (total - done) / rate if total >= done else 0.0
    return f", {rate:,.0f} rows/s, ETA {eta:.1f}s"


class PartitionProgressLog:
    """Progress lines for one partition in one segment run (one task try).

    ``batch`` is the hook for ops that work in batches: call it after each
    committed batch; it writes at most one line per ``interval_s`` (env
    ``DJ_PROGRESS_INTERVAL_S``, default 10 s) so a long op reports rows
    done / total, rows/s and ETA without flooding the file.
    """

    def __init__(
        self,
        job_dir: str,
        partition_id: int,
        *,
        segment: int,
        try_number: int | None = None,
        interval_s: float | None = None,
    ) -> None:
        self.path = partition_log_path(job_dir, partition_id)
        self.partition_id = partition_id
        self.prefix = f"p{partition_id} seg{segment}" + (f" try{try_number}" if try_number is not None else "")
        self.interval_s = float(settings.get("progress_interval_s")) if interval_s is None else interval_s
        self._t_partition = time.perf_counter()
        self._op_durations: list[float] = []
        self._t_op = self._t_partition
        self._last_batch_line = 0.0

    def line(self, text: str) -> str:
        try:
            return append_line(self.path, f"[{self.prefix}] {text}")
        except OSError:  # a log line must never fail the work
            return ""

    def partition_start(self, *, start_row: int, end_row: int, input_rows: int, ops: int) -> None:
        self._t_partition = time.perf_counter()
        self.line(f"partition start: rows {start_row}-{end_row - 1} ({input_rows:,} rows), {ops} ops to run")

    def resumed(self, after_op: int, op_name: str, rows: int) -> None:
        self.line(f"resuming from the checkpoint after op {after_op} ({op_name}): {rows:,} rows")

    def op_start(self, op_index: int, op_name: str, rows: int, n: int, total: int) -> None:
        self._t_op = time.perf_counter()
        self._last_batch_line = self._t_op
        self.line(f"op {op_index} {op_name} start ({n}/{total} of this segment): {rows:,} rows in")

    def batch(self, op_index: int, op_name: str, rows_done: int, rows_total: int, *, force: bool = False) -> str:
        now = time.perf_counter()
        if not force and now - self._last_batch_line < self.interval_s:
            return ""
        self._last_batch_line = now
        pct = 100.0 * rows_done / rows_total if rows_total else 100.0
        return self.line(
            f"op {op_index} {op_name}: {rows_done:,}/{rows_total:,} rows ({pct:.0f}%)"
            + _rate_eta(rows_done, rows_total, now - self._t_op)
        )

    def op_done(
        self,
        op_index: int,
        op_name: str,
        *,
        rows_in: int,
        rows_out: int,
        duration: float,
        n: int,
        total: int,
        filtered: int = 0,
        duplicates: int = 0,
        failed: int = 0,
    ) -> None:
        self._op_durations.append(duration)
        rate = f"{rows_in / duration:,.0f} rows/s" if duration > 0 else "instant"
        left = total - n
        eta = ""
        if left > 0 and self._op_durations:
            eta = f", ETA {left * sum(self._op_durations) / len(self._op_durations):.1f}s for {left} more ops"
        extra = "".join(
            f" {k}={v}" for k, v in (("filtered", filtered), ("duplicates", duplicates), ("failed", failed)) if v
        )
        self.line(
            f"op {op_index} {op_name} done ({n}/{total}): {rows_in:,} -> {rows_out:,} rows{extra} in "
            f"{duration:.3f}s ({rate}){eta}"
        )

    def partition_done(self, rows_out: int) -> None:
        self.line(f"partition segment done: {rows_out:,} rows out in {time.perf_counter() - self._t_partition:.3f}s")

    def partition_failed(self, error: str) -> None:
        self.line(f"FAILED: {error}")
