"""How planning decisions reach the generated DAG: the mapped tasks' concurrency and pool.

Built with the real DAG factory (Airflow objects, no run).  The GPU op is
the CUDA-declaring test op from this folder's conftest (no GPU here).
"""

from __future__ import annotations

import json

FAKE_GPU_OP = "planning_test_gpu_mapper"


def _write(tmp_path, name: str, body: str) -> str:
    p = tmp_path / f"{name}.yaml"
    p.write_text(f"project_name: {name}\ndataset_path: in.jsonl\nexport_path: out.jsonl\nwork_dir: work\n" + body)
    return str(p)


def _report(rate: float = 500.0) -> dict:
    op = {
        "op_index": 1,
        "op_name": FAKE_GPU_OP,
        "batch_size": 64,
        "model_init_s": 5.0,
        "warmup_s": 1.0,
        "steady_batch_s": [0.1],
        "rows_per_s": rate,
        "output_ratio": 1.0,
        "peak_memory_bytes": 1,
        "memory_fraction": 0.3,
        "num_gpus": 0.3,
        "num_cpus": 1,
    }
    return {
        "version": 1,
        "device": {"kind": "cuda", "gpu_model": "H100", "gpu_count": 2, "gpu_total_bytes": 80 * 2**30, "cpu_count": 16},
        "ops": [op],
    }


def test_cpu_only_auto_sets_four_on_every_mapped_task(tmp_path, monkeypatch):
    from airflow_provider_dj.dag_builder.factory import build_dag

    monkeypatch.delenv("DJ_DEFAULT_MAX_CONCURRENT_PARTITIONS", raising=False)
    dag = build_dag(
        _write(
            tmp_path,
            "cpu",
            "process:\n  - whitespace_normalization_mapper:\n  - document_deduplicator:\n  - clean_email_mapper:\n",
        )
    )
    for tid in ("partitions_seg0", "partitions_seg1"):
        assert dag.task_dict[tid].partial_kwargs["max_active_tis_per_dagrun"] == 4
    assert dag.task_dict["validate"].max_active_groups == 4
    small = build_dag(
        _write(tmp_path, "cpu2", "partition: {mode: manual, num_of_partitions: 2}\nprocess:\n  - clean_email_mapper:\n")
    )
    assert small.task_dict["partitions_seg0"].partial_kwargs["max_active_tis_per_dagrun"] == 2


def test_gpu_pipeline_uses_the_cached_report_of_a_fixed_job_id_and_the_pool(tmp_path):
    from airflow_provider_dj.dag_builder.factory import build_dag

    body = (
        f"job_id: nightly\npartition: {{pool: gpu_pool}}\n"
        f"process:\n  - whitespace_normalization_mapper:\n  - {FAKE_GPU_OP}:\n"
    )
    path = _write(tmp_path, "gpu", body)
    before = build_dag(path).task_dict["partitions_seg0"]
    assert before.partial_kwargs["max_active_tis_per_dagrun"] == 1  # no report yet: conservative
    job = tmp_path / "work" / "nightly"
    job.mkdir(parents=True)
    (job / "gpu_probe_results.json").write_text(json.dumps(_report()))
    dag = build_dag(path)
    seg = dag.task_dict["partitions_seg0"]
    assert seg.partial_kwargs["max_active_tis_per_dagrun"] == 6  # 3 replicas per device x 2 devices
    assert seg.partial_kwargs["pool"] == "gpu_pool"
    assert dag.task_dict["validate"].max_active_groups == 6


def test_explicit_integer_wins_at_parse_time(tmp_path):
    from airflow_provider_dj.dag_builder.factory import build_dag

    dag = build_dag(
        _write(tmp_path, "fixed", f"partition: {{max_concurrent_partitions: 9}}\nprocess:\n  - {FAKE_GPU_OP}:\n")
    )
    assert dag.task_dict["partitions_seg0"].partial_kwargs["max_active_tis_per_dagrun"] == 9
    assert "pool" not in dag.task_dict["partitions_seg0"].partial_kwargs
