"""Durable record of paid LLM calls, so no call is ever paid for twice.

Layout: ``{job}/llm_calls/op_<i>_<name>/partition_<p>/calls_<writer>.jsonl``.
One line per completed call (the server answered HTTP 200), keyed by the
input row id and a hash of the full request (model, messages, sampling
parameters).  Before calling, the op looks the key up; a hit replays the
recorded answer.  So a task retry, a UI clear, a resume after a crash or a
re-run of the same job never pays for a call it already made, while a
changed prompt or model hashes differently and is asked anew.

Why per-writer append-only files and not per-batch files: calls finish one
at a time across a thread pool, and a kill between two batch commits would
otherwise forget every call of the unfinished batch — exactly the money the
record exists to save.  Each line is written with one ``write`` on an
``O_APPEND`` descriptor and fsynced before the answer is used; only this
process writes its file, so lines never interleave.  A line carries a
checksum of its payload: a torn or garbled tail (kill -9, power loss) fails
the check and is ignored, so the worst case is paying again for the one
call that was being recorded.

Object stores have no append: there the writer buffers its lines and
rewrites its own object atomically at ``flush()`` (the op flushes after
every batch), so a crash loses at most the record of the current batch.

Invalid answers (empty, failing the regex or schema) are recorded too: the
call was paid for.  Validation runs over the recorded answer, so tightening
a validator re-judges old answers without calling again.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
import uuid
from typing import Any

import xxhash

from airflow_provider_dj.core import fs as storage
from airflow_provider_dj.core.write_roots import check_write

RECORD_DIR = "llm_calls"


def record_dir(job_dir: str, op_index: int, op_name: str, partition_id: int) -> str:
    return storage.join(job_dir, RECORD_DIR, f"op_{op_index:03d}_{op_name}", f"partition_{partition_id:05d}")


def request_hash(body: dict[str, Any]) -> str:
    """Hash of the whole request body (model, messages, parameters), key order irrelevant."""
    canonical = json.dumps(body, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return xxhash.xxh3_128_hexdigest(canonical.encode())


def _checksum(payload: str) -> str:
    return xxhash.xxh3_64_hexdigest(payload.encode())


def encode_line(entry: dict[str, Any]) -> bytes:
    payload = json.dumps(entry, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return (json.dumps({"p": payload, "c": _checksum(payload)}, ensure_ascii=False) + "\n").encode()


def decode_line(line: bytes) -> dict[str, Any] | None:
    """The entry, or None for a torn/garbled line."""
    try:
        outer = json.loads(line)
        payload = outer["p"]
        if not isinstance(payload, str) or outer.get("c") != _checksum(payload):
            return None
        entry = json.loads(payload)
    except (ValueError, KeyError, TypeError):
        return None
    if not isinstance(entry, dict) or "req" not in entry:
        return None
    return entry


def _key(row: int | None, req: str) -> tuple[int | None, str]:
    return (row, req)


class CallRecord:
    """Completed calls of one op on one partition.  ``directory=None``: memory only.

    Thread-safe: the op's worker threads record answers as they arrive.
    """

    def __init__(self, directory: str | None) -> None:
        self.directory = directory
        self._index: dict[tuple[int | None, str], dict[str, Any]] = {}
        self._lock = threading.Lock()
        self._local = directory is not None and not storage.is_url(directory)
        self._pending: list[bytes] = []  # object stores: this writer's lines so far
        self._path: str | None = None
        self.torn_lines = 0
        if directory is not None:
            self._load()

    def __len__(self) -> int:
        return len(self._index)

    def _load(self) -> None:
        assert self.directory is not None
        for name in storage.listdir(self.directory):
            if not (name.startswith("calls_") and name.endswith(".jsonl")):
                continue
            try:
                data = storage.read_bytes(storage.join(self.directory, name))
            except FileNotFoundError:
                continue
            for line in data.split(b"\n"):
                if not line.strip():
                    continue
                entry = decode_line(line)
                if entry is None:
                    self.torn_lines += 1
                    continue
                self._index.setdefault(_key(entry.get("row"), entry["req"]), entry)

    def lookup(self, row: int | None, req: str) -> dict[str, Any] | None:
        with self._lock:
            return self._index.get(_key(row, req))

    def _writer_path(self) -> str:
        if self._path is None:
            host = socket.gethostname().replace("_", "-")
            self._path = storage.join(self.directory, f"calls_{host}_{os.getpid()}_{uuid.uuid4().hex[:8]}.jsonl")
        return self._path

    def add(self, row: int | None, req: str, answer: dict[str, Any]) -> dict[str, Any]:
        """Record a completed call; on a local disk it is durable when this returns."""
        entry = {"row": row, "req": req, "t": round(time.time(), 3), **answer}
        line = encode_line(entry)
        with self._lock:
            if self.directory is not None:
                if self._local:
                    path = self._writer_path()
                    check_write(path)
                    os.makedirs(self.directory, exist_ok=True)
                    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
                    try:
                        os.write(fd, line)
                        os.fsync(fd)
                    finally:
                        os.close(fd)
                else:
                    self._pending.append(line)
            self._index[_key(row, req)] = entry
        return entry

    def flush(self) -> None:
        """Object stores: commit this writer's lines (one atomic PUT).  Local disks: nothing to do."""
        with self._lock:
            if self._local or self.directory is None or not self._pending:
                return
            storage.atomic_write_bytes(self._writer_path(), b"".join(self._pending))
