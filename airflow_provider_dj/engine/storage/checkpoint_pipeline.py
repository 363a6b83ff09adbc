"""Mid-segment checkpoints written in the background, while the next op runs.

A checkpoint after op ``i`` is needed only by a *later* resume, never by op
``i + 1``, which works on the same immutable Arrow table in memory.  So the
segment runner hands the write (encode, checksum, atomic write, commit
marker) to one writer thread and goes on: Parquet encoding and file I/O
release the GIL, and the op's kernels mostly do too, so the two overlap.
Measured effect: docs/benchmarks_gathered.md ("Checkpoint cost per strategy").

What stays true (DESIGN invariants):

* A checkpoint is still either absent or complete: the write is the same
  atomic write plus commit marker; only *when* it happens moves.
* Order: at most one write is in flight; the next one waits for it, so
  checkpoints commit in op order and memory holds at most one extra table.
* Nothing is skipped at a boundary that promises a committed checkpoint: a
  stop request, an injected fault, an op failure and the end of the segment
  all :meth:`flush` first, so a resume restarts exactly where it would have
  with synchronous writes.  A crash (kill -9) can lose only the write in
  flight; the resume then starts from the checkpoint before it.
* A failed write fails the segment at the next op boundary (or flush), with
  the original error.

``DJ_CHECKPOINT_PIPELINE=0`` writes every checkpoint synchronously.
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Callable

from airflow_provider_dj import settings

log = logging.getLogger(__name__)

_writer: ThreadPoolExecutor | None = None
_writer_lock = threading.Lock()


def _shared_writer() -> ThreadPoolExecutor:
    """One writer thread per process (a Ray worker runs many partitions, one after another)."""
    global _writer
    with _writer_lock:
        if _writer is None:
            _writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="dj-checkpoint-writer")
        return _writer


def pipeline_enabled() -> bool:
    return settings.get("checkpoint_pipeline")


class CheckpointPipeline:
    """The checkpoint writes of one segment run of one partition."""

    def __init__(self, enabled: bool | None = None) -> None:
        self.enabled = pipeline_enabled() if enabled is None else enabled
        self._pending: Future | None = None

    def submit(self, write: Callable[[], None]) -> None:
        """Run ``write`` in the background (after the previous write has committed)."""
        if not self.enabled:
            write()
            return
        self.flush()
        self._pending = _shared_writer().submit(write)

    def flush(self) -> None:
        """Wait until every submitted write has committed; re-raise a write's error."""
        pending, self._pending = self._pending, None
        if pending is not None:
            pending.result()

    def flush_quietly(self) -> None:
        """Flush on a path that is already failing: a write error is logged, not raised over the first one."""
        try:
            self.flush()
        except Exception as exc:  # noqa: BLE001 - the op's own error is the one to report
            log.warning("a background checkpoint write also failed: %s: %s", type(exc).__name__, exc)
