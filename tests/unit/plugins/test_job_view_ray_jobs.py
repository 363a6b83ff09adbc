"""The job view's Ray Jobs table (plugins/job_data.py, views.py) from real records in a planned job directory.

The records are written with their owner's writer (engine/jobdir/ray_jobs.record_transition), as the
drivers on the cluster write them; nothing asks a Ray dashboard.  A job not run in Ray Jobs mode shows
nothing new.
"""

from __future__ import annotations

import json

import pytest

from airflow_provider_dj.engine.config.recipe import load_recipe
from airflow_provider_dj.engine.job.setup import prepare_job
from airflow_provider_dj.engine.jobdir import ray_jobs
from airflow_provider_dj.plugins import job_data, views
from airflow_provider_dj.testing.sample_corpus import write_corpus

DASHBOARD = "http://head.example:8265"
SUBMITTED = 1_780_000_000.0


@pytest.fixture
def planned(tmp_path):
    data = write_corpus(str(tmp_path / "in.jsonl"), 30, seed=4)
    recipe = tmp_path / "r.yaml"
    recipe.write_text(
        f"dataset_path: {data}\nexport_path: {tmp_path / 'out.jsonl'}\nwork_dir: {tmp_path / 'work'}\n"
        "partition: {mode: manual, num_of_partitions: 3, execution_group_size: 1}\n"
        "process:\n  - words_num_filter: {min_num: 3}\n"
    )
    return prepare_job(load_recipe(recipe), job_id="rjview", airflow_run_id="run1")


def _write_records(prepared) -> tuple[str, str]:
    """Group 0 failed once and runs again (attempt 1); group 1 succeeded at its first submission."""
    g0, g1 = prepared.groups[0], prepared.groups[1]
    b0 = ray_jobs.base_submission_id(prepared.job_dir, prepared.job_id, 0, g0.group_id)
    b1 = ray_jobs.base_submission_id(prepared.job_dir, prepared.job_id, 0, g1.group_id)
    r1 = ray_jobs.submission_id(b0, 1)
    who = {"host": "node1", "dashboard_address": DASHBOARD}
    write = ray_jobs.record_transition
    write(prepared.job_dir, 0, g0, b0, "started", job_id="rjview", attempt=0, identity=who)
    write(prepared.job_dir, 0, g0, b0, "failed", job_id="rjview", attempt=0, error="boom")
    write(
        prepared.job_dir, 0, g0, r1, "started", job_id="rjview", attempt=1, identity={**who, "submitted_at": SUBMITTED}
    )
    write(prepared.job_dir, 0, g1, b1, "started", job_id="rjview", attempt=0, identity={"host": "node2"})
    write(prepared.job_dir, 0, g1, b1, "succeeded", job_id="rjview", attempt=0, results=[])
    return r1, b1


def test_each_groups_latest_ray_job_is_shown_from_its_record(planned):
    assert len(planned.groups) == 3
    r1, b1 = _write_records(planned)
    record1 = ray_jobs.read_record(planned.job_dir, 0, planned.groups[1].group_id)
    started1 = record1["submissions"][0]["transitions"][0]["at"]  # no submitted_at: the driver's first record
    view = job_data.job_overview(planned.job_dir)
    assert view["ray_jobs"] == [
        {
            "segment_index": 0,
            "group_id": planned.groups[0].group_id,
            "op_index": None,
            "step": None,
            "partition_ids": list(planned.groups[0].partition_ids),
            "submission_id": r1,
            "state": "started",
            "submitted_at": SUBMITTED,
            "resubmissions": 1,
            "dashboard_address": DASHBOARD,
        },
        {
            "segment_index": 0,
            "group_id": planned.groups[1].group_id,
            "op_index": None,
            "step": None,
            "partition_ids": list(planned.groups[1].partition_ids),
            "submission_id": b1,
            "state": "succeeded",
            "submitted_at": started1,
            "resubmissions": 0,
            "dashboard_address": None,
        },
    ]
    assert r1 in json.dumps(view)  # what /api/job/<id> returns
    page = views.job_page(view, api="/a", static="/s")
    assert "<h2>Ray Jobs</h2>" in page
    assert f"<tr data-submission='{r1}'>" in page and f"<code>{r1}</code>" in page and ">started</span>" in page
    assert f"<code>{b1}</code>" in page and ">succeeded</span>" in page
    assert views._t(SUBMITTED) in page


def test_a_global_steps_ray_job_is_shown_after_the_groups(planned):
    _, b1 = _write_records(planned)
    base = ray_jobs.global_base_submission_id(planned.job_dir, planned.job_id, 1)
    ray_jobs.record_global_transition(
        planned.job_dir, 1, base, "started", job_id="rjview", op_name="document_deduplicator", attempt=0
    )
    ray_jobs.record_global_transition(
        planned.job_dir, 1, base, "succeeded", job_id="rjview", op_name="document_deduplicator", attempt=0
    )
    rows = job_data.job_overview(planned.job_dir)["ray_jobs"]
    assert [r["submission_id"] for r in rows][-2:] == [b1, base]
    assert rows[-1]["op_index"] == 1 and rows[-1]["segment_index"] is None and rows[-1]["state"] == "succeeded"
    page = views.job_page(job_data.job_overview(planned.job_dir), api="/a", static="/s")
    assert f"<tr data-submission='{base}'><td>global op 1</td><td>-</td><td>all</td><td><code>{base}</code>" in page


def test_the_exports_ray_job_is_shown_last_as_export(planned):
    _, b1 = _write_records(planned)
    gbase = ray_jobs.global_base_submission_id(planned.job_dir, planned.job_id, 1)
    ray_jobs.record_global_transition(
        planned.job_dir, 1, gbase, "succeeded", job_id="rjview", op_name="document_deduplicator", attempt=0
    )
    base = ray_jobs.export_base_submission_id(planned.job_dir, planned.job_id)
    r1 = ray_jobs.submission_id(base, 1)
    assert base.endswith("-export") and base.rsplit("-export", 1)[0] == gbase.rsplit("-op1", 1)[0]
    ray_jobs.record_export_transition(planned.job_dir, base, "failed", job_id="rjview", attempt=0, error="boom")
    who = {"host": "node1", "dashboard_address": DASHBOARD, "submitted_at": SUBMITTED}
    ray_jobs.record_export_transition(planned.job_dir, r1, "started", job_id="rjview", attempt=1, identity=who)
    rows = job_data.job_overview(planned.job_dir)["ray_jobs"]
    assert [r["submission_id"] for r in rows][-3:] == [b1, gbase, r1]
    assert rows[-1] == {
        "segment_index": None,
        "group_id": None,
        "op_index": None,
        "step": "export",
        "partition_ids": [],
        "submission_id": r1,
        "state": "started",
        "submitted_at": SUBMITTED,
        "resubmissions": 1,
        "dashboard_address": DASHBOARD,
    }
    assert rows[-2]["step"] is None and rows[-2]["op_index"] == 1
    page = views.job_page(job_data.job_overview(planned.job_dir), api="/a", static="/s")
    assert f"<tr data-submission='{r1}'><td>export</td><td>-</td><td>all</td><td><code>{r1}</code>" in page
    assert f"<td>global op 1</td><td>-</td><td>all</td><td><code>{gbase}</code>" in page


def test_a_job_not_run_in_ray_jobs_mode_shows_nothing_new(planned):
    view = job_data.job_overview(planned.job_dir)
    assert view["ray_jobs"] == []
    page = views.job_page(view, api="/a", static="/s")
    assert "Ray Jobs" not in page and "ray-jobs" not in page
