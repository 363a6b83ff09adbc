"""Will a global op's step fit in memory?  Checked when the job is planned, before any work.

A global op (a deduplicator) decides over every row of the job at once: its step loads each
partition's 16-byte keys and sorts them all (engine/execution/global_ops.py,
ops/kernels/keys.py).  Its peak memory grows with the job's row count, not with partition size, so
a corpus that runs fine partition by partition can still fail at the global step, after all the
partitions' work.  :data:`KEY_BYTES_PER_ROW` is that peak per row, measured for the exact
deduplicator (docs/benchmarks.md, "At 100M and 1B rows"); near-duplicate ops keep more per row, so
for them the check is a lower bound and refuses only what surely cannot fit.
"""

from __future__ import annotations

import os

from airflow_provider_dj import settings
from airflow_provider_dj.core.errors import DJError

#: Peak bytes per row of the global step, measured on 10M keys: with lineage (the default) the loaded
#: keys and input rows (24), one contiguous copy of the keys (16), the sort's order and its working
#: copies, each row's representative and the mask: 75; without lineage 57.  Rounded up.
KEY_BYTES_PER_ROW = 78
GB = 1e9


class GlobalStepTooLargeError(DJError, ValueError):
    """A global op would need more memory for its step than the machine running it has."""


def global_step_limit_bytes() -> int:
    """``[dj] global_step_memory_limit_gb``, else this machine's memory (the step runs where the job's
    driver or the global task runs)."""
    configured = settings.get("global_step_memory_limit_gb")
    if configured:
        return int(float(configured) * GB)
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def max_rows_for_global_step(limit_bytes: int | None = None) -> int:
    """The most rows one job with a global op can hold under the limit."""
    limit = global_step_limit_bytes() if limit_bytes is None else int(limit_bytes)
    return limit // KEY_BYTES_PER_ROW


def check_global_steps_fit(plan, total_rows: int, limit_bytes: int | None = None) -> None:
    """Raise :class:`GlobalStepTooLargeError` when ``plan`` has a global op and ``total_rows`` rows'
    keys would not fit in ``limit_bytes`` (default :func:`global_step_limit_bytes`)."""
    global_ops = [(i, op) for i, op in enumerate(plan.ops) if op.is_global]
    if not global_ops or total_rows <= 0:
        return
    limit = global_step_limit_bytes() if limit_bytes is None else int(limit_bytes)
    need = total_rows * KEY_BYTES_PER_ROW
    if need <= limit:
        return
    index, op = global_ops[0]
    source = (
        "[dj] global_step_memory_limit_gb"
        if settings.get("global_step_memory_limit_gb")
        else "this machine's memory; set [dj] global_step_memory_limit_gb to the memory of the worker that "
        "runs the global step"
    )
    raise GlobalStepTooLargeError(
        f"global op {index} ({op.name}) decides over every row at once: {total_rows:,} rows need about "
        f"{need / GB:.1f} GB for its step ({KEY_BYTES_PER_ROW} bytes a row), more than {limit / GB:.1f} GB "
        f"({source}). Split the corpus into jobs of at most {max_rows_for_global_step(limit):,} rows (by day "
        "or by shard) and deduplicate across them with dedup_history (docs/nightly.md), or run the global "
        "step on a larger machine; nothing was written"
    )
