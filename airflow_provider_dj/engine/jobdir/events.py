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

Each event type's fields are declared in ``EVENT_FIELDS`` (beside ``COMMON_FIELDS``, which every event
carries, and ``TASK_FIELDS``, naming who wrote it); a field whose value is unknown is absent, never null.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from airflow_provider_dj.core import fs as storage
from airflow_provider_dj.engine.jobdir.layout import EVENTS_PREFIX, loads_json


@dataclass(frozen=True)
class EventFields:
    """The fields an event type carries besides ``COMMON_FIELDS`` and ``TASK_FIELDS``: ``required`` in every
    event of the type, ``optional`` when known (a field whose value is None is left out of the event)."""

    required: frozenset[str]
    optional: frozenset[str] = frozenset()


def _fields(required: str, optional: str = "") -> EventFields:
    return EventFields(frozenset(required.split()), frozenset(optional.split()))


#: Written by ``EventLog.emit`` into every event.
COMMON_FIELDS = frozenset({"event_type", "timestamp", "time_utc", "job_id", "writer", "seq"})
#: Who wrote an event, when known: the Airflow task instance (operators/base.py's ``event_defaults``);
#: ``try_number`` also for a partition's run outside Airflow; ``step`` the DAG task's step that the local
#: runner ran (engine/runner/local.py).
TASK_FIELDS = frozenset(
    {"airflow_dag_id", "airflow_run_id", "airflow_task_id", "airflow_map_index", "try_number", "step"}
)
_OP = "op_index op_name"
_PARTITION = "partition_id segment"
#: Every event type and its fields; tests/unit/engine/test_event_fields.py checks the events of real job
#: directories against it.  A new event (or field) is declared here, where readers look it up.
EVENT_FIELDS: dict[str, EventFields] = {
    "job_start": _fields("status partitions input_rows"),
    "job_complete": _fields("status partitions input_rows output_rows duration summary_path", "checksum"),
    "job_failed": _fields("status summary_path", "duration error_message"),
    "job_stopped": _fields("status summary_path", "duration error_message"),
    "plan_created": _fields("partitions input_rows how", "duration"),
    # group size, actor plan, concurrency (engine/planning/decisions.py)
    "execution_planning": _fields(
        "execution_group_size max_concurrent_partitions max_in_flight_per_group concurrent_groups", "actor_plan"
    ),
    "validation_step": _fields("step name status", "detail duration accepted_changes hashed_bytes completed"),
    "partition_start": _fields(f"{_PARTITION} status start_row end_row input_rows"),
    "partition_complete": _fields(f"{_PARTITION} status output_rows", "duration ops_run"),
    "partition_failed": _fields(f"{_PARTITION} status error_message", "reason"),
    "partition_resume": _fields(f"{_PARTITION} status resumed_after_op", _OP),
    "partition_stopped": _fields(f"{_PARTITION} status force", f"{_OP} after_op note"),
    # the watchdog cancelled a partition with no progress (engine/execution/watchdog.py)
    "partition_stalled": _fields(
        f"{_PARTITION} status stall_timeout_s stalls action", f"{_OP} last_heartbeat rows_in rows_done stage"
    ),
    "op_start": _fields(f"partition_id {_OP} status input_rows"),
    "op_complete": _fields(f"partition_id {_OP} status input_rows output_rows duration", "filtered failed duplicates"),
    "op_failed": _fields(f"partition_id {_OP} status error_message", "input_rows failed reason"),
    # a kept (stateful) op instance was created and set up, with its duration
    "op_init": _fields(f"segment {_OP} status duration pid", "partition_id actor_index"),
    "checkpoint_save": _fields(f"partition_id {_OP} checkpoint_path output_rows", "delta_of_op note"),
    "checkpoint_load": _fields(f"partition_id {_OP} checkpoint_path output_rows"),
    # a partition started from an earlier job's checkpoint (engine/execution/reuse.py)
    "checkpoint_reused": _fields(
        f"{_PARTITION} {_OP} status output_rows source_job source_partition_id bytes whole_segment", "keys_reused"
    ),
    # a committed checkpoint failed its integrity checks on load (engine/storage/checkpoints.py)
    "checkpoint_rejected": _fields(f"partition_id {_OP} checkpoint_path store error_message"),
    "global_op_start": _fields(f"{_OP} partitions"),
    "global_op_complete": _fields(f"{_OP} status", "input_rows output_rows duplicates history_duplicates duration"),
    # a global op resolved in key shards, its stages' times (engine/execution/global_shards.py)
    "global_op_shards": _fields(f"{_OP} key_shards node_shards edges durations"),
    "export_start": _fields("export_path partitions"),
    "export_complete": _fields(
        "export_path output_rows duration", "checksum manifest shards parts_linked_as_shards serialized_in_parallel"
    ),
    "stop_requested": _fields("status force requested_by", "ray_jobs"),
    "stop_cleared": _fields("status note"),
    # an expensive op's batch committed to its cursor (engine/execution/batch_cursor.py)
    "batch_commit": _fields(
        f"partition_id {_OP} batch num_batches start_row end_row input_rows output_rows failed rows_done "
        "rows_total duration",
        "rows_per_s eta_s",
    ),
    # an expensive op resumed from its batch cursor
    "batch_resume": _fields(f"partition_id {_OP} committed_batches next_row input_rows", "discarded_reason"),
    # an actor of a group's pool started (engine/execution/actor_pool.py)
    "actor_start": _fields("segment actor_index pid duration status"),
    # the review gate's bounds checked before export (engine/job/review.py)
    "review_decided": _fields("status", "crossed previous_job_id"),
    # the review's answer: approved, rejected or timed out
    "review_answered": _fields("status", "responded_by"),
}
EVENT_TYPES = frozenset(EVENT_FIELDS)

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
