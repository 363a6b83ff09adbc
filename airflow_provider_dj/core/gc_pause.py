"""Pause Python's cyclic garbage collector while a reader builds a large, acyclic result.

Why: the job view of a 10,000-partition job builds tens of thousands of dicts and lists per page
(events, partition states, grid rows).  Each burst of allocations triggers full collections that
scan the whole heap of a long-lived process (an api-server holds some 350,000 tracked objects:
Airflow, and the job view's own caches); profiled, they were a third of a page's time.  What
these readers build holds no reference cycles, so reference counting frees all of it; pausing
only delays the collection of cycles other threads make meanwhile until the next automatic
collection after the pause.

Nested and concurrent pauses share one count: the collector runs again when the last one ends,
and only if it was enabled when the first one began (a process that disabled it keeps it off).
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_lock = threading.Lock()
_depth = 0
_reenable = False


@contextmanager
def paused() -> Iterator[None]:
    """Automatic garbage collection off for the block (see the module's docstring)."""
    global _depth, _reenable
    with _lock:
        if _depth == 0:
            _reenable = gc.isenabled()
            gc.disable()
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _reenable:
                gc.enable()
