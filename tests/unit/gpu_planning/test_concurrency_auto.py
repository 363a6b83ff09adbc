"""max_concurrent_partitions resolution, and the report -> decisions glue, on synthetic reports.

Reports are written as the preflight writes them (a ``device`` block and an
``ops`` list); no probe runs here.  The GPU op is the test op from conftest.
"""

from __future__ import annotations

import json

import pytest

from airflow_provider_dj.engine.config.recipe import parse_recipe
from airflow_provider_dj.engine.gpu.planner import ActorPlan, PlanningError
from airflow_provider_dj.engine.gpu.profiles import ReportFormatError, cluster_from_report, stages_from_report
from airflow_provider_dj.engine.planning.concurrency import in_flight_per_group, resolve_max_concurrent
from airflow_provider_dj.engine.planning.decisions import decide_run, parse_time_concurrency

FAKE_GPU_OP = "planning_test_gpu_mapper"  # registered by this folder's conftest.py


def _plan(actors: dict[int, int]) -> ActorPlan:
    return ActorPlan(
        actors=actors,
        placement=[],
        stage_rows_per_s={},
        pipeline_rows_per_s=1.0,
        bottleneck=0,
        stop_reason="",
        cpus_used=0,
        gpu_shares_used=0,
    )


def test_cpu_only_auto_is_four_bounded_by_partitions(monkeypatch):
    monkeypatch.delenv("DJ_DEFAULT_MAX_CONCURRENT_PARTITIONS", raising=False)
    assert resolve_max_concurrent(None, num_partitions=10).value == 4
    assert resolve_max_concurrent("auto", num_partitions=3).value == 3
    assert resolve_max_concurrent(None, num_partitions=None).source == "auto_cpu"
    # dj-airflow run passes its CPU count; the setting, when set, wins over it.
    assert resolve_max_concurrent(None, num_partitions=10, cpu_default=16).value == 10
    assert resolve_max_concurrent(None, num_partitions=100, cpu_default=16).value == 16
    monkeypatch.setenv("DJ_DEFAULT_MAX_CONCURRENT_PARTITIONS", "8")
    assert resolve_max_concurrent(None, num_partitions=100, cpu_default=16).value == 8


def test_gpu_auto_takes_the_tightest_worker_capacity():
    plan = _plan({1: 6, 3: 10})
    d = resolve_max_concurrent(None, num_partitions=40, actor_plan=plan, cluster_cpus=16, has_gpu_ops=True)
    assert (d.value, d.source) == (6, "auto_gpu") and "GPU-op workers" in d.reason
    d = resolve_max_concurrent(None, num_partitions=40, actor_plan=plan, cluster_cpus=4, has_gpu_ops=True)
    assert d.value == 4 and "CPU workers" in d.reason
    assert resolve_max_concurrent(None, num_partitions=2, actor_plan=plan, cluster_cpus=16, has_gpu_ops=True).value == 2
    # parse time, no report yet: conservative
    assert resolve_max_concurrent(None, num_partitions=40, has_gpu_ops=True).value == 1


def test_explicit_integer_overrides():
    plan = _plan({1: 6})
    assert resolve_max_concurrent(7, num_partitions=3, actor_plan=plan, has_gpu_ops=True).value == 7
    with pytest.raises(ValueError, match="max_concurrent_partitions"):
        resolve_max_concurrent("many", num_partitions=3)


def test_in_flight_split_between_concurrent_groups():
    assert in_flight_per_group(6, 1) == 6
    assert in_flight_per_group(6, 4) == 1
    assert in_flight_per_group(1, 3) == 1


# -- report -> decisions --------------------------------------------------------------------------


def _report(kind="cuda", **op) -> dict:
    cuda = kind == "cuda"
    entry = {
        "op_index": 1,
        "op_name": FAKE_GPU_OP,
        "batch_size": 64,
        "model_init_s": 5.0,
        "warmup_s": 0.128,
        "steady_batch_s": [0.128, 0.128, 0.128],
        "rows_per_s": 500.0,
        "output_ratio": 1.0,
        "peak_memory_bytes": 20 * 2**30,
        "memory_fraction": 0.3 if cuda else None,
        "num_gpus": 0.3 if cuda else 0.0,
        "num_cpus": 1,
    }
    entry.update(op)
    device = {
        "kind": kind,
        "gpu_model": "H100" if cuda else None,
        "gpu_count": 2 if cuda else 0,
        "gpu_total_bytes": 80 * 2**30 if cuda else None,
        "cpu_count": 16 if cuda else 2,
    }
    return {"version": 1, "device": device, "ops": [entry]}


def _recipe(tmp_path, gpu=True, **partition):
    process = [{"whitespace_normalization_mapper": None}] + ([{FAKE_GPU_OP: None}] if gpu else [])
    data = {
        "project_name": "plan",
        "dataset_path": "in.jsonl",
        "export_path": "out.jsonl",
        "work_dir": "work",
        "process": process,
        "partition": partition,
    }
    return parse_recipe(data, base_dir=str(tmp_path))


def test_report_converts_to_stages_and_cluster():
    r = _report()
    (s,) = stages_from_report(r)
    assert (s.op_index, s.rows_per_s, s.num_gpus, s.memory_fraction, s.model_init_s) == (1, 500.0, 0.3, 0.3, 5.0)
    c = cluster_from_report(r, max_gpu_workers_per_device=4)
    assert (c.cpus, c.gpus, c.device_memory_bytes, c.max_gpu_workers_per_device) == (16, 2, 80 * 2**30, 4)
    cpu = stages_from_report(_report("cpu"))[0]
    assert cpu.num_gpus == 0 and cpu.memory_fraction is None
    with pytest.raises(ReportFormatError, match="rows_per_s"):
        stages_from_report(_report(rows_per_s=None))


