"""The recent-jobs registry: env override, bounded, atomic, newest last."""

from __future__ import annotations

import json
import os

from airflow_provider_dj.engine.jobdir.registry import lookup_job, recent_jobs, register_job, registry_path


def test_registry_lives_where_the_env_says_and_is_bounded(tmp_path):
    assert registry_path() == str(tmp_path / "state" / "jobs.json")
    for i in range(105):
        register_job(f"job{i:03d}", f"/w/job{i:03d}", status="running", max_entries=100)
    jobs = recent_jobs()
    assert len(jobs) == 100 and list(jobs)[0] == "job005" and list(jobs)[-1] == "job104"
    register_job("job010", "/w/job010", status="failed")  # refreshed: moves to the end, keeps registered_at
    jobs = recent_jobs()
    assert list(jobs)[-1] == "job010" and jobs["job010"]["status"] == "failed"
    assert jobs["job010"]["registered_at"] <= jobs["job010"]["updated_at"]
    assert lookup_job("job104") == "/w/job104" and lookup_job("job000") is None
    leftovers = [n for n in os.listdir(tmp_path / "state") if n not in ("jobs.json", "jobs.json.lock")]
    assert leftovers == []  # no temp files left behind
    json.load(open(registry_path()))  # always whole JSON


def test_a_corrupt_registry_is_replaced_not_fatal(tmp_path):
    os.makedirs(tmp_path / "state")
    (tmp_path / "state" / "jobs.json").write_text('{"jobs": {"a": ')
    assert recent_jobs() == {}
    register_job("b", "/w/b")
    assert lookup_job("b") == "/w/b"
