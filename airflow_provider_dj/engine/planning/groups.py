"""Execution-group sizing: how many logical partitions share one actor-pool lifetime.

Why groups: a GPU op pays its model start-up (``model_init_s``) once per
actor-pool lifetime.  With one partition per pool, a 40 s model load in
front of 30 s of inference is 57% overhead; with several partitions per
pool it is paid once for all of them.  Groups only change how partitions
are *scheduled*: checkpoints stay per logical partition, so a failure or a
UI clear still resumes partition by partition.

``partition.execution_group_size: auto`` picks the smallest g with::

    init_s / (init_s + g * rows_per_partition / rows_per_s) <= max_initialization_overhead_ratio

where ``rows_per_s`` is the planned pool's aggregate throughput (all its
actors work at once, so the useful time per partition shrinks with more
actors).  g is bounded by the partition count; when even all partitions
in one group miss the ratio, the group is all of them and the decision
says the ratio was not met.  A positive integer in the recipe wins.

Resume: partitions whose last checkpoints differ run one per group, see
``uniform_positions``.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Mapping


@dataclass(frozen=True)
class GroupSizeDecision:
    size: int
    source: str  # "recipe" (explicit integer), "auto" (from the probe), "default" (no probe figures)
    reason: str
    overhead_ratio: float | None = None  # model start-up share of one group's pool lifetime at ``size``
    target_ratio: float | None = None
    ratio_met: bool | None = None

    def to_dict(self) -> dict:
        return asdict(self)


def overhead_ratio(init_s: float, group_size: int, rows_per_partition: float, rows_per_s: float) -> float:
    """Share of a pool's lifetime spent starting models when it processes ``group_size`` partitions."""
    if init_s <= 0:
        return 0.0
    return init_s / (init_s + group_size * rows_per_partition / rows_per_s)


def auto_group_size(
    *, init_s: float, rows_per_s: float, rows_per_partition: float, num_partitions: int, max_ratio: float
) -> GroupSizeDecision:
    """Smallest g meeting the overhead ratio, bounded by ``num_partitions`` (see the module docstring)."""
    if num_partitions < 1:
        raise ValueError(f"num_partitions must be >= 1, got {num_partitions}")
    if not 0 < max_ratio <= 1:
        raise ValueError(f"max_initialization_overhead_ratio must be in (0, 1], got {max_ratio}")
    if rows_per_s <= 0 or rows_per_partition < 0 or init_s < 0:
        raise ValueError(
            f"need rows_per_s > 0, rows_per_partition >= 0, init_s >= 0; got {rows_per_s}, "
            f"{rows_per_partition}, {init_s}"
        )
    if init_s == 0 or max_ratio >= 1:
        return GroupSizeDecision(
            1,
            "auto",
            "no model start-up to amortize" if init_s == 0 else "ratio 1 allows any",
            overhead_ratio(init_s, 1, rows_per_partition, rows_per_s),
            max_ratio,
            True,
        )
    secs_per_partition = rows_per_partition / rows_per_s
    if secs_per_partition <= 0:
        g = num_partitions
    else:
        # init*(1-r) <= r*g*T  <=>  g >= init*(1-r) / (r*T); then nudge past float rounding.
        g = max(1, math.ceil(init_s * (1 - max_ratio) / (max_ratio * secs_per_partition) - 1e-9))
        while g > 1 and overhead_ratio(init_s, g - 1, rows_per_partition, rows_per_s) <= max_ratio:
            g -= 1
        while overhead_ratio(init_s, g, rows_per_partition, rows_per_s) > max_ratio and g < num_partitions:
            g += 1
    g = min(g, num_partitions)
    achieved = overhead_ratio(init_s, g, rows_per_partition, rows_per_s)
    met = achieved <= max_ratio + 1e-12
    reason = (
        f"model start-up {init_s:.2f}s against {rows_per_partition:,.0f} rows/partition at "
        f"{rows_per_s:,.1f} rows/s: {g} partition(s) per pool gives overhead {achieved:.1%}"
        + ("" if met else f", above the {max_ratio:.0%} target even with all {num_partitions} partitions")
    )
    return GroupSizeDecision(g, "auto", reason, achieved, max_ratio, met)


def resolve_group_size(
    configured: Any,
    *,
    num_partitions: int,
    default: int = 1,
    init_s: float | None = None,
    rows_per_s: float | None = None,
    rows_per_partition: float | None = None,
    max_ratio: float = 0.1,
) -> GroupSizeDecision:
    """The recipe's integer, else ``auto`` from probe figures, else ``default`` (CPU-only pipelines)."""
    bound = max(1, num_partitions)
    if isinstance(configured, int) and not isinstance(configured, bool) and configured > 0:
        return GroupSizeDecision(
            min(configured, bound), "recipe", f"partition.execution_group_size={configured} in the recipe"
        )
    if configured not in (None, "auto"):
        raise ValueError(f"partition.execution_group_size must be a positive integer or 'auto', got {configured!r}")
    if init_s is None or rows_per_s is None or rows_per_partition is None:
        return GroupSizeDecision(
            min(max(1, default), bound),
            "default",
            "no GPU probe figures (CPU-only pipeline or no report): default group size",
        )
    return auto_group_size(
        init_s=init_s,
        rows_per_s=rows_per_s,
        rows_per_partition=rows_per_partition,
        num_partitions=bound,
        max_ratio=max_ratio,
    )


def uniform_positions(completed: Mapping[Any, Mapping[str, Any]]) -> bool:
    """Whether every unfinished partition resumes from the same checkpoint position.

    ``completed`` maps partition id -> {"last_op": i or -1, "final": bool}
    (``engine.job.resume.completed_checkpoints``).  Why groups of 1 otherwise:
    an actor pool's lifetime covers one op sequence.  Partitions resuming
    after op 2 and after op 5 need different sequences; sharing one pool
    would either start everyone at op 3 (re-running committed work of the
    second) or need a pipeline per partition inside the group anyway.  One
    partition per group is always correct and keeps the UI grain obvious.
    Finished partitions do no work, so they never force the fallback.
    """
    positions = {c["last_op"] for c in completed.values() if not c.get("final")}
    return len(positions) <= 1
