"""The job view's data (plugins/job_data.py, engine/observe/why.py) on a real crashed job directory."""

from __future__ import annotations

import json
import os

import pytest

from airflow_provider_dj.engine.job.watch import JobFailedError, check
from airflow_provider_dj.engine.observe import why
from airflow_provider_dj.plugins import job_data, views
from tests.helpers_job_view import NULL_EVERY, filtered_rows
from tests.unit.plugins.conftest import FAILED_PARTITION, PARTS, ROWS


def test_the_grid_names_partitions_as_airflow_does_and_marks_the_crashed_one_failed(crashed_job):
    view = job_data.job_overview(crashed_job["dir"], dag_id="dj_view", run_id="r")
    grid = view["grid"]
    assert [s["task_id"] for s in grid["segments"]] == ["partitions_seg0", "partitions_seg1"]
    size = ROWS // PARTS
    assert [r["label"] for r in grid["rows"]] == [f"p{p} rows {p * size}-{(p + 1) * size - 1}" for p in range(PARTS)]
    # The Airflow map_index_template renders the same label for a one-partition group.
    assert [r["group_label"] for r in grid["rows"]] == [r["label"] for r in grid["rows"]]
    assert [r["map_index"] for r in grid["rows"]] == list(range(PARTS))
    assert [r["cells"] for r in grid["rows"]] == [
        ["failed", "pending"] if p == FAILED_PARTITION else ["completed", "pending"] for p in range(PARTS)
    ]
    failed = [r for r in grid["rows"] if r["status"] == "failed"]
    assert [r["partition_id"] for r in failed] == [FAILED_PARTITION]
    assert "InjectedFault" in failed[0]["error"] and "words_num_filter" in failed[0]["error"]
    assert view["resume_token"] == "crashed" and view["resume_conf"] == {"resume": "crashed"}


def test_the_sensor_and_the_view_name_the_same_failed_partition(crashed_job):
    """Issue item 5: CheckpointSensor's failure message names the partition the tab shows as failed."""
    with pytest.raises(JobFailedError) as exc:
        check(crashed_job["dir"], segment_index=0)
    view = job_data.job_overview(crashed_job["dir"])
    shown = [r["partition_id"] for r in view["grid"]["rows"] if "failed" in r["cells"]]
    assert exc.value.partitions == shown == [FAILED_PARTITION]
    assert f"partition {FAILED_PARTITION}:" in str(exc.value)
    label = next(r["label"] for r in view["grid"]["rows"] if r["partition_id"] == FAILED_PARTITION)
    assert f"In Airflow's grid and the Data-Juicer job tab: {label}." in str(exc.value)
    html = views.job_page(view, api="/a", static="/s")
    assert f"1 partition(s) failed:</b> {label}" in html and "partitions_seg0[1]" in html


