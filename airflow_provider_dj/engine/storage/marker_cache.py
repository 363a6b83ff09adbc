"""Checkpoint commit markers read again and again by one long-lived reader (the job view, the monitor).

Why: the summary builder reads the latest commit marker of every partition, so a 10,000-partition job
costs 10,000 file reads on every page of the job view.  A marker is committed by an atomic rename into
its op's directory, which changes the directory's modification time, so while a directory's mtime
stays the same its markers do too.  A directory changed within ``SETTLE_S`` is read afresh every time:
a rename in the same clock tick as the last look would leave the mtime unchanged.  Object stores have
no directory mtime: there every read goes to the store.  Readers only: what a job writes
(its summary, a resume) never goes through this cache.
"""

from __future__ import annotations

import os
import threading
import time
from collections import OrderedDict

from airflow_provider_dj.core import fs as storage

#: A directory's markers are trusted from the cache once its mtime is this many seconds old.
SETTLE_S = 2.0
#: Op directories whose markers one cache keeps (a page shows one job: a few ops).
MAX_DIRS = 32


class MarkerCache:
    """``reader(store)``: a ``read_marker(op_index, op_name, partition_id)`` that reuses what it read."""

    def __init__(self, max_dirs: int = MAX_DIRS) -> None:
        self._dirs: OrderedDict[str, tuple[int, bool, dict]] = OrderedDict()
        self._max_dirs = max_dirs
        self._lock = threading.Lock()

    def _markers_of(self, op_dir: str) -> dict | None:
        """The cached markers of ``op_dir`` for this look (an empty dict to fill), None: do not cache."""
        if storage.is_url(op_dir):
            return None
        try:
            mtime = os.stat(op_dir).st_mtime_ns
        except FileNotFoundError:
            return None
        with self._lock:
            entry = self._dirs.pop(op_dir, None)
            if entry is None or entry[0] != mtime or not entry[1]:
                settled = time.time_ns() - mtime > SETTLE_S * 1e9
                entry = (mtime, settled, {})
            self._dirs[op_dir] = entry
            while len(self._dirs) > self._max_dirs:
                self._dirs.popitem(last=False)
            return entry[2]

    def reader(self, store):
        """A marker reader for one build: each op directory is looked at once."""
        looked: dict[str, dict | None] = {}

        def read_marker(op_index: int, op_name: str, partition_id: int) -> dict | None:
            op_dir = store.op_dir(op_index, op_name)
            if op_dir not in looked:
                looked[op_dir] = self._markers_of(op_dir)
            markers = looked[op_dir]
            if markers is None:
                return store.read_marker(op_index, op_name, partition_id)
            if partition_id not in markers:
                markers[partition_id] = store.read_marker(op_index, op_name, partition_id)
            return markers[partition_id]

        return read_marker


#: The process's cache (the api-server's job view).
shared = MarkerCache()