def test_gpu_run_decisions_from_a_report(tmp_path):
    recipe = _recipe(tmp_path)
    info = {"num_partitions": 20, "total_rows": 200_000}
    d = decide_run(recipe, info, _report(), airflow_max_active=1)
    # 0.3 share and 30% memory: 3 actors per device on 2 devices -> 6 x 500 = 3,000 rows/s.
    assert d.actor_plan.actors == {1: 6}
    assert d.actor_plan.pipeline_rows_per_s == pytest.approx(3000)
    # 10,000 rows/partition = 3.33 s; 5 s start-up: g=14 gives 5/(5+46.7) = 9.7%, g=13 gives 10.3%
    assert (d.group.size, d.group.source, d.group.ratio_met) == (14, "auto", True)
    assert (d.concurrency.value, d.concurrency.source) == (6, "auto_gpu")
    assert (d.concurrent_groups, d.max_in_flight) == (1, 6)
    # Airflow may run both groups at once: each gets half.
    assert decide_run(recipe, info, _report(), airflow_max_active=6).max_in_flight == 3
    assert json.dumps(d.to_dict())  # recorded as an event: must be plain JSON


def test_cpu_probe_path_plans_on_measured_cpu_throughput(tmp_path):
    recipe = _recipe(tmp_path)
    d = decide_run(recipe, {"num_partitions": 8, "total_rows": 200_000}, _report("cpu", rows_per_s=1200.0))
    assert d.actor_plan.actors == {1: 2}  # 2 CPUs
    # 25,000 rows/partition at 2,400 rows/s = 10.4 s; g=5: 5/(5+52.1) = 8.8%; g=4: 10.7%
    assert d.group.size == 5
    assert d.concurrency.value == 2


def test_recipe_integers_win_over_the_report(tmp_path):
    recipe = _recipe(tmp_path, execution_group_size=3, max_concurrent_partitions=2)
    d = decide_run(recipe, {"num_partitions": 20, "total_rows": 200_000}, _report())
    assert (d.group.size, d.group.source) == (3, "recipe")
    assert (d.concurrency.value, d.concurrency.source) == (2, "recipe")


def test_cpu_only_pipeline_keeps_the_default_group_size(tmp_path, monkeypatch):
    monkeypatch.delenv("DJ_DEFAULT_MAX_CONCURRENT_PARTITIONS", raising=False)
    recipe = _recipe(tmp_path, gpu=False)
    d = decide_run(recipe, {"num_partitions": 10, "total_rows": 1000}, None, default_group_size=2, airflow_max_active=4)
    assert (d.group.size, d.group.source) == (2, "default")
    assert d.actor_plan is None and d.concurrency.value == 4
    assert d.max_in_flight == 1  # 4 groups at once share the run's 4
    assert (
        decide_run(
            recipe,
            {"num_partitions": 10, "total_rows": 1000},
            None,
            default_group_size=2,
            airflow_max_active=4,
            sequential_tasks=True,
        ).max_in_flight
        == 4
    )


def test_planning_error_surfaces_from_decisions(tmp_path):
    recipe = _recipe(tmp_path)
    with pytest.raises(PlanningError, match=FAKE_GPU_OP):
        decide_run(recipe, {"num_partitions": 4, "total_rows": 100}, _report(memory_fraction=1.4, num_gpus=1))


def test_parse_time_uses_a_cached_report_for_a_fixed_job_id(tmp_path, monkeypatch):
    monkeypatch.delenv("DJ_DEFAULT_MAX_CONCURRENT_PARTITIONS", raising=False)
    assert parse_time_concurrency(_recipe(tmp_path, gpu=False)).value == 4
    fixed = parse_recipe(
        {
            "project_name": "plan",
            "dataset_path": "in.jsonl",
            "export_path": "out.jsonl",
            "work_dir": "work",
            "job_id": "nightly",
            "process": [{FAKE_GPU_OP: None}],
        },
        base_dir=str(tmp_path),
    )
    assert parse_time_concurrency(fixed).value == 1  # no report yet: conservative
    job = tmp_path / "work" / "nightly"
    job.mkdir(parents=True)
    (job / "gpu_probe_results.json").write_text(json.dumps(_report()))
    d = parse_time_concurrency(fixed)
    assert (d.value, d.source) == (6, "auto_gpu")
    (job / "gpu_probe_results.json").write_text(json.dumps(_report(memory_fraction=3.0)))
    assert parse_time_concurrency(fixed).value == 1  # unusable report: parsing still succeeds


def test_lazy_model_load_in_the_warmup_batch_counts_as_start_up():
    from airflow_provider_dj.engine.gpu.profiles import startup_seconds

    # init ~0 (loads on first batch); warmup batch 61.5 s against a typical steady batch of 37.4 s
    op = {"model_init_s": 1.2e-05, "warmup_batch_s": [61.5], "steady_batch_s": [42.4, 31.0, 37.4]}
    assert startup_seconds(op) == pytest.approx(24.1, abs=1e-3)
    assert startup_seconds({"model_init_s": 3.0, "warmup_batch_s": [0.1], "steady_batch_s": [0.2]}) == 3.0
    assert stages_from_report(_report(model_init_s=2.0, warmup_batch_s=[4.0]))[0].model_init_s == pytest.approx(
        2.0 + 4.0 - 0.128
    )
