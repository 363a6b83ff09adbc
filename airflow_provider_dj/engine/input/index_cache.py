"""Planning's results for an input file that has not changed since an earlier job of the same work dir.

Planning reads every input byte twice (the row index, then each partition's content hash).  A nightly
job over a growing folder (reuse across jobs) would re-read all of last night's files only to learn
what it already knew, so it costs O(corpus), not O(what is new).  This cache keeps, per input file,
the row count, the stream length, the byte offset of each partition boundary row and each
single-file partition's content hash, keyed by the file's identity: its path, device, inode, size,
mtime and ctime (nanoseconds).

Why that identity can stand in for reading the bytes (and where it cannot):

* Every change to a file's bytes through the file system updates its ctime, and no user-level call
  can set ctime back (``touch``, ``utime``, ``cp -p``, ``rsync -t`` restore mtime, but then ctime is
  the moment they ran).  A file replaced by rename has another inode, or, if the number is reused, a
  new ctime.  So a file whose six values are unchanged holds the bytes it held when they were read.
* **Racy writes**: a timestamp has a granularity (a clock tick; two seconds on some file systems).  A
  write in the same tick as the stat that was cached would leave the stat unchanged.  An entry is
  therefore written only for a file whose mtime and ctime are at least ``RACY_MARGIN_NS`` older than
  the moment it was stat'ed before reading, and whose stat was the same before and after reading it
  (git's index handles racy files the same way).  A file written just before the job is read in full,
  and cached by the next job.
* **Not covered**: object-store and other URL inputs (no inode, no ctime: never cached), bit rot or a
  raw write to the block device (no timestamp changes: an unchanged identity then means the content
  the earlier job saw), a wall clock set back by more than the margin, and file systems that fake
  ctime.  ``DJ_INPUT_INDEX_CACHE=0`` turns the cache off for such a setup; every byte is then read
  and hashed as before.

A partition that is computed (not reused) still reads its input bytes and checks them against the
planned hash, so a stale entry cannot put wrong rows into a computed partition: the job fails with
"input changed" instead.  Entries are hints, written atomically without fsync: a lost or damaged one
(its own xxh3 is checked) only costs reading the file again.
"""

from __future__ import annotations

import json
import logging
import os
import time

import xxhash

from airflow_provider_dj.core import fs as storage
from airflow_provider_dj.engine.input.sources import InputFile

log = logging.getLogger(__name__)

#: 2: a partition hash is cached only for a partition whose rows name no media file (engine/input/media.py),
#: so a cached hash never stands in for an image's bytes; entries of version 1 may and are not read.
INDEX_CACHE_VERSION = 2
#: A file modified within this long before it was stat'ed is not cached (see the module docstring).
RACY_MARGIN_NS = 2_000_000_000


def file_identity(path: str) -> dict | None:
    """The stat values that change with every write to ``path``; None where they cannot be trusted."""
    if storage.is_url(path):
        return None
    try:
        st = os.stat(path)
    except OSError:
        return None
    return {
        "dev": st.st_dev,
        "ino": st.st_ino,
        "size": st.st_size,
        "mtime_ns": st.st_mtime_ns,
        "ctime_ns": st.st_ctime_ns,
    }


class InputIndexCache:
    """``{work_dir}/_reuse/input_index``: one small JSON file per input path (engine/jobdir/layout.py)."""

    def __init__(self, root: str) -> None:
        self.root = root
        self._seen: dict[str, tuple[dict, int]] = {}  # path -> (identity before reading, stat time)
        self._entries: dict[str, dict] = {}  # path -> the entry that matched this job's file

    def _path(self, input_path: str) -> str:
        return os.path.join(self.root, xxhash.xxh3_128_hexdigest(os.path.abspath(input_path).encode()) + ".json")

    def observe(self, f: InputFile) -> dict | None:
        """Stat ``f`` before it is read; return the cached entry if it still describes the file."""
        now = time.time_ns()
        ident = file_identity(f.path)
        if ident is None:
            return None
        self._seen[f.path] = (ident, now)
        try:
            with open(self._path(f.path), "rb") as fh:
                doc = json.loads(fh.read())
            body = doc["entry"]
            if doc.get("xxh3") != xxhash.xxh3_128_hexdigest(json.dumps(body, sort_keys=True).encode()):
                return None
        except (OSError, ValueError, KeyError, TypeError):
            return None
        if (
            body.get("version") != INDEX_CACHE_VERSION
            or body.get("path") != os.path.abspath(f.path)
            or body.get("identity") != ident
            or body.get("format") != f.format
            or body.get("compression") != f.compression
        ):
            return None
        self._entries[f.path] = body
        return body

    def record(self, f: InputFile, offsets: dict[int, int], hashes: dict[str, list]) -> bool:
        """After planning: keep what planning learnt about ``f`` for the next job, if ``f`` is safe to cache."""
        seen = self._seen.get(f.path)
        if seen is None:
            return False
        ident, stat_time = seen
        if max(ident["mtime_ns"], ident["ctime_ns"]) > stat_time - RACY_MARGIN_NS:
            return False  # modified too recently to trust its timestamps (racy)
        if file_identity(f.path) != ident:
            return False  # changed while it was read: this job's own hashes will catch that
        old = self._entries.get(f.path) or {}
        body = {
            "version": INDEX_CACHE_VERSION,
            "path": os.path.abspath(f.path),
            "identity": ident,
            "format": f.format,
            "compression": f.compression,
            "num_rows": f.num_rows,
            "stream_len": f.stream_len,
            "row_group_rows": f.row_group_rows,
            "offsets": {**old.get("offsets", {}), **{str(k): int(v) for k, v in offsets.items()}},
            "hashes": {**old.get("hashes", {}), **hashes},
        }
        if body == old:
            return True
        doc = {"entry": body, "xxh3": xxhash.xxh3_128_hexdigest(json.dumps(body, sort_keys=True).encode())}
        try:
            storage.atomic_write_bytes(self._path(f.path), json.dumps(doc).encode(), durable=False)
        except OSError as exc:  # a hint: without it the next job reads the file again
            log.info("could not cache the input index of %s: %s", f.path, exc)
            return False
        return True


def segment_key(seg: dict) -> str:
    """A partition's place within one file, as the cache keys its hash (bytes for JSONL, rows for Parquet)."""
    if "byte_start" in seg:
        return f"b{seg['byte_start']}-{seg['byte_end']}"
    return f"r{seg['row_start']}-{seg['row_end']}"
