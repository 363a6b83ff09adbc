"""Bad input and the failure-rate guard through the real paths: ``dj-airflow run`` and ``dag.test()``.

Real Airflow (the session's metadata DB), real local Ray, real files.  The
unit tests (tests/unit/engine/test_input_schema.py, test_failure_guard.py)
cover each bad input's outcome; these prove that the DAG and the CLI act on
them: refused before any partition runs, or stopped before export and
resumable once the recipe is fixed.
"""

from __future__ import annotations

import json
import os

import pytest

from airflow_provider_dj.cli.main import main

pytestmark = pytest.mark.integration


def _recipe(tmp_path, name, data, *, parts=2, extra=""):
    path = tmp_path / f"{name}.yaml"
    path.write_text(
        f"project_name: {name}\ndataset_path: {data}\nexport_path: {tmp_path / (name + '_out.jsonl')}\n"
        f"work_dir: {tmp_path / 'work'}\npartition: {{mode: manual, num_of_partitions: {parts}}}\n"
        f"checkpoint: {{strategy: every_op}}\n{extra}"
        "process:\n  - whitespace_normalization_mapper:\n  - words_num_filter: {min_num: 1}\n"
    )
    return str(path)


def _rows(path, rows):
    with open(path, "w") as fh:
        for r in rows:
            fh.write(json.dumps(r) + "\n")
    return str(path)


def _task_states(dr):
    return {(ti.task_id, ti.map_index): str(ti.state) for ti in dr.get_task_instances()}


def test_cli_refuses_an_input_without_the_text_field_before_airflow_starts(tmp_path, capsys):
    data = _rows(tmp_path / "body.jsonl", [{"body": f"row {i}", "id": i} for i in range(8)])
    recipe = _recipe(tmp_path, "cli_nofield", data)
    assert main(["validate", recipe]) == 0  # the recipe itself is fine; the input is not
    capsys.readouterr()
    assert main(["validate", recipe, "--check-input"]) == 2
    err = capsys.readouterr().err
    assert "no row has the field 'text'" in err and "body (string)" in err and "text_keys: body" in err
    assert main(["run", recipe, "--job-id", "cli_nofield_job"]) == 2
    captured = capsys.readouterr()
    assert "no row has the field 'text'" in captured.err and "Resume token" not in captured.out
    assert not os.path.exists(tmp_path / "work" / "cli_nofield_job")  # nothing planned or written
    assert not os.path.exists(tmp_path / "cli_nofield_out.jsonl")


def test_validate_task_refuses_the_missing_field_without_retries(tmp_path, run_dag):
    data = _rows(tmp_path / "body.jsonl", [{"body": f"row {i}"} for i in range(8)])
    recipe = _recipe(tmp_path, "dag_nofield", data)
    dr = run_dag(recipe, {"job_id": "dag_nofield_job"}, retries=2)
    assert str(dr.state).endswith("failed")
    ti = next(t for t in dr.get_task_instances() if t.task_id == "validate")
    assert str(ti.state).endswith("failed") and ti.try_number == 1  # an AirflowFailException: no retry
    assert not os.path.exists(tmp_path / "work" / "dag_nofield_job" / "checkpoints")
    assert not os.path.exists(tmp_path / "dag_nofield_out.jsonl")


def test_guard_stops_the_job_before_export_and_a_fixed_recipe_resumes_it(tmp_path, run_dag):
    # Partition 0 (rows 0-9) has its text in 'body': the mapper fails every row there.
    rows = [{"id": i, "body": f"row {i}"} for i in range(10)] + [{"id": i, "text": f"row {i}"} for i in range(10, 20)]
    data = _rows(tmp_path / "half.jsonl", rows)
    recipe = _recipe(tmp_path, "dag_guard", data)
    export = tmp_path / "dag_guard_out.jsonl"
    dr = run_dag(recipe, {"job_id": "dag_guard_job"}, retries=2)
    assert str(dr.state).endswith("failed")
    # A guard trip fails the partition task without retry: a retry would trip it again.
    seg = [t for t in dr.get_task_instances() if t.task_id == "partitions_seg0" and str(t.state).endswith("failed")]
    assert len(seg) == 1 and seg[0].try_number == 1
    states = _task_states(dr)
    assert not any(task.startswith("export") and state.endswith("success") for (task, _), state in states.items())
    assert not export.exists()
    job_dir = tmp_path / "work" / "dag_guard_job"
    events = [
        json.loads(line) for name in os.listdir(job_dir) if name.startswith("events") for line in open(job_dir / name)
    ]
    tripped = [e for e in events if e["event_type"] == "op_failed" and e.get("reason") == "failure_rate_guard"]
    assert len(tripped) == 1 and tripped[0]["partition_id"] == 0
    assert "failed 10 of 10 rows (100%) in partition 0" in tripped[0]["error_message"]
    failed_file = job_dir / "failed" / "op_000_whitespace_normalization_mapper" / "partition_00000.jsonl"
    assert [json.loads(x)["id"] for x in open(failed_file)] == list(range(10))

    # The user decides those rows may fail: raise the limit for this run (dag_run.conf), resume the same job.
    dr2 = run_dag(recipe, {"resume": "dag_guard_job", "max_failed_ratio": 1}, retries=0)
    assert str(dr2.state).endswith("success")
    assert [json.loads(x)["id"] for x in open(export)] == list(range(10, 20))
    summary = json.load(open(job_dir / "job_summary.json"))
    assert summary["failed_samples"] == 10 and summary["export"]["rows"] == 10
    assert failed_file.exists()  # nothing was deleted
