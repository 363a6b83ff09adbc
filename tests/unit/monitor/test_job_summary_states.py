"""job_summary.json for completed, failed and stopped jobs, built from the job directory."""

from __future__ import annotations

import json
import os

import pytest

from airflow_provider_dj.engine.execution.segment_runner import run_segment
from airflow_provider_dj.engine.job.summary import build_job_summary, read_job_summary, write_job_summary
from airflow_provider_dj.engine.jobdir import stop_control
from airflow_provider_dj.engine.jobdir.events import EventLog, read_events
from airflow_provider_dj.engine.jobdir.faults import InjectedFault
from airflow_provider_dj.engine.jobdir.registry import recent_jobs
from tests.unit.monitor.conftest import ROWS, read_lines


def test_completed_summary_keeps_export_fields_and_adds_accounting_and_checkpoints(completed_job):
    s = read_job_summary(completed_job["dir"])
    assert s["status"] == "completed" and s["export"]["written"] is True
    out_rows = sum(1 for _ in open(completed_job["out"]))
    assert s["export"]["rows"] == out_rows and len(s["export"]["checksum_xxh3_128"]) == 32
    assert [o["op_name"] for o in s["ops"]] == [
        "whitespace_normalization_mapper",
        "words_num_filter",
        "document_deduplicator",
    ]
    assert s["ops"][0]["rows_in"] == ROWS and s["ops"][-1]["rows_out"] == out_rows
    for o in s["ops"]:
        assert o["rows_in"] == o["rows_out"] + o["filtered"] + o["duplicates"] + o["failed"]
        assert o["rows_per_s"] and o["rows_per_s"] > 0
    assert s["accounting_ok"] is True and s["accounting_errors"] == []
    per_op = {c["op_index"]: c for c in s["checkpoints"]["per_op"]}
    assert per_op[0]["committed_partitions"] == 3 and per_op[2]["dedup_mask_partitions"] == 3
    assert s["start_time"] and s["end_time"] >= s["start_time"] and s["duration_s"] is not None
    assert s["resume_command"].endswith("--resume done")
    assert recent_jobs()["done"]["status"] == "completed"
    assert read_lines(os.path.join(completed_job["dir"], "logs", "job.log"))[-1].endswith(
        f"job completed: 3/3 partitions complete, exported {out_rows} rows to {completed_job['out']}"
    )


def test_failed_summary_counts_what_was_committed_and_says_how_to_resume(new_job):
    job = new_job("broken", faults=[{"partition_id": 1, "after_op": 0, "times": 1}])
    run_segment(job["dir"], 0, 0, try_number=1)
    with pytest.raises(InjectedFault):
        run_segment(job["dir"], 0, 1, try_number=1)
    s = write_job_summary(
        job["dir"],
        "failed",
        error="task partitions_seg0 (map index 1) failed: InjectedFault",
        event_defaults={"airflow_task_id": "partitions_seg0", "airflow_map_index": 1},
    )
    on_disk = json.load(open(os.path.join(job["dir"], "job_summary.json")))
    assert on_disk == json.loads(json.dumps(s, default=str))
    assert s["status"] == "failed" and "InjectedFault" in s["error"]
    parts = {p["partition_id"]: p for p in s["partitions"]}
    assert parts[0]["ops_done"] == 2 and parts[0]["last_checkpoint_op"] == 1  # segment 0 done, dedup not yet
    assert parts[1]["ops_done"] == 1 and parts[1]["last_checkpoint_op"] == 0  # crashed after op 0's checkpoint
    assert parts[2]["ops_done"] == 0 and parts[2]["status"] == "pending"
    assert s["ops"][0]["partitions_done"] == 2 and s["ops"][0]["rows_in"] == 80
    assert s["ops"][2]["partitions_done"] == 0
    assert s["progress"] == {
        "partitions_total": 3,
        "partitions_completed": 0,
        "partitions_failed": 0,
        "op_units_done": 3,
        "op_units_total": 9,
    }
    assert s["export"] == {"path": job["out"], "written": False}
    assert s["resume_command"].endswith("--resume broken") and s["resume_airflow_conf"] == {"resume": "broken"}
    failed = read_events(job["dir"], "job_failed")
    assert len(failed) == 1 and failed[0]["airflow_map_index"] == 1 and "InjectedFault" in failed[0]["error_message"]
    assert recent_jobs()["broken"]["status"] == "failed"
    last = read_lines(os.path.join(job["dir"], "logs", "job.log"))[-1]
    assert "job failed: 0/3 partitions complete" in last and "resume with: dj-airflow run" in last


