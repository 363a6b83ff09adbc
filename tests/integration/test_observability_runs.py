"""Observability through real DAG runs (dag.test + local Ray): events, summaries on
failure and completion, the plan document, partition logs and the monitor."""

from __future__ import annotations

import json
import os

import pytest

from airflow_provider_dj.client.monitor import JobUtils, show_job_progress
from airflow_provider_dj.engine.jobdir.events import read_events

pytestmark = pytest.mark.integration


def _state(dr) -> str:
    return str(dr.state).split(".")[-1].lower()


def test_failed_run_writes_failed_summary_then_resume_completes_it(make_recipe, run_dag):
    recipe = make_recipe("it_obs", parts=3)
    work = os.path.join(os.path.dirname(recipe), "work")
    job_dir = os.path.join(work, "obs")
    os.makedirs(job_dir)
    with open(os.path.join(job_dir, "_fault_injection.json"), "w") as fh:
        json.dump([{"partition_id": 1, "after_op": 1, "times": 1}], fh)

    assert _state(run_dag(recipe, {"job_id": "obs"}, retries=0)) == "failed"
    # the failing partition task's on_failure_callback: job_failed event + failed summary
    failed = read_events(job_dir, "job_failed")
    assert len(failed) == 1
    ev = failed[0]
    assert ev["airflow_task_id"] == "partitions_seg0" and ev["airflow_map_index"] == 1 and ev["try_number"] == 1
    assert "injected fault at after_op: partition 1 op 1" in ev["error_message"] and ev["job_id"] == "obs"
    summary = json.load(open(os.path.join(job_dir, "job_summary.json")))
    assert summary["status"] == "failed" and "partitions_seg0 (map index 1)" in summary["error"]
    parts = {p["partition_id"]: p for p in summary["partitions"]}
    assert parts[1]["last_checkpoint_op"] == 1 and parts[1]["ops_done"] == 2
    # the summary is a snapshot taken when the task failed: dag.test runs mapped tasks in
    # no fixed order, so each sibling shows 4 ops done exactly when it finished before the failure
    finished_before = {
        e["partition_id"] for e in read_events(job_dir, "partition_complete") if e["timestamp"] < ev["timestamp"]
    }
    for pid in (0, 2):
        assert parts[pid]["ops_done"] == (4 if pid in finished_before else 0)
    # the monitor rebuilds from the job dir: by now the sibling after the failure finished segment 0 too
    prog = JobUtils("obs", work).progress()
    assert prog["status"] == "failed"
    assert [p["ops_done"] for p in prog["partitions"]] == [4, 2, 4]
    assert summary["export"]["written"] is False and summary["resume_command"].endswith("--resume obs")
    text = show_job_progress("obs", work_dir=work, file=None)
    assert "[FAILED]" in text and "resume: dj-airflow run" in text

    start = read_events(job_dir, "job_start")[0]
    assert start["status"] == "new" and start["airflow_task_id"] == "validate" and start["partitions"] == 3
    assert start["input_rows"] == 400 and start["try_number"] == 1 and start["airflow_run_id"]

    assert _state(run_dag(recipe, {"resume": "obs"}, retries=0)) == "success"
    summary = json.load(open(os.path.join(job_dir, "job_summary.json")))
    assert summary["status"] == "completed" and summary["export"]["written"] is True
    assert [r["status"] for r in summary["runs"]] == ["new", "resumed"]
    done = read_events(job_dir, "job_complete")
    assert len(done) == 1 and done[0]["output_rows"] == summary["export"]["rows"]
    assert done[0]["checksum"] == summary["export"]["checksum_xxh3_128"]
    # op_complete events carry measured rows per op and partition; they add up to the summary
    seen: dict = {}
    for e in read_events(job_dir, "op_complete"):
        seen[(e["partition_id"], e["op_index"])] = e
        assert e["duration"] >= 0 and "airflow_task_id" in e and "airflow_map_index" in e
    for op in summary["ops"]:
        assert sum(seen[(p, op["op_index"])]["input_rows"] for p in range(3)) == op["rows_in"]
        assert sum(seen[(p, op["op_index"])]["output_rows"] for p in range(3)) == op["rows_out"]
    for e in read_events(job_dir, "checkpoint_save"):
        assert os.path.exists(e["checkpoint_path"])

    plan = json.load(open(os.path.join(job_dir, "dag_execution_plan.json")))
    assert {n["airflow_task_id"] for n in plan["nodes"]} == {"partitions_seg0"}
    assert len(plan["nodes"]) == 3 * 5 and plan["airflow_task_ids"][-1] == "export"
    logs = sorted(os.listdir(os.path.join(job_dir, "logs")))
    assert logs == ["job.log", "partition_00000.log", "partition_00001.log", "partition_00002.log"]
    p1 = open(os.path.join(job_dir, "logs", "partition_00001.log")).read()
    assert "[p1 seg0 try1] op 1 whitespace_normalization_mapper done" in p1
    assert "resuming from the checkpoint after op 1 (whitespace_normalization_mapper)" in p1
    job_log = open(os.path.join(job_dir, "logs", "job.log")).read().splitlines()
    assert "job failed" in job_log[0] and "job completed" in job_log[-1]
    utils = JobUtils("obs", work)
    assert utils.status() == "completed"
    text = show_job_progress("obs", detailed=True, work_dir=work, file=None)
    assert "[COMPLETED]" in text and "3/3 partitions complete" in text
