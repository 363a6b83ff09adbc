"""The failure-rate guard (engine/execution/failure_guard.py): per partition after the op, per job before export.

Real job directories, the real planner, segment runner and exporter, in process
(the Airflow path is in tests/integration/test_bad_input_runs.py).  The rows an
op fails on are rows lacking the text key, which the engine sets aside with a
reason before the op runs (engine/execution/op_runner.split_missing_fields).
"""

from __future__ import annotations

import json
import os

import pytest

from airflow_provider_dj.engine.config.recipe import RecipeError, load_recipe, parse_recipe
from airflow_provider_dj.engine.execution.failure_guard import (
    DEFAULT_MAX_FAILED_RATIO,
    MIN_FAILED_ROWS,
    FailureRateExceededError,
    exceeded,
    load_settings,
)
from airflow_provider_dj.engine.execution.segment_runner import run_segment
from airflow_provider_dj.engine.job.export import MissingFinalCheckpointError, export_job
from airflow_provider_dj.engine.job.resume import config_diff
from airflow_provider_dj.engine.job.setup import prepare_job
from airflow_provider_dj.engine.planning.plan import build_plan
from airflow_provider_dj.engine.runner.local import run_prepared_job


@pytest.mark.parametrize(
    "failed, rows_in, limit, stops",
    [
        (0, 100, 0.5, False),
        (1, 2, 0.5, False),  # 1 of 2: not past the ratio
        (3, 4, 0.5, False),  # a handful: fewer than MIN_FAILED_ROWS and not all
        (1, 1, 0.5, True),  # every row failed
        (7, 7, 0.5, True),
        (10, 19, 0.5, True),
        (10, 20, 0.5, False),  # exactly the ratio is allowed
        (400, 1000, 0.5, False),
        (600, 1000, 0.5, True),
        (1000, 1000, 1.0, False),  # 1 turns the guard off
        (10, 1000, 0.0, True),  # 0: any failure past the minimum count
        (0, 0, 0.5, False),  # an op that received nothing
    ],
)
def test_the_rule(failed, rows_in, limit, stops):
    assert exceeded(failed, rows_in, limit) is stops


def test_defaults():
    assert DEFAULT_MAX_FAILED_RATIO == 0.5 and MIN_FAILED_ROWS == 10


def write_input(path, flags):
    """One row per flag: True = has 'text', False = has only 'body' (the op fails on it)."""
    with open(path, "w") as fh:
        for i, ok in enumerate(flags):
            fh.write(json.dumps({"id": i, "text": f"row {i}"} if ok else {"id": i, "body": f"row {i}"}) + "\n")
    return str(path)


def write_recipe(tmp_path, data, parts, extra="", op_args=""):
    out = tmp_path / "out" / "result.jsonl"
    (tmp_path / "r.yaml").write_text(
        f"dataset_path: {data}\nexport_path: {out}\npartition: {{mode: manual, num_of_partitions: {parts}}}\n"
        f"checkpoint: {{strategy: every_op}}\n{extra}"
        f"process:\n  - whitespace_normalization_mapper: {{{op_args}}}\n  - text_length_filter: {{min_len: 1}}\n"
    )
    return tmp_path / "r.yaml", out


def run_all(job, parts):
    for pid in range(parts):
        run_segment(job.job_dir, 0, pid)


def failed_rows(job_dir, op="op_000_whitespace_normalization_mapper"):
    d = os.path.join(job_dir, "failed", op)
    return sorted(json.loads(line)["id"] for name in sorted(os.listdir(d)) for line in open(os.path.join(d, name)))


