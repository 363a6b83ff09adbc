"""Machine-readable event log: ``{job}/events_<host>_<pid>.jsonl``.

Many writers run at once (Airflow tasks, Ray workers on several nodes), so
each process writes its own file: no two writers ever append to the same
file, so lines cannot interleave.  Each event is one ``write`` of one
complete line; a writer killed mid-write can leave at most a torn last
line, which readers skip.  Readers merge all files ordered by timestamp.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from datetime import datetime, timezone
from typing import Any

from airflow_provider_dj.engine import storage

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
        "plan_created",
        "validation_step",
        "global_op_start",
        "global_op_complete",
        "export_start",
        "export_complete",
        "stop_requested",
    }
)

_lock = threading.Lock()


class EventLog:
    def __init__(self, job_dir: str, job_id: str, writer: str | None = None, defaults: dict | None = None) -> None:
        self.job_dir = job_dir
        self.job_id = job_id
        host = socket.gethostname().replace("_", "-")
        self.writer = writer or f"{host}_{os.getpid()}"
        self.path = storage.join(job_dir, f"events_{self.writer}.jsonl")
        self.defaults = dict(defaults or {})
        self._local = not storage.is_url(job_dir)

    def emit(self, event_type: str, **fields: Any) -> dict:
        if event_type not in EVENT_TYPES:
            raise ValueError(f"unknown event type {event_type!r}")
        now = time.time()
        event = {
            "event_type": event_type,
            "timestamp": now,
            "time_utc": datetime.fromtimestamp(now, tz=timezone.utc).isoformat(),
            "job_id": self.job_id,
            **self.defaults,
            **{k: v for k, v in fields.items() if v is not None},
        }
        line = (json.dumps(event, default=str, ensure_ascii=False) + "\n").encode()
        with _lock:
            if self._local:
                os.makedirs(self.job_dir, exist_ok=True)
                fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
                try:
                    os.write(fd, line)
                finally:
                    os.close(fd)
            else:
                # Object stores have no append: rewrite this writer's own
                # object (only this process ever writes it).
                try:
                    old = storage.read_bytes(self.path)
                except FileNotFoundError:
                    old = b""
                storage.atomic_write_bytes(self.path, old + line)
        return event


def write_buffered(log: "EventLog", events: list[dict]) -> None:
    """Write events collected before the job directory could be touched (resume validation)."""
    for ev in events:
        fields = {k: v for k, v in ev.items() if k not in ("event_type", "timestamp")}
        log.emit(ev["event_type"], **fields)


def iter_event_files(job_dir: str) -> list[str]:
    return [storage.join(job_dir, n) for n in storage.listdir(job_dir) if n.startswith("events_") and n.endswith(".jsonl")]


def read_events(job_dir: str, event_type: str | None = None) -> list[dict]:
    """All events of a job, merged across writers, ordered by time; torn lines skipped."""
    events: list[dict] = []
    for path in iter_event_files(job_dir):
        try:
            data = storage.read_bytes(path)
        except FileNotFoundError:
            continue
        for line in data.splitlines():
            try:
                ev = json.loads(line)
            except ValueError:
                continue
            if event_type is None or ev.get("event_type") == event_type:
                events.append(ev)
    events.sort(key=lambda e: e.get("timestamp", 0))
    return events
