"""resolve_pool: when a segment gets an actor pool, how many actors, and what each one holds.

Pure function over a real ExecutionPlan built from a recipe (no Ray): the
resources come from the validate task's per-op plan when there is one,
else from the ops' explicit recipe arguments.  ``_Cluster`` stands in for
``ray.cluster_resources()`` of a cluster with a GPU, which cannot exist
here; the real call is exercised by the integration tests.
"""

from __future__ import annotations

import pytest

from airflow_provider_dj.engine.execution.actor_pool import (
    PoolResourceError,
    check_cluster_fits,
    resolve_pool,
    stateful_op_indices,
)
from airflow_provider_dj.engine.planning.plan import PlannedOp, Segment


class _Plan:
    def __init__(self, names_args):
        self.ops = [PlannedOp(i, n, a, "mapper", False, f"fp{i}") for i, (n, a) in enumerate(names_args)]
        self.segments = [Segment(0, 0, len(self.ops), None, None)]


def test_cpu_only_segment_keeps_plain_tasks():
    plan = _Plan([("whitespace_normalization_mapper", {}), ("clean_email_mapper", {})])
    assert stateful_op_indices(plan, plan.segments[0]) == []
    assert resolve_pool(plan, plan.segments[0], 4, max_in_flight=2) is None


def test_explicit_resources_and_in_flight_bound():
    plan = _Plan([("whitespace_normalization_mapper", {}), ("text_embedding_mapper", {"num_gpus": 0})])
    spec = resolve_pool(plan, plan.segments[0], 5, max_in_flight=2, cpus_per_partition=1)
    assert (spec.actors, spec.num_gpus, spec.num_cpus, spec.stateful_ops) == (2, 0.0, 1.0, [1])
    assert "bound by max_in_flight" in spec.reason
    # the group's partitions bound it too
    assert resolve_pool(plan, plan.segments[0], 1, max_in_flight=4).actors == 1


def test_planned_resources_win_and_gpu_shares_add_up():
    plan = _Plan([("text_embedding_mapper", {}), ("text_embedding_mapper", {"output_key": "e2"})])
    planned = {
        "0": {"actors": 3, "num_gpus": 0.5, "num_cpus": 2.0},
        "1": {"actors": 6, "num_gpus": 0.25, "num_cpus": 1.0},
    }
    spec = resolve_pool(plan, plan.segments[0], 8, max_in_flight=8, actor_resources=planned)
    assert (spec.actors, spec.num_gpus, spec.num_cpus) == (3, 0.75, 2.0)  # fewest planned replicas; shares summed
    assert "planned actors" in spec.reason
    # without a plan the class's declared share is used; above one device it rounds up to whole devices
    many = _Plan([("text_embedding_mapper", {"num_gpus": 0.75}), ("text_embedding_mapper", {"num_gpus": 0.5})])
    assert resolve_pool(many, many.segments[0], 2).num_gpus == 2.0


class _Cluster:
    def __init__(self, res):
        self.res = res

    def cluster_resources(self):
        return self.res


def test_a_pool_the_cluster_can_never_place_is_refused():
    plan = _Plan([("text_embedding_mapper", {})])  # declared 0.25 GPU, no plan
    spec = resolve_pool(plan, plan.segments[0], 2)
    with pytest.raises(PoolResourceError, match=r"needs GPU=0.25 but the Ray cluster has 0"):
        check_cluster_fits(_Cluster({"CPU": 2.0}), spec, 0)
    check_cluster_fits(_Cluster({"CPU": 2.0, "GPU": 1.0}), spec, 0)


def test_actors_are_bounded_by_what_the_cluster_can_place():
    """The pool hands each partition to a free actor, so an actor the cluster can never place would hold
    its partition forever (a group of 4 on a 2-CPU Ray Jobs head stopped after 2 partitions): the
    cluster's totals bound the actors, by CPU and by GPU."""
    plan = _Plan([("whitespace_normalization_mapper", {}), ("text_embedding_mapper", {"num_gpus": 0})])
    spec = resolve_pool(plan, plan.segments[0], 4, cluster={"CPU": 2.0, "memory": 1e9})
    assert spec.actors == 2 and "bound by what the cluster can place" in spec.reason
    assert resolve_pool(plan, plan.segments[0], 4, cluster={"CPU": 8.0}).actors == 4  # the group bounds it
    assert resolve_pool(plan, plan.segments[0], 4, cluster=None).actors == 4  # unknown: not bounded
    gpu = _Plan([("text_embedding_mapper", {"num_gpus": 0.5})])
    assert resolve_pool(gpu, gpu.segments[0], 8, cluster={"CPU": 16.0, "GPU": 1.0}).actors == 2
