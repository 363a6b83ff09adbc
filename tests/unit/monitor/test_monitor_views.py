"""The monitor on a completed, failed, stopped, running and interrupted job: text and data."""

from __future__ import annotations

import io
import json
import os
import re

import pytest

from airflow_provider_dj.cli.main import main
from airflow_provider_dj.client.monitor import (
    JobNotFoundError,
    JobUtils,
    list_running_jobs,
    show_job_progress,
    watch_job,
)
from airflow_provider_dj.client.monitor.render import bar
from airflow_provider_dj.engine.execution.segment_runner import run_segment
from airflow_provider_dj.engine.job.summary import write_job_summary
from airflow_provider_dj.engine.jobdir import lock as job_lock
from airflow_provider_dj.engine.jobdir import stop_control
from airflow_provider_dj.engine.jobdir.events import EventLog
from airflow_provider_dj.engine.jobdir.faults import InjectedFault


def test_progress_bar():
    assert bar(0, 10, 10) == "[..........]" and bar(5, 10, 10) == "[#####.....]" and bar(3, 0, 4) == "[####]"


def test_completed_job(completed_job):
    text = show_job_progress("done", detailed=True, work_dir=completed_job["work"], file=None)
    out_rows = completed_job["summary"]["export"]["rows"]
    assert text.splitlines()[0] == "Job done  [COMPLETED]  project monitor_unit"
    assert "Progress [##############################] 100.0%  9/9 op x partition steps, 3/3 partitions complete" in text
    assert f"export: {out_rows} rows -> {completed_job['out']}" in text
    assert re.search(r"p1 +rows 40-79 +\[#+\] 3/3 ops  completed  40 -> \d+ rows", text)
    # --detailed: per-op table with the summary's totals, and rows out per partition after each op
    s = completed_job["summary"]
    row = next(ln for ln in text.splitlines() if " words_num_filter " in ln and "3/3" in ln)
    assert row.split()[3:7] == [
        str(s["ops"][1]["rows_in"]),
        str(s["ops"][1]["rows_out"]),
        str(s["ops"][1]["filtered"]),
        "0",
    ]
    assert "rows out per partition after each op" in text
    assert "resume:" not in text
    utils = JobUtils("done", completed_job["work"])
    assert utils.load_job_summary()["status"] == "completed"
    assert {e["event_type"] for e in utils.load_event_logs()} >= {"job_start", "op_complete", "export_complete"}
    assert utils.status() == "completed" and utils.load_execution_plan()["job_id"] == "done"


def test_failed_job(new_job):
    job = new_job("boom", faults=[{"partition_id": 2, "after_op": 1, "times": 1}])
    run_segment(job["dir"], 0, 0, try_number=1)
    with pytest.raises(InjectedFault):
        run_segment(job["dir"], 0, 2, try_number=1)
    job_lock.release(job["dir"], "run_1")
    write_job_summary(job["dir"], "failed", error="task partitions_seg0 (map index 2) failed: InjectedFault: boom")
    prog = JobUtils("boom", job["work"]).progress()
    assert prog["status"] == "failed" and prog["units_done"] == 4 and prog["units_total"] == 9
    text = show_job_progress("boom", detailed=False, work_dir=job["work"], file=None)
    assert "[FAILED]" in text and "error: task partitions_seg0 (map index 2) failed: InjectedFault: boom" in text
    assert f"resume: dj-airflow run {job['recipe']} --resume boom" in text
    assert "job_failed" in text.split("Failures:")[1]
    assert "Ops:" not in text  # not detailed


def test_stopped_job(new_job):
    job = new_job("paused")
    run_segment(job["dir"], 0, 1, try_number=1)
    stop_control.request_stop(job["dir"], requested_by="ops-team")
    job_lock.release(job["dir"], "run_1")
    write_job_summary(job["dir"], "stopped")
    text = show_job_progress("paused", work_dir=job["work"], file=None)
    assert "[STOPPED]" in text and "stop requested by ops-team" in text
    assert "resume: dj-airflow run" in text
    assert re.search(r"p1 +rows 40-79 +\[#+\.+\] 2/3 ops  partial", text)