def test_funnel_counts_are_the_accounting_of_what_ran(crashed_job):
    funnel = job_data.job_overview(crashed_job["dir"])["funnel"]
    mapper, filt = funnel[0], funnel[1]
    nulls = len(crashed_job["nulls"])
    assert (mapper["rows_in"], mapper["failed"], mapper["rows_out"]) == (ROWS, nulls, ROWS - nulls)
    # op 1 ran on the three partitions that did not crash
    per_part_in = (ROWS // PARTS) - sum(1 for r in crashed_job["nulls"] if r < ROWS // PARTS)
    assert filt["rows_in"] == filt["rows_out"] + filt["filtered"] and filt["rows_in"] >= 3 * (per_part_in - 1)
    removed = filtered_rows(crashed_job["dir"])
    assert filt["filtered"] == len(removed) > 0


def test_failed_samples_are_paged_with_op_and_reason(crashed_job):
    nulls = crashed_job["nulls"]
    first = job_data.failed_samples(crashed_job["dir"], offset=0, limit=5)
    rest = job_data.failed_samples(crashed_job["dir"], offset=5, limit=200)
    assert first["total"] == rest["total"] == len(nulls) == ROWS // NULL_EVERY
    assert [s["input_row"] for s in first["items"] + rest["items"]] == nulls
    assert {s["op_name"] for s in first["items"]} == {"whitespace_normalization_mapper"}
    assert all("'text' is missing or null" in s["error"] for s in first["items"])
    mine = job_data.failed_samples(crashed_job["dir"], FAILED_PARTITION)
    size = ROWS // PARTS
    assert [s["input_row"] for s in mine["items"]] == [r for r in nulls if size <= r < 2 * size]


def test_partition_detail_has_its_log_events_and_failed_samples(crashed_job):
    d = job_data.partition_detail(crashed_job["dir"], FAILED_PARTITION)
    assert d["label"] == "p1 rows 50-99" and "InjectedFault" in d["error"]
    assert any("words_num_filter" in line for line in d["log"])
    kinds = [e["event_type"] for e in d["events"]]
    assert "op_failed" in kinds and kinds[-1] == "partition_failed"
    assert d["failed_samples"]["total"] == sum(1 for r in crashed_job["nulls"] if 50 <= r < 100)
    with pytest.raises(KeyError):
        job_data.partition_detail(crashed_job["dir"], 99)


def test_why_finds_filtered_failed_and_unremoved_rows(crashed_job):
    removed = filtered_rows(crashed_job["dir"])
    w = why.why_row(crashed_job["dir"], removed[0])
    assert (w["fate"], w["op_name"], w["op_index"]) == ("filtered", "words_num_filter", 1)
    assert w["sample"]["__dj__stats__"]["num_words"] < 12 and "num_words" in w["reason"]
    n = crashed_job["nulls"][0]
    w = why.why_row(crashed_job["dir"], n)
    assert (w["fate"], w["op_name"]) == ("failed", "whitespace_normalization_mapper")
    assert w["source"] == "failed/op_000_whitespace_normalization_mapper/partition_00000.jsonl"
    kept = next(r for r in range(ROWS) if r not in removed and r not in crashed_job["nulls"])
    assert why.why_row(crashed_job["dir"], kept)["fate"] in ("changed", "not_found")
    with pytest.raises(why.RowOutOfRangeError):
        why.why_row(crashed_job["dir"], ROWS)


def test_lineage_answers_first_then_failed_samples_then_the_tracer(crashed_job):
    """One look-up, in a fixed order: lineage for what it recorded, failed/ for failed rows."""
    removed = filtered_rows(crashed_job["dir"])
    w = why.why_row(crashed_job["dir"], removed[0], with_path=True)
    assert w["source"].startswith("lineage/")  # answered by lineage, not by the tracer's files
    assert w["path"]["input_row"] == removed[0] and w["path"]["fate"] == "filtered"
    n = crashed_job["nulls"][0]
    assert why.why_row(crashed_job["dir"], n)["source"].startswith("failed/")  # lineage leaves it to failed/
    assert why.explain(crashed_job["dir"], input_row=n)[0]["fate"] == "failed"


def test_throughput_adds_up_to_the_rows_through_ops(crashed_job):
    from airflow_provider_dj.engine.jobdir.events import read_events

    events = read_events(crashed_job["dir"])
    pts = job_data.throughput(events)
    assert 0 < len(pts) <= job_data.THROUGHPUT_BUCKETS
    assert sum(p["rows"] for p in pts) == sum(e["input_rows"] for e in events if e["event_type"] == "op_complete")


def test_nothing_in_the_job_directory_changes_when_the_view_reads_it(crashed_job):
    def snapshot():
        out = {}
        for root, _dirs, files in os.walk(crashed_job["dir"]):
            for f in files:
                p = os.path.join(root, f)
                out[p] = (os.path.getsize(p), os.path.getmtime(p))
        return out

    before = snapshot()
    job_data.job_overview(crashed_job["dir"])
    job_data.partition_detail(crashed_job["dir"], 1)
    job_data.failed_samples(crashed_job["dir"])
    why.why_row(crashed_job["dir"], 0)
    assert snapshot() == before
    assert json.dumps(job_data.job_overview(crashed_job["dir"]))  # the page data is JSON as it is


def test_the_gpu_probe_report_is_shown_when_there_is_one(crashed_job, tmp_path):
    import shutil

    job_dir = str(tmp_path / "with_gpu")
    shutil.copytree(crashed_job["dir"], job_dir)
    assert job_data.job_overview(job_dir)["gpu_report"] is None
    report = {"device": {"name": "NVIDIA H200", "memory_gib": 139}, "ops": [{"op_name": "text_embedding_mapper"}]}
    with open(os.path.join(job_dir, "gpu_probe_results.json"), "w") as fh:
        json.dump(report, fh)
    view = job_data.job_overview(job_dir)
    assert view["gpu_report"] == report
    html = views.job_page(view, api="/a", static="/s")
    assert "<pre id='gpu-report'>" in html and "NVIDIA H200" in html
