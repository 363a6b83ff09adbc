"""Machine-readable event log: ``{job}/events_<host>_<pid>.jsonl``.

Many writers run at once (Airflow tasks, Ray workers on several nodes), so
each process writes its own file: no two writers ever append to the same
file, so lines cannot interleave.  Each event is one ``write`` of one
complete line; a writer killed mid-write can leave at most a torn last
line, which readers skip (a later writer that reuses the file — same host,
recycled pid — first terminates the torn line so it cannot swallow the
next event).  Readers merge all files ordered by (timestamp, writer, seq):
``seq`` counts events per writer, so two events of one writer in the same
clock tick keep their order.  On an object store (no append) each EventLog
instance owns ``events_<host>_<pid>-<token>-<part>.jsonl`` objects and
re-PUTs its object whole per event (docs/object_store.md).

A full disk fails ``emit`` with ``storage.StorageFullError`` naming the file
(so the task fails with a clear message rather than running on without its
record), and a line the disk could not take whole is cut off again, so the
file never holds a torn line written by a live writer.

Fields every event may carry (absent when unknown, never null):
``event_type``, ``timestamp`` (epoch s), ``time_utc`` (ISO 8601),
``job_id``, ``writer``, ``seq``, ``partition_id``, ``segment``,
``op_index``, ``op_name``, ``status``, ``duration`` (s), ``input_rows``,
``output_rows``, ``filtered``, ``duplicates``, ``failed``,
``error_message``, ``try_number``, ``airflow_dag_id``, ``airflow_run_id``,
``airflow_task_id``, ``airflow_map_index``, ``checkpoint_path``, ``store``
(which checkpoint store a ``checkpoint_rejected`` event is about).
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
import uuid
from datetime import datetime, timezone
from typing import Any

from airflow_provider_dj.core import fs as storage
from airflow_provider_dj.engine.jobdir.layout import EVENTS_PREFIX, loads_json

EVENT_TYPES = frozenset(
    {
        "job_start",
        "job_complete",
        "job_failed",
        "partition_start",
        "partition_complete",
        "partition_failed",
        "partition_resume",
        "op_start",
        "op_complete",
        "op_failed",
        "checkpoint_save",
        "checkpoint_load",
        "checkpoint_reused",  # a partition started from an earlier job's checkpoint (engine/execution/reuse.py)
        "checkpoint_rejected",  # a committed checkpoint failed its integrity checks on load (engine/storage/checkpoints.py)
        "plan_created",
        "execution_planning",  # group size, actor plan, concurrency (engine/planning/decisions.py)
        "validation_step",
        "global_op_start",
        "global_op_complete",
        "global_op_shards",  # a global op resolved in key shards, its stages' times (engine/execution/global_shards.py)
        "export_start",
        "export_complete",
        "stop_requested",
        "job_stopped",
        "partition_stopped",
        "stop_cleared",
        "batch_commit",  # an expensive op's batch committed to its cursor (engine/execution/batch_cursor.py)
        "batch_resume",  # an expensive op resumed from its batch cursor
        "actor_start",  # an actor of a group's pool started (engine/execution/actor_pool.py)
        "partition_stalled",  # the watchdog cancelled a partition with no progress (engine/execution/watchdog.py)
        "review_decided",  # the review gate's bounds checked before export (engine/job/review.py)
        "review_answered",  # the review's answer: approved, rejected or timed out
        "op_init",  # a kept (stateful) op instance was created and set up, with its duration
    }
)

_lock = threading.Lock()
# Object stores: an event log object is rewritten whole per event, so it is capped (docs/object_store.md).
REMOTE_ROLL_BYTES = 256 * 1024


class EventLog:
    def __init__(self, job_dir: str, job_id: str, writer: str | None = None, defaults: dict | None = None) -> None:
        self.job_dir = job_dir
        self.job_id = job_id
        host = socket.gethostname().replace("_", "-")
        self.writer = writer or f"{host}_{os.getpid()}"
        self.path = storage.join(job_dir, f"{EVENTS_PREFIX}{self.writer}.jsonl")
        self.defaults = dict(defaults or {})
        self._local = not storage.is_url(job_dir)
        self._seq = 0
        self._checked_tail = False
        if not self._local:
            # Object stores have no append, and several EventLog instances of one
            # process would overwrite each other's object: each instance owns
            # objects of its own, events_<writer>-<token>-<part>.jsonl.
            self._token = uuid.uuid4().hex[:8]
            self._part = 0
            self._remote_buf = b""
            self.path = self._remote_path()

    def emit(self, event_type: str, **fields: Any) -> dict:
        if event_type not in EVENT_TYPES:
            raise ValueError(f"unknown event type {event_type!r}")
        now = time.time()
        event = {
            "event_type": event_type,
            "timestamp": now,
            "time_utc": datetime.fromtimestamp(now, tz=timezone.utc).isoformat(),
            "job_id": self.job_id,
            "writer": self.writer,
            **self.defaults,
            **{k: v for k, v in fields.items() if v is not None},
        }
        with _lock:
            self._seq += 1
            event["seq"] = self._seq
            line = (json.dumps(event, default=str, ensure_ascii=False) + "\n").encode()
            what = f"the {event_type} event to the job's event log"
            if self._local:
                # storage.append_bytes: one write, cut back on failure, a full disk named as such.
                storage.append_bytes(
                    self.path, line, what=what, prefix_fn=None if self._checked_tail else _terminate_torn_tail
                )
                self._checked_tail = True
            else:
                self._append_remote(line, what)
        return event

    def _remote_path(self) -> str:
        return storage.join(self.job_dir, f"{EVENTS_PREFIX}{self.writer}-{self._token}-{self._part:04d}.jsonl")

    def _append_remote(self, line: bytes, what: str | None = None) -> None:
        """Append on an object store: re-PUT this instance's object whole (a PUT is atomic,
        so a reader sees the old or the new object, never a torn line).  Only this instance
        writes the object, so its content is kept here and nothing is read back; past
        REMOTE_ROLL_BYTES a new part starts, so one event never costs more than one bounded PUT."""
        if self._remote_buf and len(self._remote_buf) + len(line) > REMOTE_ROLL_BYTES:
            self._part += 1
            self.path = self._remote_path()
            self._remote_buf = b""
        data = self._remote_buf + line
        storage.atomic_write_bytes(self.path, data, what=what)
        self._remote_buf = data


def _terminate_torn_tail(fd: int) -> bytes:
    """A newline to prepend when the file ends mid-line (a writer killed mid-write)."""
    end = os.lseek(fd, 0, os.SEEK_END)
    if end == 0:
        return b""
    return b"" if os.pread(fd, 1, end - 1) == b"\n" else b"\n"


def write_buffered(log: "EventLog", events: list[dict]) -> None:
    """Write events collected before the job directory could be touched (resume validation)."""
    for ev in events:
        fields = {k: v for k, v in ev.items() if k not in ("event_type", "timestamp")}
        log.emit(ev["event_type"], **fields)


def iter_event_files(job_dir: str) -> list[str]:
    return [
        storage.join(job_dir, n)
        for n in storage.listdir(job_dir)
        if n.startswith(EVENTS_PREFIX) and n.endswith(".jsonl")
    ]


def parse_event_lines(data: bytes, event_type: str | None = None) -> list[dict]:
    """Whole events of one writer's file.  A line counts only if it is
    newline-terminated and parses as a JSON object: a torn last line (writer
    killed mid-write) is skipped even if its prefix happens to parse.

    ``event_type``: parse only lines that can hold an event of that type (the rest are skipped
    unparsed; the caller still checks ``event_type`` on what comes back).  Every type in
    :data:`EVENT_TYPES` is plain ASCII that no JSON writer escapes, so an event of that type always
    holds the quoted name verbatim, and looking for it first never drops one."""
    out: list[dict] = []
    needle = f'"{event_type}"'.encode() if event_type is not None else None
    lines = data.split(b"\n")
    for line in lines[:-1]:  # the piece after the last newline is torn (or empty)
        if needle is not None and needle not in line:
            continue
        if not line.strip():
            continue
        try:
            ev = loads_json(line)
        except ValueError:
            continue
        if isinstance(ev, dict) and "event_type" in ev:
            out.append(ev)
    return out


def event_order(ev: dict) -> tuple:
    """The sort key that merges several writers' events into one order: time, then writer, then sequence."""
    return (ev.get("timestamp", 0), str(ev.get("writer", "")), ev.get("seq", 0))


def read_events(job_dir: str, event_type: str | None = None, since: float | None = None) -> list[dict]:
    """All events of a job, merged across writers, ordered by time; torn lines skipped.

    ``event_type`` keeps one type; ``since`` keeps events at or after an epoch time.
    """
    events: list[dict] = []
    try:
        paths = iter_event_files(job_dir)
    except FileNotFoundError:
        return []
    for path in paths:
        try:
            data = storage.read_bytes(path)
        except FileNotFoundError:
            continue
        for ev in parse_event_lines(data, event_type):
            if event_type is not None and ev.get("event_type") != event_type:
                continue
            if since is not None and ev.get("timestamp", 0) < since:
                continue
            events.append(ev)
    events.sort(key=event_order)
    return events
