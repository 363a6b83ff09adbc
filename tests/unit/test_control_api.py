"""stop_job / list_jobs / job_status and the `dj-airflow stop` / `jobs` commands, over real job directories.

No Airflow run and no Ray: jobs are planned with the engine (which takes the
runner lock as a live runner would) and a thread plays the worker that
honours the stop at its next committed boundary.
"""

from __future__ import annotations

import json
import os
import threading

import pytest

from airflow_provider_dj.cli.main import main
from airflow_provider_dj.client.control import JobNotFoundError, job_status, list_jobs, stop_job
from airflow_provider_dj.engine.config.recipe import load_recipe
from airflow_provider_dj.engine.execution.segment_runner import run_segment
from airflow_provider_dj.engine.job.setup import prepare_job
from airflow_provider_dj.engine.jobdir import lock as job_lock
from airflow_provider_dj.engine.jobdir import stop_control
from airflow_provider_dj.testing.sample_corpus import write_corpus

RECIPE = """\
project_name: ctl
dataset_path: {data}
export_path: {export}
work_dir: {work}
text_keys: text
partition: {{mode: manual, num_of_partitions: 2}}
process:
  - whitespace_normalization_mapper:
  - text_length_filter: {{min_len: 10}}
"""


@pytest.fixture
def job(tmp_path):
    data = write_corpus(str(tmp_path / "c.jsonl"), 40, seed=2)
    (tmp_path / "r.yaml").write_text(RECIPE.format(data=data, export=tmp_path / "out.jsonl", work=tmp_path / "work"))
    return prepare_job(load_recipe(str(tmp_path / "r.yaml")), job_id="ctl_job")


def test_status_and_listing_follow_the_job_directory(job, tmp_path):
    work = str(tmp_path / "work")
    st = job_status(job.job_dir)
    assert (st["job_id"], st["status"]) == ("ctl_job", "running")  # prepare_job took the lock: a live runner
    assert st["progress"] == {"partitions_final": 0, "partitions_total": 2, "percent": 0.0}
    assert [j["job_id"] for j in list_jobs(work)] == ["ctl_job"]
    run_segment(job.job_dir, 0, 0)
    assert job_status(job.job_dir)["progress"]["partitions_final"] == 1
    stop_control.request_stop(job.job_dir)
    assert job_status(job.job_dir)["status"] == "stopping"
    job_lock.force_unlock(job.job_dir)
    assert job_status(job.job_dir)["status"] == "stopped"
    assert list_jobs(work) == []  # nothing running
    assert [j["status"] for j in list_jobs(work, running_only=False)] == ["stopped"]


def test_stop_job_waits_until_the_worker_has_stopped(job, tmp_path):
    from airflow_provider_dj.engine.job.summary import write_job_summary

    def worker():  # what a partition task does: work until a committed boundary sees the stop
        while stop_control.read_stop_request(job.job_dir) is None:
            threading.Event().wait(0.05)
        write_job_summary(job.job_dir, "stopped")
        job_lock.release(job.job_dir, None)

    t = threading.Thread(target=worker, daemon=True)
    t.start()
    res = stop_job("ctl_job", work_dir=str(tmp_path / "work"), timeout=30, poll_s=0.05)
    t.join(10)
    assert res.state == "stopped", res.message
    assert res.summary["status"] == "stopped"
    assert "--resume ctl_job" in res.message
    assert res.request["force"] is False


def test_stop_job_reports_a_job_that_does_not_stop_in_time(job, tmp_path):
    res = stop_job("ctl_job", force=True, work_dir=str(tmp_path / "work"), timeout=0.2, poll_s=0.05)
    assert res.state == "stop_pending" and "within 0.2s" in res.message
    assert stop_control.read_stop_request(job.job_dir)["force"] is True


def test_stop_job_on_a_job_without_a_runner_only_records_the_request(job, tmp_path):
    job_lock.force_unlock(job.job_dir)
    res = stop_job("ctl_job", work_dir=str(tmp_path / "work"))
    assert res.state == "not_running"
    assert stop_control.read_stop_request(job.job_dir) is not None


def test_stop_job_leaves_a_completed_job_alone(job, tmp_path):
    with open(os.path.join(job.job_dir, "job_summary.json"), "w") as fh:
        json.dump({"status": "completed"}, fh)
    assert stop_job("ctl_job", work_dir=str(tmp_path / "work")).state == "completed"
    assert stop_control.read_stop_request(job.job_dir) is None