def test_running_job_shows_current_op_throughput_and_eta(new_job):
    job = new_job("live")  # validate holds the lock (this process): the job runs
    run_segment(job["dir"], 0, 0, try_number=1)
    EventLog(job["dir"], "live", writer="worker").emit("partition_start", partition_id=1, segment=0)
    EventLog(job["dir"], "live", writer="worker").emit(
        "op_start", partition_id=1, op_index=0, input_rows=40, op_name="whitespace_normalization_mapper"
    )
    prog = JobUtils("live", job["work"]).progress()
    assert prog["status"] == "running" and prog["units_done"] == 2
    assert prog["rows_processed_this_run"] == 80 and prog["rows_per_s"] > 0 and prog["eta_s"] is not None
    p1 = next(p for p in prog["partitions"] if p["partition_id"] == 1)
    assert p1["status"] == "running" and p1["current_op"]["op_name"] == "whitespace_normalization_mapper"
    text = show_job_progress("live", work_dir=job["work"], file=None)
    assert "[RUNNING]" in text and "ETA" in text
    assert re.search(r"p1 .*running: op 0 whitespace_normalization_mapper \(40 rows", text)
    assert [j["job_id"] for j in list_running_jobs(job["work"])] == ["live"]
    # a killed run: the lock's holder is gone, no summary -> interrupted, not running
    lock = job_lock.read_lock(job["dir"])
    lock.update(heartbeat=0, airflow_run_id="gone")
    open(os.path.join(job["dir"], "metadata", "runner.lock"), "w").write(json.dumps(lock))
    assert JobUtils("live", job["work"]).status() == "interrupted"
    assert list_running_jobs(job["work"]) == []


def test_watch_stops_after_max_iterations_or_when_the_job_ends(new_job, completed_job):
    job = new_job("watched")
    naps = []
    buf = io.StringIO()
    frames = watch_job("watched", interval=7, max_iterations=3, work_dir=job["work"], file=buf, sleep=naps.append)
    assert len(frames) == 3 and naps == [7, 7] and buf.getvalue().count("Job watched  [RUNNING]") == 3
    frames = watch_job(
        "done", interval=7, max_iterations=5, work_dir=completed_job["work"], file=None, sleep=naps.append
    )
    assert len(frames) == 1 and "[COMPLETED]" in frames[0] and naps == [7, 7]


def test_cli_monitor_finds_jobs_by_work_dir_env_and_registry(completed_job, capsys, monkeypatch):
    assert main(["monitor", "done", "--work-dir", completed_job["work"], "--detailed"]) == 0
    out = capsys.readouterr().out
    assert "[COMPLETED]" in out and "Ops:" in out
    monkeypatch.setenv("DJ_WORK_DIR", completed_job["work"])
    assert main(["monitor", "done"]) == 0 and "[COMPLETED]" in capsys.readouterr().out
    monkeypatch.setenv("DJ_WORK_DIR", "/nonexistent")
    assert main(["monitor", "done"]) == 0  # found through the recent-jobs registry
    assert "[COMPLETED]" in capsys.readouterr().out
    assert main(["monitor", "done", "--watch", "--interval", "0", "--max-iterations", "2"]) == 0
    assert capsys.readouterr().out.count("[COMPLETED]") == 1  # a finished job renders once
    assert main(["monitor", "nope", "--work-dir", completed_job["work"]]) == 2
    err = capsys.readouterr().err
    assert "job 'nope' not found" in err and "--work-dir" in err
    assert main(["monitor", "../etc"]) == 2
    with pytest.raises(JobNotFoundError):
        JobUtils("nope", completed_job["work"])