def test_partition_failures_of_the_latest_run_are_reported(new_job):
    """partition_failed/op_failed are written here with the same EventLog calls the
    segment runner makes when an op raises (no built-in op fails on valid input)."""
    job = new_job("opfail")
    run_segment(job["dir"], 0, 0, try_number=1)
    log = EventLog(job["dir"], "opfail", defaults={"try_number": 1, "airflow_task_id": "partitions_seg0"})
    log.emit("partition_start", partition_id=2, segment=0, input_rows=40)
    log.emit(
        "op_failed",
        partition_id=2,
        op_index=0,
        op_name="whitespace_normalization_mapper",
        error_message="ValueError: bad row",
        status="failed",
    )
    log.emit("partition_failed", partition_id=2, segment=0, error_message="op 0: ValueError: bad row", status="failed")
    s = build_job_summary(job["dir"], "failed")
    parts = {p["partition_id"]: p for p in s["partitions"]}
    assert parts[2]["status"] == "failed" and parts[2]["error"] == "op 0: ValueError: bad row"
    assert s["progress"]["partitions_failed"] == 1
    assert [e["event_type"] for e in s["errors"]] == ["op_failed", "partition_failed"]
    # a retry that starts the partition again clears its failed state
    log.emit("partition_start", partition_id=2, segment=0, input_rows=40)
    assert {p["partition_id"]: p["status"] for p in build_job_summary(job["dir"], "running")["partitions"]}[
        2
    ] == "running"


def test_stopped_summary_records_the_request(new_job):
    job = new_job("halted")
    run_segment(job["dir"], 0, 0, try_number=1)
    stop_control.request_stop(job["dir"], requested_by="tester")
    s = write_job_summary(job["dir"], "stopped")
    assert s["status"] == "stopped" and s["stop_request"]["requested_by"] == "tester"
    assert s["progress"]["op_units_done"] == 2
    stopped = read_events(job["dir"], "job_stopped")
    assert len(stopped) == 1 and stopped[0]["status"] == "stopped"


def test_a_completed_summary_is_never_replaced_by_a_failure_or_stop(completed_job):
    before = open(os.path.join(completed_job["dir"], "job_summary.json")).read()
    s = write_job_summary(completed_job["dir"], "failed", error="export re-verification failed")
    assert s["status"] == "completed"
    write_job_summary(completed_job["dir"], "stopped")
    assert open(os.path.join(completed_job["dir"], "job_summary.json")).read() == before
    assert read_events(completed_job["dir"], "job_failed") == []


def test_an_accounting_mismatch_is_reported_with_partition_and_op(completed_job):
    marker = os.path.join(
        completed_job["dir"], "checkpoints", "checkpoint_op_002_document_deduplicator", "partition_00001.commit.json"
    )
    m = json.load(open(marker))
    m["accounting"][1]["rows_out"] += 1  # a row appears from nowhere between ops 1 and 2
    open(marker, "w").write(json.dumps(m))
    s = build_job_summary(completed_job["dir"], "failed")
    assert s["accounting_ok"] is False
    assert any(e.startswith("partition 1 op 1 (words_num_filter)") for e in s["accounting_errors"])
    assert any(e.startswith("partition 1 op 2 (document_deduplicator)") for e in s["accounting_errors"])


def test_unplanned_job_dir_and_bad_status(tmp_path):
    s = build_job_summary(str(tmp_path / "nothing"), "failed", error="validate failed")
    assert s["status"] == "failed" and "never planned" in s["note"] and s["error"] == "validate failed"
    with pytest.raises(ValueError, match="not one of completed, failed, stopped, running"):
        build_job_summary(str(tmp_path), "done")


def test_resuming_a_failed_job_turns_its_summary_to_running(new_job):
    from airflow_provider_dj.engine.config.recipe import load_recipe
    from airflow_provider_dj.engine.job.setup import prepare_job

    job = new_job("again")
    run_segment(job["dir"], 0, 0, try_number=1)
    write_job_summary(job["dir"], "failed", error="boom")
    prepare_job(load_recipe(job["recipe"], {"resume": "again"}), job_id="again", airflow_run_id="run_1")
    s = read_job_summary(job["dir"])
    assert s["status"] == "running" and s["previous"]["status"] == "failed" and s["previous"]["error"] == "boom"
    assert s["progress"]["op_units_done"] == 2