def test_stop_job_names_where_it_looked_for_an_unknown_job(tmp_path):
    with pytest.raises(JobNotFoundError) as info:
        stop_job("nope", work_dir=str(tmp_path))
    assert os.path.join(str(tmp_path), "nope") in str(info.value) and "--work-dir" in str(info.value)


def test_cli_stop_and_jobs(job, tmp_path, capsys):
    work = str(tmp_path / "work")
    assert main(["jobs", "--work-dir", work]) == 0
    out = capsys.readouterr().out
    assert "ctl_job" in out and "running" in out and "0/2 (0%)" in out
    assert main(["stop", "ctl_job", "--work-dir", work, "--timeout", "0"]) == 0
    assert "stop_pending" in capsys.readouterr().out
    assert stop_control.read_stop_request(job.job_dir)["requested_by"].startswith("dj-airflow stop")
    assert main(["jobs", "--work-dir", work, "--json"]) == 0
    assert [j["status"] for j in json.loads(capsys.readouterr().out)] == ["stopping"]
    assert main(["stop", "../x", "--work-dir", work]) == 2
    assert "not a safe job id" in capsys.readouterr().err
    assert main(["stop", "missing", "--work-dir", work]) == 2
    assert "job 'missing' not found" in capsys.readouterr().err


def _closed_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_stop_in_ray_jobs_mode_with_its_dashboard_down_keeps_the_request_and_names_what_it_could_not_stop(
    job, tmp_path, capsys
):
    """A group's record says its Ray Job runs at a dashboard nothing listens on: the stop request is written,
    the stop says which submission Ray could not be asked to stop and why, and the event lists it; a group
    whose Ray Job ended is not asked about."""
    from airflow_provider_dj.engine.jobdir import ray_jobs
    from airflow_provider_dj.engine.jobdir.events import read_events

    dead = f"http://127.0.0.1:{_closed_port()}"
    g0, g1 = job.groups
    running = ray_jobs.base_submission_id(job.job_dir, job.job_id, 0, g0.group_id)
    ended = ray_jobs.base_submission_id(job.job_dir, job.job_id, 0, g1.group_id)
    who = {"host": "node1", "dashboard_address": dead, "submitted_at": 1.0}
    ray_jobs.record_transition(job.job_dir, 0, g0, running, "started", job_id=job.job_id, attempt=0, identity=who)
    ray_jobs.record_transition(job.job_dir, 0, g1, ended, "started", job_id=job.job_id, attempt=0, identity=who)
    ray_jobs.record_transition(job.job_dir, 0, g1, ended, "succeeded", job_id=job.job_id, attempt=0, results=[])

    graceful = stop_job("ctl_job", work_dir=str(tmp_path / "work"), timeout=0)
    assert graceful.ray_jobs == []  # a graceful stop asks nothing of Ray: the drivers read the request
    capsys.readouterr()

    assert main(["stop", "ctl_job", "--force", "--work-dir", str(tmp_path / "work"), "--timeout", "0"]) == 0
    out, err = capsys.readouterr()
    assert "stop_pending" in out
    line = next(ln for ln in err.splitlines() if running in ln)
    assert f"Ray job {running} (segment 0, group 0) at {dead}: NOT stopped: the Ray dashboard at {dead}" in line
    assert "does not answer (ConnectionRefusedError" in line
    assert "1 Ray job(s) could not be stopped through Ray; the stop request stays" in err
    assert ended not in out + err
    assert stop_control.read_stop_request(job.job_dir)["requested_by"].startswith("dj-airflow stop")
    graceful_event, event = read_events(job.job_dir, "stop_requested")
    assert "ray_jobs" not in graceful_event
    assert [(s["submission_id"], s["outcome"]) for s in event["ray_jobs"]] == [(running, "not_stopped")]
    assert event["ray_jobs"][0]["reason"] in line

    other = f"http://127.0.0.1:{_closed_port()}"  # --ray-address: the dashboard to use instead of the record's
    res = stop_job("ctl_job", force=True, work_dir=str(tmp_path / "work"), timeout=0, ray_address=other)
    assert [(s["address"], s["outcome"]) for s in res.ray_jobs] == [(other, "not_stopped")]
    assert f"the Ray dashboard at {other} does not answer" in res.ray_jobs[0]["reason"]


def test_a_stop_of_a_job_not_run_in_ray_jobs_mode_records_no_ray_jobs(job, tmp_path):
    from airflow_provider_dj.engine.jobdir.events import read_events

    res = stop_job("ctl_job", force=True, work_dir=str(tmp_path / "work"), timeout=0)
    assert res.ray_jobs == []
    (event,) = read_events(job.job_dir, "stop_requested")
    assert "ray_jobs" not in event
