"""JSON documents of the job directory parsed once per process and version, handed out read-only.

Why: ``checkpoints/partitioning_info.json`` of a 10,000-partition job is megabytes, and every reader
(each ``JobContext``, the summary builder, the sensor's failure message, every page and partition
panel of the job view) parsed it again.  The file is written by a job's validate task with an
atomic rename, so a version is named by the file's inode, modification time and size: a new write
is a new inode.  A document is cached only once its
file is ``SETTLE_S`` old, so a writer that rewrote a file in place within one clock tick (same
inode, same mtime, same size) is never answered with the old content.  Object stores have no
cheap, exact version here: there every read parses afresh.

One parsed document is shared by every caller of the process, so it is handed out frozen:
:class:`FrozenDict` and :class:`FrozenList` are a ``dict`` and a ``list`` (JSON encoders, ``dict(d,
k=v)``, iteration and look-ups work unchanged) whose mutating methods raise ``TypeError``.  A
caller that needs a mutable document takes ``copy.deepcopy(doc)`` (plain dicts and lists);
pickling (Ray) also yields plain ones.  Writers (``engine/job/setup.py``, the resume proof) read
the file themselves with ``layout.read_json``, never through this cache.
"""

from __future__ import annotations

import os
import threading
import time
from collections import OrderedDict

from airflow_provider_dj.core import fs as storage
from airflow_provider_dj.engine.jobdir.layout import PARTITIONING_INFO, loads_json, read_json

#: A file is cached once its modification time is this many seconds old (see the module's docstring).
SETTLE_S = 2.0
#: Documents one cache keeps (least recently read dropped first).
MAX_DOCS = 8

_READ_ONLY = "is read-only: it is shared by every reader of this process; copy.deepcopy() it for a mutable copy"


def _refuse(self, *_args, **_kwargs):
    raise TypeError(f"this {type(self).__name__} {_READ_ONLY}")


class FrozenDict(dict):
    """A ``dict`` whose mutating methods raise ``TypeError``; deepcopy and pickle give a plain dict."""

    __slots__ = ()
    __setitem__ = __delitem__ = __ior__ = _refuse
    clear = pop = popitem = setdefault = update = _refuse

    def __deepcopy__(self, memo) -> dict:
        return thaw(self)

    def __copy__(self) -> dict:
        return dict(self)

    def __reduce__(self):
        return (dict, (dict(self),))


class FrozenList(list):
    """A ``list`` whose mutating methods raise ``TypeError``; deepcopy and pickle give a plain list."""

    __slots__ = ()
    __setitem__ = __delitem__ = __iadd__ = __imul__ = _refuse
    append = extend = insert = pop = remove = clear = sort = reverse = _refuse

    def __deepcopy__(self, memo) -> list:
        return thaw(self)

    def __copy__(self) -> list:
        return list(self)

    def __reduce__(self):
        return (list, (list(self),))


_CONTAINERS = (dict, list)


def freeze(obj):
    """``obj`` (parsed JSON) with every dict and list replaced by its frozen kind."""
    if isinstance(obj, dict):
        return FrozenDict({k: (freeze(v) if isinstance(v, _CONTAINERS) else v) for k, v in obj.items()})
    if isinstance(obj, list):
        return FrozenList([freeze(v) if isinstance(v, _CONTAINERS) else v for v in obj])
    return obj


def thaw(obj):
    """A plain, mutable deep copy of a (frozen or not) JSON document."""
    if isinstance(obj, dict):
        return {k: thaw(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [thaw(v) for v in obj]
    return obj


class DocCache:
    """``read(path)``: the frozen JSON document at ``path``, parsed once per version of the file."""

    def __init__(self, max_docs: int = MAX_DOCS) -> None:
        self._docs: OrderedDict[str, tuple[tuple[int, int, int], object]] = OrderedDict()
        self._max_docs = max_docs
        self._lock = threading.Lock()

    def read(self, path: str):
        """Raises FileNotFoundError when absent and ValueError when it is not JSON, as ``read_json`` does."""
        if storage.is_url(path):
            return freeze(read_json(path))
        with open(path, "rb") as fh:  # the version and the bytes come from the same open file
            st = os.fstat(fh.fileno())
            key = (st.st_ino, st.st_mtime_ns, st.st_size)
            with self._lock:
                entry = self._docs.get(path)
                if entry is not None and entry[0] == key:
                    self._docs.move_to_end(path)
                    return entry[1]
            doc = freeze(loads_json(fh.read()))
        if time.time_ns() - st.st_mtime_ns > SETTLE_S * 1e9:
            with self._lock:
                self._docs[path] = (key, doc)
                self._docs.move_to_end(path)
                while len(self._docs) > self._max_docs:
                    self._docs.popitem(last=False)
        return doc


#: The process's cache.
shared = DocCache()


def read_partitioning_info(job_dir: str):
    """The job's ``partitioning_info.json``, frozen and shared (see the module's docstring)."""
    return shared.read(storage.join(job_dir, *PARTITIONING_INFO.split("/")))
