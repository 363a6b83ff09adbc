"""`dj-airflow` commands, run in-process on the session's Airflow DB and Ray."""

from __future__ import annotations

import json
import os

import pytest

from airflow_provider_dj.cli.main import main

pytestmark = pytest.mark.integration


def test_validate_reports_errors_without_running(make_recipe, capsys):
    recipe = make_recipe("cli_val")
    assert main(["validate", recipe]) == 0
    assert "op 4: document_deduplicator" in capsys.readouterr().out
    assert main(["validate", recipe, "--set", "partition.num_of_partitions=0"]) == 2
    err = capsys.readouterr().err
    assert "partition.num_of_partitions" in err and "0" in err
    assert main(["validate", recipe, "--set", "checkpoint.stratgy=every_op"]) == 2
    assert "strategy" in capsys.readouterr().err  # did-you-mean


def test_run_prints_resume_token_and_exports(make_recipe, airflow_home, ray_cluster, capsys, tmp_path):
    recipe = make_recipe("cli_run", parts=2)
    out = tmp_path / "cli_export.parquet"
    rc = main(
        [
            "run",
            recipe,
            "--set",
            "partition.num_of_partitions=3",
            "--set",
            f"export_path={out}",
            "--job-id",
            "cli_job_1",
        ]
    )
    printed = capsys.readouterr().out
    assert rc == 0
    assert "Resume token: cli_job_1." in printed
    import pyarrow.parquet as pq

    summary = json.load(open(os.path.join(os.path.dirname(recipe), "work", "cli_job_1", "job_summary.json")))
    assert pq.read_table(out).num_rows == summary["export"]["rows"] > 0
    assert summary["input"]["partitions"] == 3


def test_run_exits_nonzero_when_the_dag_run_fails(make_recipe, airflow_home, ray_cluster, capsys):
    recipe = make_recipe("cli_fail", parts=2)
    job_dir = os.path.join(os.path.dirname(recipe), "work", "cli_fail_job")
    os.makedirs(job_dir)
    with open(os.path.join(job_dir, "_fault_injection.json"), "w") as fh:
        json.dump([{"partition_id": 0, "after_op": 0, "times": 10}], fh)
    os.environ["DJ_TASK_RETRIES"] = "0"
    try:
        rc = main(["run", recipe, "--job-id", "cli_fail_job"])
    finally:
        del os.environ["DJ_TASK_RETRIES"]
    assert rc == 1
    assert "Resume with: dj-airflow run" in capsys.readouterr().err


def test_run_rejects_bad_override_before_starting_anything(make_recipe, capsys):
    recipe = make_recipe("cli_bad")
    assert main(["run", recipe, "--set", "job_id=../escape"]) == 2
    assert "job_id" in capsys.readouterr().err


def test_unlock_rejects_an_unsafe_job_id(capsys, tmp_path):
    assert main(["unlock", "../etc", "--work-dir", str(tmp_path)]) == 2
    assert "not a safe job id" in capsys.readouterr().err
