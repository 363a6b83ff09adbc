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

import math
import os
from typing import TYPE_CHECKING

from airflow_provider_dj import settings
from airflow_provider_dj.core.errors import RefusedError

if TYPE_CHECKING:
    from airflow_provider_dj.engine.config.schema import Recipe
    from airflow_provider_dj.engine.planning.plan import ExecutionPlan, PlannedOp
    from airflow_provider_dj.ops.base import Op

#: Peak bytes per row of the global step, measured on 10M keys: with lineage (the default) the loaded
#: keys and input rows (24), one contiguous copy of the keys (16), the sort's order and its working
#: copies, each row's representative and the mask: 75; without lineage 57.  Rounded up.
KEY_BYTES_PER_ROW = 78
GB = 1e9


class GlobalStepTooLargeError(RefusedError, ValueError):
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


#: Peak bytes per item in a key-shard task of the sharded step (engine/execution/shard_stages.py): the
#: items read batch by batch and their contiguous columns (52), the sort's order and sorted copies (34),
#: the edges found (16); measured at 100M rows in 2,000 partitions (12.5M items a shard: 98 bytes an item
#: above the Ray worker's own memory, docs/benchmarks.md), with a margin.
BYTES_PER_ITEM = 104
#: What a shard task's Ray worker holds before any data (its interpreter, Ray, pyarrow, numpy): 180-246 MiB
#: measured at 10M to 100M rows (docs/benchmarks.md), with a margin.  ``[dj] global_shard_memory_mb``
#: bounds the whole process, so a task's data may use the budget less this.
WORKER_OWN_BYTES = 256 << 20
#: The least data a task must be allowed beside the worker's own memory for a budget to be usable.
MIN_DATA_BYTES = 32 << 20
#: Peak bytes per row of a partition's mask task: its keys, the mask, its removed rows and their partners.
MASK_BYTES_PER_ROW = 64
MAX_SHARDS = 4096


def is_shardable(op_impl: Op) -> bool:
    """Whether the op's global decision is one the sharded step computes (exact keys, MinHash, SimHash);
    the Data-Juicer adapter's near-duplicate ops decide in their own code and stay in one process."""
    from airflow_provider_dj.ops.base import SignatureDeduplicator
    from airflow_provider_dj.ops.dedup.near import DocumentMinhashDeduplicator, DocumentSimhashDeduplicator

    return isinstance(op_impl, (DocumentMinhashDeduplicator, DocumentSimhashDeduplicator)) or not isinstance(
        op_impl, SignatureDeduplicator
    )


def items_per_row(op_impl: Op) -> int:
    """Items each row gives the sharded step (one per LSH band, one per SimHash table, else one)."""
    from airflow_provider_dj.ops.dedup.near import DocumentMinhashDeduplicator, DocumentSimhashDeduplicator

    if isinstance(op_impl, DocumentMinhashDeduplicator):
        return op_impl.num_bands
    if isinstance(op_impl, DocumentSimhashDeduplicator):
        return math.comb(op_impl.num_blocks, op_impl.num_blocks - op_impl.hamming_distance)
    return 1


def _whole_setting(key: str, minimum: int) -> int:
    """``[dj] key`` as a whole number of at least ``minimum``; a SettingError naming the variable that set
    it and the default otherwise (raised while the job is planned, before any work)."""
    value = int(settings.get(key) or 0)
    if value < minimum:
        where = settings.source(key) or f"[{settings.SECTION}] {key}"
        raise settings.SettingError(
            f"{where}={value}: {key} must be at least {minimum}; set a larger value or unset it for the "
            f"default ({settings.BY_KEY[key].default})"
        )
    return value


def check_shard_settings() -> None:
    """Refuse (SettingError) a shard setting out of range: ``global_step_shards`` and
    ``global_step_in_process_max_mb`` below 0, ``global_shard_memory_mb`` below what a task's Ray worker
    holds of its own plus :data:`MIN_DATA_BYTES`."""
    _whole_setting("global_step_shards", 0)
    _whole_setting("global_step_in_process_max_mb", 0)
    shard_budget_bytes()


def shard_budget_bytes() -> int:
    """The data one task of a sharded step may hold: ``[dj] global_shard_memory_mb`` bounds the task's
    whole process, so this is that less :data:`WORKER_OWN_BYTES`.  A SettingError (naming the variable
    that set it) when the setting leaves less than :data:`MIN_DATA_BYTES` for data."""
    least = (WORKER_OWN_BYTES + MIN_DATA_BYTES) >> 20
    value = int(settings.get("global_shard_memory_mb") or 0)
    if value < least:
        where = settings.source("global_shard_memory_mb") or f"[{settings.SECTION}] global_shard_memory_mb"
        raise settings.SettingError(
            f"{where}={value}: global_shard_memory_mb must be at least {least}: it bounds a shard task's "
            f"whole process, whose Ray worker holds about {WORKER_OWN_BYTES >> 20} MiB of its own; set a "
            f"larger value or unset it for the default ({settings.BY_KEY['global_shard_memory_mb'].default})"
        )
    return (value << 20) - WORKER_OWN_BYTES


