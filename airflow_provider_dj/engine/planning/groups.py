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

The bound (``group_cap``): each group is one mapped task instance of a
segment, and Airflow refuses a mapped task of more than ``[core]
max_map_length`` instances (the ``validate`` task's push of its groups fails).
So the groups of one segment never outnumber a cap: Airflow's limit, and
for sizes the planner chose (the default and ``auto``) also the readable
cap ``[dj] max_groups_per_segment``.  Past the cap the partitions are split
into exactly ``cap`` contiguous groups whose sizes differ by at most one
(``balanced_sizes``).  A recipe's explicit integer is honoured up to
Airflow's limit and raised to fit beyond it, with a warning: under
automatic partitioning the partition count grows with the corpus, and
refusing the recipe the night it crosses the limit would fail a job over
a scheduling preference.  Checkpoints stay per partition either way.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from typing import Any, Mapping


@dataclass(frozen=True)
class GroupSizeDecision:
    size: int
    source: str  # "recipe" (explicit integer), "auto" (from the probe), "default" (no probe figures)
    reason: str
    overhead_ratio: float | None = None  # model start-up share of one group's pool lifetime at ``size``
    target_ratio: float | None = None
    ratio_met: bool | None = None
    #: Set when the group count cap raised ``size`` (then the largest group's): what capped it
    #: (``group_cap``) and the size chosen before, which ``group_sizes`` takes with the cap.
    bounded_by: str | None = None
    chosen_size: int | None = None

    @property
    def planned_size(self) -> int:
        """The size to plan groups with (``group_sizes`` applies the cap itself)."""
        return self.chosen_size or self.size

    def to_dict(self) -> dict[str, Any]:
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
    Finished partitions do no work, so they never force the fallback.  Past
    the group cap (``group_cap``) such partitions share groups anyway: each
    still resumes from its own checkpoint (the segment runner works one
    partition at a time), only a model start-up is no longer shared.
    """
    positions = {c["last_op"] for c in completed.values() if not c.get("final")}
    return len(positions) <= 1


def group_cap(max_mapped_tasks: int | None, readable_cap: int | None, *, explicit: bool) -> int | None:
    """The most execution groups one segment may have; ``None``: no cap.

    ``max_mapped_tasks``: Airflow's ``[core] max_map_length`` where Airflow maps
    the groups, ``None`` where nothing does (the local executor dispatches them
    itself).  ``readable_cap`` (``[dj] max_groups_per_segment``; 0 or ``None``:
    none) applies to sizes the planner chose, never to a recipe's ``explicit``
    integer, and only where Airflow maps the groups (it is about the grid)."""
    if max_mapped_tasks is None:
        return None
    if max_mapped_tasks < 1:
        raise ValueError(f"max_mapped_tasks must be >= 1 or None, got {max_mapped_tasks}")
    if explicit or not readable_cap or readable_cap < 1:
        return max_mapped_tasks
    return min(max_mapped_tasks, readable_cap)


def cap_reason(cap: int, max_mapped_tasks: int | None) -> str:
    """Which limit ``cap`` is, in words a person can act on."""
    if cap == max_mapped_tasks:
        return f"Airflow's [core] max_map_length={cap}"
    return f"[dj] max_groups_per_segment={cap}"


def bound_group_size(
    decision: GroupSizeDecision, num_partitions: int, cap: int | None, max_mapped_tasks: int | None
) -> GroupSizeDecision:
    """``decision`` with its size raised so that its groups number at most ``cap``.

    The size returned is the largest group's (``balanced_sizes``); unchanged when
    the groups already fit."""
    n = max(1, num_partitions)
    if cap is None or -(-n // max(1, decision.size)) <= cap:
        return decision
    size = -(-n // cap)
    what = cap_reason(cap, max_mapped_tasks)
    reason = (
        f"{decision.reason}; raised from {decision.size} to {size} partition(s) per group so that "
        f"{n} partitions make at most {cap} mapped task instances per segment ({what})"
    )
    return replace(decision, size=size, reason=reason, bounded_by=what, chosen_size=decision.size)


def balanced_sizes(num_partitions: int, num_groups: int) -> list[int]:
    """Sizes of ``num_groups`` contiguous groups over ``num_partitions``: the first
    ``num_partitions % num_groups`` hold one more, so sizes differ by at most one."""
    if num_groups < 1 or num_partitions < num_groups:
        raise ValueError(f"need 1 <= num_groups <= num_partitions, got {num_groups} groups of {num_partitions}")
    base, extra = divmod(num_partitions, num_groups)
    return [base + 1] * extra + [base] * (num_groups - extra)


def group_sizes(num_partitions: int, group_size: int, cap: int | None = None) -> list[int]:
    """Sizes of the contiguous groups over ``num_partitions`` partitions.

    Within the cap: groups of ``group_size``, the last one holding the rest (a
    recipe's size is what the user asked for).  Past it: exactly ``cap``
    groups of balanced sizes."""
    if num_partitions < 1:
        return []
    size = max(1, group_size)
    if cap is not None and -(-num_partitions // size) > cap:
        return balanced_sizes(num_partitions, cap)
    full, rest = divmod(num_partitions, size)
    return [size] * full + ([rest] if rest else [])
