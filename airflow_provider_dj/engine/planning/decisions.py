"""Recipe + partitioning + probe report -> the run's planning decisions.

Glue between the pure functions (``planner``, ``groups``, ``concurrency``)
and the two places that use them:

- the ``validate`` task (``decide_run``): partitions are known, the probe
  report is in the job directory; it resolves the group size, the actor
  plan and how many partitions may be in flight, and every execution group
  carries ``max_in_flight`` to the partition tasks;
- the DAG factory at parse time (``parse_time_concurrency``): no data may be
  read, the job may not exist yet, so it uses the cached report of a fixed
  ``job_id`` when there is one and a conservative default otherwise.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from airflow_provider_dj.engine.gpu.planner import ActorPlan, available_batches, plan_actors
from airflow_provider_dj.engine.gpu.profiles import cluster_from_report, load_report, stages_from_report
from airflow_provider_dj.engine.planning.concurrency import (
    ConcurrencyDecision,
    in_flight_per_group,
    resolve_max_concurrent,
)
from airflow_provider_dj.engine.planning.groups import GroupSizeDecision, bound_group_size, resolve_group_size
from airflow_provider_dj.ops.registry import get_op_class

if TYPE_CHECKING:
    from airflow_provider_dj.engine.config.schema import Recipe

log = logging.getLogger(__name__)


@dataclass
class RunDecisions:
    group: GroupSizeDecision
    concurrency: ConcurrencyDecision
    actor_plan: ActorPlan | None
    max_in_flight: int  # Ray tasks one execution group may run at once
    concurrent_groups: int  # execution groups Airflow may run at once (the split of the total)

    def to_dict(self) -> dict[str, Any]:
        return {
            "execution_group_size": self.group.to_dict(),
            "max_concurrent_partitions": self.concurrency.to_dict(),
            "actor_plan": self.actor_plan.to_dict() if self.actor_plan else None,
            "max_in_flight_per_group": self.max_in_flight,
            "concurrent_groups": self.concurrent_groups,
        }


def gpu_op_indices(recipe: Recipe) -> list[int]:
    return [spec.index for spec in recipe.process if get_op_class(spec.name).uses_cuda]


def _plan_from_report(recipe: Recipe, report: dict[str, Any], rows: float | None) -> tuple[ActorPlan, float]:
    """(actor plan, cluster CPUs) from the report; ``rows`` bounds actors by available batches."""
    extra = recipe.partition.extra
    stages = stages_from_report(report)
    cluster = cluster_from_report(report, max_gpu_workers_per_device=extra.get("max_gpu_workers_per_device", 5))
    batches = available_batches(stages, int(rows)) if rows else None
    return plan_actors(stages, cluster, batches), cluster.usable_cpus


def decide_run(
    recipe: Recipe,
    info: dict[str, Any],
    report: dict[str, Any] | None,
    *,
    default_group_size: int = 1,
    airflow_max_active: int | None = None,
    sequential_tasks: bool = False,
    cpu_default: int | None = None,
    max_groups: int | None = None,
    max_mapped_tasks: int | None = None,
) -> RunDecisions:
    """All decisions for one job; raises ``PlanningError`` when even one actor per GPU stage does not fit.

    ``max_groups`` caps the groups of a segment (``engine.planning.groups.group_cap``, from
    ``max_mapped_tasks``, Airflow's ``[core] max_map_length``): the group size is raised to fit.

    ``airflow_max_active`` is the parse-time ``max_active_tis_per_dagrun``
    (groups Airflow may run at once); ``sequential_tasks`` says the runner
    executes mapped tasks one after another (``dj-airflow run``), which also
    passes its CPU count as ``cpu_default`` (engine/planning/concurrency.py).
    """
    extra = recipe.partition.extra
    n = max(1, int(info["num_partitions"]))
    total = int(info["total_rows"])
    rows_per_partition = total / n
    gpu = bool(gpu_op_indices(recipe))
    plan = None
    cpus = None
    if gpu and report:
        first, cpus = _plan_from_report(recipe, report, total)
        init_s = max(s.model_init_s for s in stages_from_report(report))
        group = resolve_group_size(
            extra.get("execution_group_size", "auto"),
            num_partitions=n,
            default=default_group_size,
            init_s=init_s,
            rows_per_s=first.pipeline_rows_per_s,
            rows_per_partition=rows_per_partition,
            max_ratio=extra.get("max_initialization_overhead_ratio", 0.1),
        )
        # Re-plan for one pool's lifetime: more actors than its batches would idle.  Fewer actors only
        # lengthen the pool's useful time, so the group size chosen above still meets the ratio.
        plan, cpus = _plan_from_report(recipe, report, group.size * rows_per_partition)
    else:
        group = resolve_group_size(
            extra.get("execution_group_size", "auto"), num_partitions=n, default=default_group_size
        )
    group = bound_group_size(group, n, max_groups, max_mapped_tasks)
    conc = resolve_max_concurrent(
        recipe.partition.max_concurrent_partitions,
        num_partitions=n,
        actor_plan=plan,
        cluster_cpus=cpus,
        has_gpu_ops=gpu,
        cpu_default=cpu_default,
    )
    n_groups = min(-(-n // group.size), max_groups or n)
    groups_at_once = 1 if sequential_tasks else min(n_groups, airflow_max_active or n_groups)
    return RunDecisions(group, conc, plan, in_flight_per_group(conc.value, groups_at_once), groups_at_once)


def parse_time_concurrency(recipe: Recipe, cpu_default: int | None = None) -> ConcurrencyDecision:
    """``max_active_tis_per_dagrun`` for the DAG, from the recipe alone (plus a cached report for a fixed job id)."""
    known = recipe.partition.num_of_partitions if recipe.partition.mode == "manual" else None
    configured = recipe.partition.max_concurrent_partitions
    gpu = bool(gpu_op_indices(recipe))
    # (A Recipe built without the parser may still hold "auto", which the parser reads as None.)
    if not gpu or configured not in (None, "auto") or not recipe.job_id:  # type: ignore[comparison-overlap]
        return resolve_max_concurrent(configured, num_partitions=known, has_gpu_ops=gpu, cpu_default=cpu_default)
    try:
        report = load_report(os.path.join(recipe.work_dir, recipe.job_id))
        if not report:
            return resolve_max_concurrent(configured, num_partitions=known, has_gpu_ops=True)
        plan, cpus = _plan_from_report(recipe, report, None)
    except Exception as exc:  # noqa: BLE001 - parsing must not fail on a stale report; validate reports it
        log.warning(
            "cached GPU probe report for job %s not usable at parse time (%s); using the conservative default",
            recipe.job_id,
            exc,
        )
        return resolve_max_concurrent(configured, num_partitions=known, has_gpu_ops=True)
    return resolve_max_concurrent(
        configured, num_partitions=known, actor_plan=plan, cluster_cpus=cpus, has_gpu_ops=True
    )
