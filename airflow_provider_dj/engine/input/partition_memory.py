"""Will each partition fit in a worker's memory?  Checked when the job is planned, before any work.

A partition is processed as one Arrow table: its rows, the output of the op running on it, and the
checkpoint being written in the background are in memory at once.  The working memory of a
partition is therefore a multiple of its input bytes (``nbytes`` in partitioning_info: the JSON
bytes of its rows, or its Arrow size for Parquet input); :data:`WORKING_MEMORY_FACTOR` is that
multiple, measured on the spine recipe (docs/benchmarks.md, "Partitions past 2 GiB").  A partition
whose estimate exceeds the memory of the machine that runs it would be killed by the kernel hours
into the job, so the plan is refused instead, naming the partition, the estimate, the limit and the
keys to change.
"""

from __future__ import annotations

import math
import os

from airflow_provider_dj import settings
from airflow_provider_dj.core.errors import RefusedError

#: Peak working memory of one partition per byte of its input (see the module docstring).
WORKING_MEMORY_FACTOR = 3.5
GIB = 1 << 30


class PartitionTooLargeError(RefusedError, ValueError):
    """A planned partition would not fit in a worker's memory."""


def memory_limit_bytes() -> int:
    """The memory one partition may use: ``[dj] partition_memory_limit_gb``, else this machine's RAM."""
    configured = settings.get("partition_memory_limit_gb")
    if configured:
        return int(float(configured) * GIB)
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def check_partitions_fit(info: dict, limit_bytes: int | None = None) -> None:
    """Raise :class:`PartitionTooLargeError` when the largest partition of ``info`` (partitioning_info)
    needs more working memory than ``limit_bytes`` (default :func:`memory_limit_bytes`)."""
    parts = info.get("partitions") or []
    if not parts:
        return
    largest = max(parts, key=lambda p: int(p.get("nbytes") or 0))
    need = int(int(largest.get("nbytes") or 0) * WORKING_MEMORY_FACTOR)
    limit = memory_limit_bytes() if limit_bytes is None else int(limit_bytes)
    if need <= limit:
        return
    total = sum(int(p.get("nbytes") or 0) for p in parts)
    fits = max(1, int(limit / WORKING_MEMORY_FACTOR))  # input bytes one partition may hold
    at_least = max(len(parts) + 1, math.ceil(total / fits))
    raise PartitionTooLargeError(
        f"partition {largest['partition_id']} (rows {largest['start_row']}-{largest['end_row'] - 1}) holds "
        f"{largest['nbytes'] / GIB:.2f} GiB of input; a partition needs about {WORKING_MEMORY_FACTOR:g}x that "
        f"in memory ({need / GIB:.1f} GiB), more than the {limit / GIB:.1f} GiB a worker has "
        f"({_limit_source()}). Make partitions smaller: partition.mode: manual with "
        f"partition.num_of_partitions: {at_least} or more, or partition.mode: auto with "
        f"partition.target_size_mb of at most {fits >> 20}; nothing was written"
    )


def _limit_source() -> str:
    if settings.get("partition_memory_limit_gb"):
        return "[dj] partition_memory_limit_gb"
    return "this machine's memory; set [dj] partition_memory_limit_gb when workers have another size"
