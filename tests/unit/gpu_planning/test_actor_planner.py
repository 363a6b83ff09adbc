"""Actor planning on synthetic clusters (pure functions: no Ray, no GPU needed).

Clusters here are described, not mocked: the planner only ever sees
counts and measured shares, so a "GPU" is a number in ClusterResources.
"""

from __future__ import annotations

import pytest

from airflow_provider_dj.engine.gpu.planner import (
    ClusterResources,
    PlanningError,
    StageProfile,
    available_batches,
    plan_actors,
)


def stage(i=0, name="embed", rate=100.0, gpus=0.25, mem=0.2, cpus=1.0, **kw) -> StageProfile:
    return StageProfile(
        op_index=i, op_name=name, rows_per_s=rate, num_gpus=gpus, num_cpus=cpus, memory_fraction=mem, **kw
    )


def _devices_respected(plan, stages, cluster):
    by = {s.op_index: s for s in stages}
    for dev in plan.placement:
        assert sum(by[i].num_gpus for i in dev) <= 1 + 1e-9
        assert sum(by[i].memory_fraction or 0 for i in dev) <= 1 + 1e-9
        assert len(dev) <= cluster.max_gpu_workers_per_device


def test_one_gpu_fills_ray_shares():
    s = stage(gpus=0.25, mem=0.2)
    cluster = ClusterResources(cpus=16, gpus=1)
    plan = plan_actors([s], cluster)
    assert plan.actors == {0: 4}
    assert plan.placement == [[0, 0, 0, 0]]
    assert plan.pipeline_rows_per_s == pytest.approx(400.0)
    assert plan.gpu_shares_used == pytest.approx(1.0)
    assert "Ray GPU shares" in plan.stop_reason


def test_eight_gpus_two_stages_balance_on_the_bottleneck():
    a = stage(1, "fast", rate=200, gpus=0.5, mem=0.4)
    b = stage(3, "slow", rate=50, gpus=0.25, mem=0.2)
    cluster = ClusterResources(cpus=64, gpus=8)
    plan = plan_actors([a, b], cluster)
    # 0.5*6 + 0.25*20 = 8 shares: every device used; throughputs 1200 vs 1000 rows/s.
    assert plan.actors == {1: 6, 3: 20}
    assert plan.pipeline_rows_per_s == pytest.approx(1000.0)
    assert plan.bottleneck == 3
    assert len(plan.placement) == 8 and all(plan.placement)
    assert sorted(i for dev in plan.placement for i in dev).count(3) == 20
    _devices_respected(plan, [a, b], cluster)


def test_tight_memory_allows_one_actor_per_device_even_with_free_ray_shares():
    s = stage(gpus=0.25, mem=0.6)  # Ray would schedule 4, device memory holds 1
    cluster = ClusterResources(cpus=16, gpus=2)
    plan = plan_actors([s], cluster)
    assert plan.actors == {0: 2}
    assert plan.placement == [[0], [0]]
    assert "memory share" in plan.stop_reason


def test_cpu_bound_cluster_stops_on_cpus_first():
    s = stage(gpus=0.1, mem=0.05, cpus=2)
    cluster = ClusterResources(cpus=5, gpus=8)
    plan = plan_actors([s], cluster)
    assert plan.actors == {0: 2}
    assert plan.cpus_used == 4
    assert "CPUs exhausted" in plan.stop_reason


def test_reserved_cpus_are_not_handed_out():
    s = stage(gpus=0.1, mem=0.05, cpus=1)
    plan = plan_actors([s], ClusterResources(cpus=8, gpus=1, reserved_cpus=6))
    assert plan.actors == {0: 2}


def test_per_device_cap_binds_before_shares_and_memory():
    s = stage(gpus=0.1, mem=0.1)
    cluster = ClusterResources(cpus=64, gpus=2, max_gpu_workers_per_device=3)
    plan = plan_actors([s], cluster)
    assert plan.actors == {0: 6}
    assert [len(d) for d in plan.placement] == [3, 3]
    assert "max_gpu_workers_per_device" in plan.stop_reason


def test_available_batches_cap_actors():
    s = stage(gpus=0.1, mem=0.1, batch_size=256)
    batches = available_batches([s], rows=1000)  # ceil(1000 / 256) = 4
    assert batches == {0: 4}
    plan = plan_actors([s], ClusterResources(cpus=64, gpus=8), batches)
    assert plan.actors == {0: 4}
    assert "4 available batches" in plan.stop_reason


