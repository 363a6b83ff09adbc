"""The review gate (docs/review_gate.md) in a real DAG run (dag.test) and through ``dj-airflow run``."""

from __future__ import annotations

import os

import pytest

from airflow_provider_dj.cli.main import main
from airflow_provider_dj.engine.jobdir.events import read_events
from tests.integration.conftest import read_jsonl

pytestmark = pytest.mark.integration


def _review_events(job_dir: str) -> list[tuple[str, str, str | None]]:
    return [
        (e["event_type"], e["status"], e.get("step") or e.get("airflow_task_id"))
        for e in read_events(job_dir)
        if e["event_type"].startswith("review_")
    ]


def test_no_bound_crossed_passes_at_once_and_the_export_runs(make_recipe, run_dag):
    recipe = make_recipe("review_pass", parts=2, extra="review:\n  max_removed_fraction: 0.95\n")
    dr = run_dag(recipe, {"job_id": "pass1"})
    assert str(dr.state).split(".")[-1].lower() == "success"
    states = {ti.task_id: str(ti.state).split(".")[-1].lower() for ti in dr.get_task_instances()}
    assert states["review"] == "success" and states["export"] == "success"
    job_dir = os.path.join(os.path.dirname(recipe), "work", "pass1")
    assert [(t, s) for t, s, _ in _review_events(job_dir)] == [("review_decided", "pass")]
    assert len(read_jsonl(recipe.replace(".yaml", "_out.jsonl"))) > 0


def test_a_dag_without_review_has_no_review_task(make_recipe):
    from airflow_provider_dj.dag_builder.factory import build_dag

    dag = build_dag(make_recipe("review_none", parts=2))
    assert "review" not in dag.task_ids
    assert dag.get_task("export").upstream_task_ids == {"partitions_seg1"}


def test_crossed_with_no_input_fails_nothing_exported_checkpoints_kept(make_recipe, capsys):
    recipe = make_recipe("review_cli", parts=2, extra="review:\n  max_removed_fraction: 0.01\n")
    rc = main(["run", recipe, "--job-id", "gated1", "--no-input", "--executor", "local", "--num-cpus", "1"])
    err = capsys.readouterr().err
    assert rc == 1
    assert "stopped by its review gate (--no-input: nobody to ask)" in err
    assert "words_num_filter removed" in err and "review.max_removed_fraction 1.0%" in err
    assert "--resume gated1" in err
    assert not os.path.exists(recipe.replace(".yaml", "_out.jsonl"))
    job_dir = os.path.join(os.path.dirname(recipe), "work", "gated1")
    assert any(d.startswith("checkpoint_op_") for d in os.listdir(os.path.join(job_dir, "checkpoints")))
    assert [(t, s) for t, s, _ in _review_events(job_dir)] == [
        ("review_decided", "review"),
        ("review_answered", "rejected"),
    ]


def test_the_dag_review_task_fails_under_no_input_in_dag_test(make_recipe, airflow_home, ray_cluster, capsys):
    """``dj-airflow run --airflow --no-input``: the DAG's review task itself refuses; export never runs."""
    recipe = make_recipe("review_dag_cli", parts=2, extra="review:\n  max_removed_fraction: 0.01\n")
    rc = main(["run", recipe, "--job-id", "gated2", "--no-input", "--airflow", "--num-cpus", "1"])
    capsys.readouterr()
    assert rc == 1
    assert not os.path.exists(recipe.replace(".yaml", "_out.jsonl"))
    job_dir = os.path.join(os.path.dirname(recipe), "work", "gated2")
    assert any(d.startswith("checkpoint_op_") for d in os.listdir(os.path.join(job_dir, "checkpoints")))
    assert _review_events(job_dir) == [
        ("review_decided", "review", "review"),
        ("review_answered", "rejected", "review"),
    ]
