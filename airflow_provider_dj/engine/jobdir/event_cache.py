"""A job's events read again and again by one long-lived reader, parsing only what was appended.

Why: a 10,000-partition job's event log holds about 100,000 events, and the job view (every page, every
partition panel) and ``dj-airflow monitor`` (every refresh) read all of them each time; parsing them
is most of a page's time.  Each ``events_<writer>.jsonl`` is append-only (one writer, whole lines), so
a reader that remembers how far it parsed each file reads only the bytes added since.  A file that got
shorter (replaced) is read again from its start.  What ``read`` returns is what
``events.read_events`` returns for the same files: whole events in time order, a torn last line
skipped until its writer completes it.  Callers must not change the returned dicts (they are shared
between reads).
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from airflow_provider_dj.core import fs as storage
from airflow_provider_dj.core import gc_pause
from airflow_provider_dj.engine.jobdir.events import event_order, iter_event_files, parse_event_lines

#: Jobs whose events one cache keeps (least recently read dropped first): a page shows one job at a time.
MAX_JOBS = 4


class _FileTail:
    """One events file parsed up to ``offset`` (the byte after its last whole line)."""

    __slots__ = ("offset", "events")

    def __init__(self) -> None:
        self.offset = 0
        self.events: list[dict] = []

    def refresh(self, path: str) -> bool:
        """Parse what was appended since the last call; True when anything changed."""
        size = storage.size(path)
        if size < self.offset:  # replaced by a shorter file: start over
            self.offset, self.events = 0, []
        if size == self.offset:
            return False
        with storage.open_read(path) as fh:
            fh.seek(self.offset)
            data = fh.read(size - self.offset)
        whole = data.rfind(b"\n") + 1  # a torn last line waits for its writer
        if whole == 0:
            return False
        self.events.extend(parse_event_lines(data[:whole]))
        self.offset += whole
        return True


class _JobEvents:
    __slots__ = ("tails", "merged")

    def __init__(self) -> None:
        self.tails: dict[str, _FileTail] = {}
        self.merged: list[dict] | None = None


class EventCache:
    """``read(job_dir)``: the job's events, in time order, parsing only appended bytes."""

    def __init__(self, max_jobs: int = MAX_JOBS) -> None:
        self._jobs: OrderedDict[str, _JobEvents] = OrderedDict()
        self._max_jobs = max_jobs
        self._lock = threading.Lock()

    def read(self, job_dir: str) -> list[dict]:
        with self._lock, gc_pause.paused():  # a first read builds ~10 dicts a partition
            job = self._jobs.pop(job_dir, None) or _JobEvents()
            self._jobs[job_dir] = job
            while len(self._jobs) > self._max_jobs:
                self._jobs.popitem(last=False)
            try:
                paths = iter_event_files(job_dir)
            except FileNotFoundError:
                paths = []
            changed = set(job.tails) != set(paths)
            job.tails = {p: job.tails.get(p) or _FileTail() for p in paths}
            for path, tail in job.tails.items():
                try:
                    changed = tail.refresh(path) or changed
                except FileNotFoundError:
                    continue
            if changed or job.merged is None:
                job.merged = sorted((e for t in job.tails.values() for e in t.events), key=event_order)
            return list(job.merged)


#: The process's cache (the api-server's job view, one ``dj-airflow monitor``).
shared = EventCache()
