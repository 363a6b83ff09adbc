"""Partition heartbeats: ``heartbeats/partition_NNNNN.json``, what a running partition is doing now.

A partition task (a Ray task, an actor's call, a local worker process) keeps one small JSON file up to
date while it runs: where it is (the stage, the op, rows done in the op) and two times.  ``beat_at``
moves at every write, so it says the process is alive; ``progress_seq`` moves only when the work does
(an op starts or ends, an expensive op commits a batch, a checkpoint is loaded).  The watchdog
(engine/execution/watchdog.py) reads ``progress_seq`` with its own clock, so clocks that differ
between nodes do not matter, and ``run`` (a token per task start) tells this run's file from one an
earlier try left behind.

Written by a daemon thread: at most once a second when the progress changed, else every
``heartbeat_interval_s`` (a setting).  The writes are atomic for readers but not fsynced, and a write
that fails is logged and skipped: a heartbeat is advice about the work, never a reason to fail it.
One writer per file: one task works on a partition at a time (the runner lock).
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
import uuid
from typing import Any

from airflow_provider_dj import settings
from airflow_provider_dj.core import fs as storage
from airflow_provider_dj.engine.jobdir.layout import heartbeat_file

log = logging.getLogger(__name__)

#: The shortest time between two writes when only the progress changed (many small ops in a row).
MIN_WRITE_GAP_S = 1.0


def heartbeat_path(job_dir: str, partition_id: int) -> str:
    return storage.join(job_dir, *heartbeat_file(partition_id).split("/"))


def read_heartbeat(job_dir: str, partition_id: int) -> dict | None:
    """The partition's latest heartbeat, or None when it has none (or it cannot be read now)."""
    try:
        return json.loads(storage.read_bytes(heartbeat_path(job_dir, partition_id)))
    except (FileNotFoundError, ValueError, OSError):
        return None


class PartitionHeartbeat:
    """The heartbeat of one partition task: ``start``, then ``progress`` as the work moves, then ``stop``."""

    def __init__(
        self,
        job_dir: str,
        partition_id: int,
        *,
        segment: int,
        try_number: int | None,
        start_row: int,
        end_row: int,
        interval_s: float | None = None,
    ) -> None:
        self.path = heartbeat_path(job_dir, partition_id)
        self.interval_s = float(settings.get("heartbeat_interval_s")) if interval_s is None else interval_s
        now = time.time()
        self._state: dict[str, Any] = {
            "partition_id": partition_id,
            "segment": segment,
            "try_number": try_number,
            "run": uuid.uuid4().hex[:12],
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "start_row": start_row,
            "end_row": end_row,
            "started_at": now,
            "beat_at": now,
            "progress_at": now,
            "progress_seq": 0,
            "stage": "starting",
            "op_index": None,
            "op_name": None,
            "rows_in": None,
            "rows_done": None,
            "ended": None,
        }
        self._lock = threading.Lock()
        self._changed = True
        self._last_write = 0.0
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> PartitionHeartbeat:
        self._write()
        self._thread = threading.Thread(target=self._beat, name=f"dj-heartbeat-{self.path[-16:]}", daemon=True)
        self._thread.start()
        return self

    def progress(
        self,
        stage: str,
        *,
        op_index: int | None = None,
        op_name: str | None = None,
        rows_in: int | None = None,
        rows_done: int | None = None,
    ) -> None:
        """The work moved: record where it is now (written within about a second)."""
        with self._lock:
            self._state.update(
                stage=stage,
                op_index=op_index,
                op_name=op_name,
                rows_in=rows_in,
                rows_done=rows_done,
                progress_at=time.time(),
                progress_seq=self._state["progress_seq"] + 1,
            )
            self._changed = True

    def stop(self, outcome: str) -> None:
        """The task ended (``outcome``: success, failed, stopped): one last write, the thread ends."""
        self._stopped.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        with self._lock:
            self._state["ended"] = outcome
            self._changed = True
        self._write()

    def __enter__(self) -> PartitionHeartbeat:
        return self.start()

    def __exit__(self, exc_type, exc, tb) -> None:
        from airflow_provider_dj.engine.jobdir.stop_control import StopRequested

        if exc_type is None:
            self.stop("success")
        else:
            self.stop("stopped" if issubclass(exc_type, StopRequested) else "failed")

    def _beat(self) -> None:
        tick = min(MIN_WRITE_GAP_S, self.interval_s)
        while not self._stopped.wait(tick):
            since = time.monotonic() - self._last_write
            if since >= self.interval_s or (self._changed and since >= MIN_WRITE_GAP_S):
                self._write()

    def _write(self) -> None:
        with self._lock:
            self._state["beat_at"] = time.time()
            data = json.dumps(self._state).encode()
            self._changed = False
        self._last_write = time.monotonic()
        try:
            storage.atomic_write_bytes(self.path, data, "a partition heartbeat", durable=False)
        except OSError as exc:  # a full disk or a lost mount: the work goes on, the watchdog sees no beat
            log.warning("could not write the heartbeat %s: %s", self.path, exc)