def test_an_op_failing_every_row_of_a_partition_stops_it_before_its_checkpoint(tmp_path):
    data = write_input(tmp_path / "in.jsonl", [True] + [False] * 19)
    rpath, out = write_recipe(tmp_path, data, 1)
    job = prepare_job(load_recipe(rpath), job_id="g1")
    with pytest.raises(FailureRateExceededError) as e:
        run_segment(job.job_dir, 0, 0)
    msg = str(e.value)
    assert "op 0 (whitespace_normalization_mapper) failed 19 of 20 rows (95%) in partition 0 (rows 0-19)" in msg
    assert "the default max_failed_ratio = 0.5" in msg
    assert "MissingFieldError: field 'text' is missing or null in this row" in msg and "(19 rows)" in msg
    assert "process[0].whitespace_normalization_mapper.max_failed_ratio" in msg and "--resume g1" in msg
    assert failed_rows(job.job_dir) == list(range(1, 20))  # the samples and reasons are kept for the user
    assert not os.path.exists(
        os.path.join(job.job_dir, "checkpoints", "checkpoint_op_000_whitespace_normalization_mapper")
    )
    events = [
        json.loads(line)
        for name in os.listdir(job.job_dir)
        if name.startswith("events")
        for line in open(os.path.join(job.job_dir, name))
    ]
    assert any(ev["event_type"] == "op_failed" and ev.get("reason") == "failure_rate_guard" for ev in events)
    with pytest.raises(MissingFinalCheckpointError):
        export_job(job.job_dir)
    assert not out.exists()

    # The user accepts these failures: raise the limit and resume; nothing was deleted, nothing recomputed twice.
    rpath.write_text(rpath.read_text().replace("checkpoint:", "max_failed_ratio: 1\ncheckpoint:"))
    resumed = prepare_job(load_recipe(rpath, {"resume": "g1"}), job_id="g1")
    assert resumed.resumed and load_settings(job.job_dir, None).job_ratio == 1.0
    run_segment(job.job_dir, 0, 0)
    summary = export_job(job.job_dir)
    assert [json.loads(line)["id"] for line in open(out)] == [0]
    assert summary["failed_samples"] == 19 and failed_rows(job.job_dir) == list(range(1, 20))


def test_a_handful_of_bad_rows_never_stops_a_job(tmp_path):
    data = write_input(tmp_path / "in.jsonl", [True] * 10 + [False] + [True] * 8 + [False])
    rpath, out = write_recipe(tmp_path, data, 2)
    job = prepare_job(load_recipe(rpath), job_id="g2")
    summary = run_prepared_job(job).summary
    assert summary["export"]["rows"] == 18 and summary["failed_samples"] == 2
    assert failed_rows(job.job_dir) == [10, 19]


def test_failures_spread_thinly_over_partitions_stop_the_export(tmp_path):
    """3 of 5 rows fail in each of 4 partitions: no partition passes the minimum count, the job does."""
    flags = [True, True, False, False, False] * 4
    data = write_input(tmp_path / "in.jsonl", flags)
    rpath, out = write_recipe(tmp_path, data, 4)
    job = prepare_job(load_recipe(rpath), job_id="g3")
    run_all(job, 4)  # each partition: 3 of 5, a handful
    with pytest.raises(FailureRateExceededError) as e:
        export_job(job.job_dir)
    msg = str(e.value)
    assert (
        "op 0 (whitespace_normalization_mapper) failed 12 of 20 rows (60%) over the job (partitions 0, 1, 2, 3)" in msg
    )
    assert "the export was not written" in msg and "MissingFieldError: field 'text'" in msg and "(12 rows)" in msg
    assert not out.exists()
    assert not os.path.exists(os.path.join(job.job_dir, "job_summary.json"))

    # Raise the limit for that op only and resume: the partitions are done, the export now runs.
    rpath.write_text(
        rpath.read_text().replace(
            "whitespace_normalization_mapper: {}", "whitespace_normalization_mapper: {max_failed_ratio: 0.7}"
        )
    )
    resumed = prepare_job(load_recipe(rpath, {"resume": "g3"}), job_id="g3")
    assert all(c["final"] for g in resumed.groups for c in g.completed.values())  # every checkpoint reused
    assert any("max_failed_ratio" in line for line in resumed.accepted_changes)
    summary = export_job(job.job_dir)
    assert summary["export"]["rows"] == 8 and [json.loads(x)["id"] for x in open(out)] == [
        i for i, ok in enumerate(flags) if ok
    ]


