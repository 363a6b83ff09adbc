"""How many partitions of one run may be in flight at once (``partition.max_concurrent_partitions``).

``auto`` resolves after actor planning:

- GPU pipelines: the tightest worker capacity.  Each in-flight partition
  holds one replica of every GPU op, so the GPU bound is the smallest
  planned actor count over the GPU stages; the CPU bound is how many
  partition tasks (``cpus_per_partition`` each) the cluster's CPUs hold.
- CPU-only pipelines: 4 (``DJ_DEFAULT_MAX_CONCURRENT_PARTITIONS`` changes
  it; ``dj-airflow run`` passes its CPU count as ``cpu_default`` unless
  that setting is set).
- either way bounded by the partition count; a positive integer in the
  recipe overrides.

Two layers enforce it, because the DAG is built at parse time, before any
probe ran (docs/gpu_planning.md, "Concurrency"):

1. Airflow: the mapped task's ``max_active_tis_per_dagrun`` (and an Airflow
   pool when ``partition.pool`` names one).  Fixed at parse time from the
   cached probe report of a fixed ``job_id`` if there is one, else from a
   conservative default (1 for GPU pipelines).
2. Ray dispatch: every execution group carries ``max_in_flight``, resolved
   by the validate task from the real report, and the partition task never
   has more Ray tasks running than that.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from airflow_provider_dj import settings
from airflow_provider_dj.engine.gpu.planner import ActorPlan

CPU_ONLY_DEFAULT = 4
GPU_PARSE_TIME_DEFAULT = 1


@dataclass(frozen=True)
class ConcurrencyDecision:
    value: int
    source: str  # "recipe", "auto_gpu", "auto_cpu", "parse_default"
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def cpu_only_default(runner_default: int | None = None) -> int:
    """The setting if set, else what the runner passed (``dj-airflow run``: its CPUs), else 4."""
    raw = settings.raw("default_max_concurrent_partitions")
    fallback = max(1, int(runner_default)) if runner_default else CPU_ONLY_DEFAULT
    try:
        return max(1, int(raw)) if raw else fallback
    except ValueError:
        return fallback


def _bounded(value: int, num_partitions: int | None) -> int:
    return max(1, min(value, num_partitions) if num_partitions else value)


def resolve_max_concurrent(
    configured: Any,
    *,
    num_partitions: int | None,
    actor_plan: ActorPlan | None = None,
    gpu_op_indices: list[int] | None = None,
    cluster_cpus: float | None = None,
    cpus_per_partition: float = 1.0,
    has_gpu_ops: bool = False,
    cpu_default: int | None = None,
) -> ConcurrencyDecision:
    """Resolve the recipe's value (int or None/'auto'); see the module docstring.

    ``cpu_default`` is the runner's CPU-only default (``dj-airflow run``: its CPU count)."""
    if isinstance(configured, int) and not isinstance(configured, bool) and configured > 0:
        return ConcurrencyDecision(configured, "recipe", f"partition.max_concurrent_partitions={configured}")
    if configured not in (None, "auto"):
        raise ValueError(
            f"partition.max_concurrent_partitions must be a positive integer or 'auto', got {configured!r}"
        )
    if not has_gpu_ops:
        value = cpu_only_default(cpu_default)
        return ConcurrencyDecision(
            _bounded(value, num_partitions),
            "auto_cpu",
            f"CPU-only pipeline: {value}" + (f", bounded by {num_partitions} partitions" if num_partitions else ""),
        )
    if actor_plan is None:
        return ConcurrencyDecision(
            GPU_PARSE_TIME_DEFAULT,
            "parse_default",
            "GPU pipeline without a probe report yet: 1 at a time (conservative)",
        )
    indices = gpu_op_indices or list(actor_plan.actors)
    gpu_bound = min(actor_plan.actors[i] for i in indices)
    bounds = {"GPU-op workers": gpu_bound}
    if cluster_cpus is not None and cpus_per_partition > 0:
        bounds["CPU workers"] = max(1, math.floor(cluster_cpus / cpus_per_partition + 1e-9))
    which = min(bounds, key=lambda k: bounds[k])
    value = _bounded(bounds[which], num_partitions)
    parts = ", ".join(f"{k} {v}" for k, v in bounds.items())
    return ConcurrencyDecision(
        value,
        "auto_gpu",
        f"tightest capacity is {which} ({parts})"
        + (f", bounded by {num_partitions} partitions" if num_partitions else ""),
    )


def in_flight_per_group(total: int, concurrent_groups: int) -> int:
    """Ray tasks one group may run at once so ``concurrent_groups`` groups together stay within ``total``."""
    return max(1, total // max(1, concurrent_groups))
