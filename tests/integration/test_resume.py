"""Crash and retry: a failed partition task resumes from its checkpoints (invariant 2)."""

from __future__ import annotations

import json
import os

import pytest

from airflow_provider_dj.engine.jobdir.events import read_events

pytestmark = pytest.mark.integration


def _state(dr) -> str:
    return str(dr.state).split(".")[-1].lower()


def _inject(job_dir: str, faults: list[dict]) -> None:
    os.makedirs(job_dir, exist_ok=True)
    with open(os.path.join(job_dir, "_fault_injection.json"), "w") as fh:
        json.dump(faults, fh)


def _ops_started(job_dir: str, pid: int, try_number: int, task_id: str = "partitions_seg0") -> list[int]:
    return [
        e["op_index"]
        for e in read_events(job_dir, "op_start")
        if e.get("partition_id") == pid and e.get("try_number") == try_number and e.get("airflow_task_id") == task_id
    ]


def test_failed_partition_is_retried_and_runs_only_unfinished_ops(make_recipe, run_dag, tmp_path):
    clean = make_recipe("it_clean", parts=4)
    assert _state(run_dag(clean, {"job_id": "clean"})) == "success"

    recipe = make_recipe("it_crash", parts=4)
    job_dir = os.path.join(os.path.dirname(recipe), "work", "crash")
    _inject(job_dir, [{"partition_id": 1, "after_op": 2, "times": 1}])
    dr = run_dag(recipe, {"job_id": "crash"}, retries=2)
    assert _state(dr) == "success"
    assert (
        open(recipe.replace(".yaml", "_out.jsonl"), "rb").read()
        == open(clean.replace(".yaml", "_out.jsonl"), "rb").read()
    )

    # try 1 of partition 1 ran ops 0..2 and then died; try 2 resumed after op 2.
    assert _ops_started(job_dir, 1, 1) == [0, 1, 2]
    assert _ops_started(job_dir, 1, 2) == [3]
    assert _ops_started(job_dir, 1, 1, "partitions_seg1") == [4]  # the dedup's keep mask, applied once
    loads = [
        e for e in read_events(job_dir, "checkpoint_load") if e.get("partition_id") == 1 and e.get("try_number") == 2
    ]
    assert loads and loads[0]["op_index"] == 2
    # siblings were never retried
    for pid in (0, 2, 3):
        assert _ops_started(job_dir, pid, 2) == []
    failed = [e for e in read_events(job_dir, "partition_failed")]
    assert failed == []  # an injected crash after a committed op is not an op failure
    summary = json.load(open(os.path.join(job_dir, "job_summary.json")))
    assert summary["export"]["rows"] == sum(1 for _ in open(clean.replace(".yaml", "_out.jsonl")))


def test_failed_run_then_cleared_run_resumes_same_job(make_recipe, run_dag):
    """Without retries the DAG run fails; running the DAG again on the same job resumes it (UI clear analogue)."""
    clean = make_recipe("it_clean2", parts=3)
    assert _state(run_dag(clean, {"job_id": "c2"})) == "success"

    recipe = make_recipe("it_fail", parts=3)
    job_dir = os.path.join(os.path.dirname(recipe), "work", "f1")
    _inject(job_dir, [{"partition_id": 2, "after_op": 1, "times": 1}])
    dr = run_dag(recipe, {"job_id": "f1"}, retries=0)
    assert _state(dr) == "failed"
    assert not os.path.exists(recipe.replace(".yaml", "_out.jsonl"))  # nothing exported from a failed run
    saved = sorted(
        os.listdir(os.path.join(job_dir, "checkpoints", "checkpoint_op_001_whitespace_normalization_mapper"))
    )
    assert "partition_00002.commit.json" in saved  # the op before the crash is committed

    dr = run_dag(recipe, {"resume": "f1"}, retries=0)
    assert _state(dr) == "success"
    assert (
        open(recipe.replace(".yaml", "_out.jsonl"), "rb").read()
        == open(clean.replace(".yaml", "_out.jsonl"), "rb").read()
    )
    resumed = [e for e in read_events(job_dir, "partition_complete") if e.get("status") == "already_complete"]
    assert {e["partition_id"] for e in resumed if e.get("segment") == 0} == {0, 1}


def test_run_without_job_id_gets_a_run_derived_id_and_a_cleared_run_resumes_it(make_recipe, airflow_home, ray_cluster):
    """Clearing a whole DAG run (same run id) finds the same job; its finished work is not redone."""
    import re
    from datetime import datetime, timezone

    from airflow_provider_dj.cli.airflow_env import write_cli_dag_stub
    from airflow_provider_dj.dag_builder.factory import build_dag

    recipe = make_recipe("it_nightly", parts=2)
    write_cli_dag_stub(airflow_home, recipe, "it_nightly")
    dag = build_dag(recipe, dag_id="it_nightly", retries=0)
    night = datetime(2026, 11, 28, 2, 0, tzinfo=timezone.utc)
    assert _state(dag.test(logical_date=night, run_after=night)) == "success"
    work = os.path.join(os.path.dirname(recipe), "work")
    jobs = [n for n in os.listdir(work) if not n.startswith("_")]  # "_…": what jobs share, not jobs
    assert len(jobs) == 1 and re.fullmatch(r"20261128_020000_[0-9a-f]{6}", jobs[0])
    job_dir = os.path.join(work, jobs[0])
    n_ops = len(read_events(job_dir, "op_start"))
    export = recipe.replace(".yaml", "_out.jsonl")
    mtime = os.stat(export).st_mtime_ns
    assert _state(dag.test(logical_date=night, run_after=night)) == "success"  # the same run, cleared and re-run
    assert [n for n in os.listdir(work) if not n.startswith("_")] == jobs
    assert len(read_events(job_dir, "op_start")) == n_ops  # no op re-ran
    assert os.stat(export).st_mtime_ns == mtime  # completed job: export verified, not rewritten