def test_a_per_op_limit_overrides_the_job_limit(tmp_path):
    data = write_input(tmp_path / "in.jsonl", [True] + [False] * 12)
    rpath, out = write_recipe(tmp_path, data, 1, extra="max_failed_ratio: 0.2\n", op_args="max_failed_ratio: 1")
    job = prepare_job(load_recipe(rpath), job_id="g4")
    run_segment(job.job_dir, 0, 0)  # op 0 may fail 12 of 13 rows
    assert export_job(job.job_dir)["failed_samples"] == 12
    rpath2, _ = write_recipe(tmp_path, data, 1, extra="max_failed_ratio: 1\n", op_args="max_failed_ratio: 0.2")
    job2 = prepare_job(load_recipe(rpath2), job_id="g5")
    with pytest.raises(
        FailureRateExceededError,
        match=r"above process\[0\]\.whitespace_normalization_mapper"
        r"\.max_failed_ratio = 0\.2",
    ):
        run_segment(job2.job_dir, 0, 0)


def test_the_limit_changes_no_fingerprint_and_a_resume_accepts_it(tmp_path):
    base = {"dataset_path": "in.jsonl", "export_path": "out.jsonl", "process": [{"text_length_filter": {"min_len": 3}}]}
    a = parse_recipe(base, base_dir=str(tmp_path))
    b = parse_recipe(
        {**base, "max_failed_ratio": 0.9, "process": [{"text_length_filter": {"min_len": 3, "max_failed_ratio": 0.1}}]},
        base_dir=str(tmp_path),
    )
    assert build_plan(a).ops[0].fingerprint == build_plan(b).ops[0].fingerprint
    refused, accepted = config_diff(a.to_dict(), b.to_dict())
    assert refused == [] and len(accepted) == 2
    c = parse_recipe({**base, "process": [{"text_length_filter": {"min_len": 4}}]}, base_dir=str(tmp_path))
    assert config_diff(a.to_dict(), c.to_dict())[0]  # a real argument change is still refused


@pytest.mark.parametrize(
    "data, key",
    [
        ({"max_failed_ratio": 1.5}, "max_failed_ratio"),
        ({"max_failed_ratio": "half"}, "max_failed_ratio"),
        ({"max_failed_ratio": True}, "max_failed_ratio"),
        (
            {"process": [{"text_length_filter": {"max_failed_ratio": -0.1}}]},
            "process[0].text_length_filter.max_failed_ratio",
        ),
    ],
)
def test_bad_limits_are_refused_naming_the_key(tmp_path, data, key):
    base = {"dataset_path": "in.jsonl", "export_path": "out.jsonl", "process": ["whitespace_normalization_mapper"]}
    with pytest.raises(RecipeError) as e:
        parse_recipe({**base, **data}, base_dir=str(tmp_path))
    assert e.value.key == key and "from 0 to 1" in str(e.value)


def test_rows_lacking_the_text_key_fail_up_front_with_a_plain_reason():
    """op_runner.split_missing_fields: null/missing text fails per row whatever skip_op_error says; a
    partition whose rows have no such field at all fails every row without the row-by-row retry."""
    import pyarrow as pa

    from airflow_provider_dj.engine.execution.op_runner import apply_op
    from airflow_provider_dj.ops.registry import create_op

    op = create_op("text_length_filter", {"min_len": 1})
    t = pa.table({"id": [0, 1, 2], "text": ["abc", None, "de"]})
    for skip in (True, False):
        out = apply_op(op, 3, t, skip, needs=("text",))
        assert out.table.column("id").to_pylist() == [0, 2]
        assert out.failed_rows.column("id").to_pylist() == [1]
        assert out.failed_reasons == [
            "MissingFieldError: field 'text' is missing or null in this row; text_length_filter reads it"
        ]
        a = out.accounting
        assert (a["rows_in"], a["rows_out"], a["filtered"], a["failed"]) == (3, 2, 0, 1)
    body = pa.table({"id": [0, 1], "body": ["a", "b"]})
    out = apply_op(create_op("whitespace_normalization_mapper", {}), 0, body, False, needs=("text",))
    assert out.table.num_rows == 0 and out.failed_rows.column("id").to_pylist() == [0, 1]
    assert out.failed_reasons[0] == (
        "MissingFieldError: field 'text' is not in these rows (their fields: id, body); "
        "whitespace_normalization_mapper reads it"
    )
    assert apply_op(op, 3, t, True).accounting["failed"] == 0  # without needs: the op sees every row, as before