def test_stage_behind_a_filter_needs_less_throughput():
    # 'judge' sees only 25% of the input, so 1 actor at 30 rows/s = 120 input rows/s.
    embed = stage(0, "embed", rate=100, gpus=0.25, mem=0.1)
    judge = stage(2, "judge", rate=30, gpus=0.25, mem=0.1, input_share=0.25)
    plan = plan_actors([embed, judge], ClusterResources(cpus=64, gpus=1))
    assert plan.stage_rows_per_s[2] == pytest.approx(plan.actors[2] * 120)
    assert plan.actors == {0: 2, 2: 2}  # 4 shares on 1 device, 200 vs 240 input rows/s
    assert plan.bottleneck == 0


def test_cpu_probe_path_stages_are_cpu_actors():
    s = StageProfile(0, "embed", rows_per_s=1200, num_gpus=0, num_cpus=1)
    plan = plan_actors([s], ClusterResources(cpus=2, gpus=0))
    assert plan.actors == {0: 2}
    assert plan.placement == []
    assert plan.pipeline_rows_per_s == pytest.approx(2400)


def test_whole_device_actors_take_empty_devices():
    big = stage(0, "llm", rate=10, gpus=1, mem=0.9)
    small = stage(1, "embed", rate=100, gpus=0.2, mem=0.2)
    plan = plan_actors([big, small], ClusterResources(cpus=64, gpus=3))
    assert plan.actors[0] + (1 if plan.actors[1] else 0) <= 3
    _devices_respected(plan, [big, small], ClusterResources(cpus=64, gpus=3))
    for dev in plan.placement:
        assert dev.count(0) <= 1 and (0 not in dev or dev == [0])


# -- not even one actor per stage fits: clear errors before the run -------------------------------


def test_one_actor_larger_than_a_device_names_op_and_memory():
    s = stage(2, "text_embedding_mapper", gpus=1, mem=1.3)
    with pytest.raises(PlanningError) as ei:
        plan_actors([s], ClusterResources(cpus=8, gpus=4, device_memory_bytes=16 * 2**30))
    e = ei.value
    assert e.op_name == "text_embedding_mapper" and e.resource == "gpu_memory"
    assert "process[2]" in str(e) and "130%" in str(e) and "16.0 GiB" in str(e) and "batch_size" in str(e)


def test_gpu_op_on_a_cluster_without_gpus():
    with pytest.raises(PlanningError) as ei:
        plan_actors([stage(0, "embed")], ClusterResources(cpus=8, gpus=0))
    assert ei.value.resource == "gpus" and "no GPU" in str(ei.value) and "'embed'" in str(ei.value)


def test_op_needing_more_cpus_than_the_cluster():
    with pytest.raises(PlanningError) as ei:
        plan_actors([stage(0, "embed", cpus=8)], ClusterResources(cpus=4, gpus=1))
    assert ei.value.resource == "cpus" and "num_cpus=8" in str(ei.value) and "4 CPUs" in str(ei.value)


def test_two_stages_that_fit_alone_but_not_together_on_one_device():
    a = stage(0, "embed", gpus=0.5, mem=0.6)
    b = stage(1, "rerank", gpus=0.5, mem=0.6)
    with pytest.raises(PlanningError) as ei:
        plan_actors([a, b], ClusterResources(cpus=8, gpus=1))
    msg = str(ei.value)
    assert ei.value.resource == "gpu_memory" and ei.value.op_name is None
    assert "embed" in msg and "rerank" in msg and "60%" in msg and "1 GPU(s)" in msg


def test_cap_of_one_with_two_stages_on_one_device():
    a = stage(0, "embed", gpus=0.2, mem=0.1)
    b = stage(1, "rerank", gpus=0.2, mem=0.1)
    with pytest.raises(PlanningError) as ei:
        plan_actors([a, b], ClusterResources(cpus=8, gpus=1, max_gpu_workers_per_device=1))
    assert ei.value.resource == "actor_cap" and "max_gpu_workers_per_device" in str(ei.value)


def test_bad_measurement_is_refused_with_the_op_named():
    with pytest.raises(ValueError, match=r"'embed' \(process\[4\]\).*rows_per_s"):
        StageProfile(4, "embed", rows_per_s=0.0, num_gpus=0.25)
    with pytest.raises(ValueError, match="whole number"):
        StageProfile(4, "embed", rows_per_s=1.0, num_gpus=1.5)