def budget_words(data_budget: int) -> str:
    """How messages name a task's data budget: the setting it comes from and the worker's share."""
    return (
        f"[dj] global_shard_memory_mb = {(data_budget + WORKER_OWN_BYTES) >> 20} MB, of which a task's Ray "
        f"worker holds about {WORKER_OWN_BYTES >> 20} MiB of its own"
    )


def planned_shards(op_impl: Op, rows: int, limit_bytes: int | None = None) -> int:
    """Key shards for ``rows`` rows: ``[dj] global_step_shards`` when set; else 0 (the step in its
    task's process) while the rows' keys fit both ``[dj] global_step_in_process_max_mb`` and
    ``limit_bytes`` (default :func:`global_step_limit_bytes`), or when the op cannot be sharded; else as
    many as keep each shard within ``[dj] global_shard_memory_mb`` (one shard is still a task of its
    own, off the task's process)."""
    configured = _whole_setting("global_step_shards", 0)
    if configured > 0:
        return min(configured, MAX_SHARDS)
    in_process = _whole_setting("global_step_in_process_max_mb", 0) << 20
    limit = global_step_limit_bytes() if limit_bytes is None else int(limit_bytes)
    if rows * KEY_BYTES_PER_ROW <= min(in_process, limit) or not is_shardable(op_impl):
        return 0
    need = rows * items_per_row(op_impl) * BYTES_PER_ITEM
    return min(MAX_SHARDS, max(1, math.ceil(need / shard_budget_bytes())))


def check_global_steps_fit(
    plan: ExecutionPlan,
    total_rows: int,
    limit_bytes: int | None = None,
    *,
    recipe: Recipe | None = None,
    max_partition_rows: int = 0,
) -> None:
    """Raise :class:`GlobalStepTooLargeError` when a global op's step cannot run in the memory it has:
    in one process, ``total_rows`` rows' keys past ``limit_bytes`` (default
    :func:`global_step_limit_bytes`); sharded (``recipe`` given and the op shardable), one shard or one
    partition's mask task past ``[dj] global_shard_memory_mb``."""
    global_ops = [(i, op) for i, op in enumerate(plan.ops) if op.is_global]
    if not global_ops:
        return
    check_shard_settings()  # a bad value is refused here, whatever the rows, not when a step first shards
    if total_rows <= 0:
        return
    limit = global_step_limit_bytes() if limit_bytes is None else int(limit_bytes)
    for index, op in global_ops:
        op_impl = _op_impl(op, recipe)
        shards = 0 if op_impl is None else planned_shards(op_impl, total_rows, limit)
        if shards and op_impl is not None:  # (only an op of the recipe is ever planned in shards)
            _check_shards_fit(index, op, op_impl, total_rows, shards, max_partition_rows)
        elif total_rows * KEY_BYTES_PER_ROW > limit:
            raise GlobalStepTooLargeError(_single_step_message(index, op, total_rows, limit, op_impl))


def _op_impl(op: PlannedOp, recipe: Recipe | None) -> Op | None:
    if recipe is None:
        return None
    from airflow_provider_dj.ops.registry import create_op

    return create_op(op.name, op.args, recipe.text_key)


def _check_shards_fit(index: int, op: PlannedOp, op_impl: Op, rows: int, shards: int, max_partition_rows: int) -> None:
    budget = shard_budget_bytes()
    per_shard = math.ceil(rows * items_per_row(op_impl) * BYTES_PER_ITEM / shards)
    mask_need = max_partition_rows * MASK_BYTES_PER_ROW
    if per_shard <= budget and mask_need <= budget:
        return
    what = (
        f"{shards} key shards of {per_shard / GB:.2f} GB each"
        if per_shard > budget
        else f"a partition's keep mask of {mask_need / GB:.2f} GB ({max_partition_rows:,} rows)"
    )
    fix = (
        "raise [dj] global_step_shards (0 plans them from the budget) or [dj] global_shard_memory_mb"
        if per_shard > budget
        else "use more partitions or raise [dj] global_shard_memory_mb"
    )
    raise GlobalStepTooLargeError(
        f"global op {index} ({op.name}) over {rows:,} rows needs {what}, more than one task may use "
        f"({budget_words(budget)}): {fix}; nothing was written"
    )


def _single_step_message(index: int, op: PlannedOp, total_rows: int, limit: int, op_impl: Op | None) -> str:
    need = total_rows * KEY_BYTES_PER_ROW
    source = (
        "[dj] global_step_memory_limit_gb"
        if settings.get("global_step_memory_limit_gb")
        else "this machine's memory; set [dj] global_step_memory_limit_gb to the memory of the worker that "
        "runs the global step"
    )
    why = ""
    if op_impl is not None and not is_shardable(op_impl):
        why = "; it runs in one process because the op decides in its own code"
    return (
        f"global op {index} ({op.name}) decides over every row at once: {total_rows:,} rows need about "
        f"{need / GB:.1f} GB for its step ({KEY_BYTES_PER_ROW} bytes a row), more than {limit / GB:.1f} GB "
        f"({source}){why}. Split the corpus into jobs of at most {max_rows_for_global_step(limit):,} rows (by day "
        "or by shard) and deduplicate across them with dedup_history (docs/nightly.md), or run the global "
        "step on a larger machine; nothing was written"
    )
