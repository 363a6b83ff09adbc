"""dag_execution_plan.json: nodes per op and partition mapped to Airflow task ids; never blocks a resume."""

from __future__ import annotations

import json
import os

from airflow_provider_dj.engine.config.recipe import load_recipe
from airflow_provider_dj.engine.execution.segment_runner import run_segment
from airflow_provider_dj.engine.job.setup import prepare_job


def test_plan_document_maps_every_op_and_partition_to_its_task(new_job):
    job = new_job("planned")
    doc = json.load(open(os.path.join(job["dir"], "dag_execution_plan.json")))
    assert doc["job_id"] == "planned" and doc["version"] == 2
    assert doc["airflow_task_ids"] == [
        "gpu_preflight",
        "validate",
        "partitions_seg0",
        "barrier_seg0",
        "global_op2_document_deduplicator",
        "partitions_seg1",
        "export",
    ]
    assert [(s["index"], s["op_indices"], s["airflow_task_id"]) for s in doc["segments"]] == [
        (0, [0, 1], "partitions_seg0"),
        (1, [], "partitions_seg1"),
    ]
    assert doc["barriers"] == [
        {
            "after_segment": 0,
            "global_op_index": 2,
            "global_op_name": "document_deduplicator",
            "airflow_task_ids": ["barrier_seg0", "global_op2_document_deduplicator"],
            "waits_for": "dedup keys of all partitions from partitions_seg0",
        }
    ]
    assert doc["checkpoint_points"] == [0, 1, 2] and doc["checkpoint_strategy"] == "every_op"
    assert [g["airflow_map_index"] for g in doc["execution_groups"]] == [0, 1, 2]
    assert sum(g["input_rows"] for g in doc["execution_groups"]) == 120
    assert len(doc["nodes"]) == 3 * 3
    node = next(n for n in doc["nodes"] if n["id"] == "op1_p2")
    assert (node["airflow_task_id"], node["airflow_map_index"], node["segment"]) == ("partitions_seg0", 2, 0)
    dedup = next(n for n in doc["nodes"] if n["id"] == "op2_p1")
    assert [(p["phase"], p["airflow_task_id"], p["airflow_map_index"]) for p in dedup["phases"]] == [
        ("keys", "partitions_seg0", 1),
        ("global", "global_op2_document_deduplicator", None),
        ("apply_mask", "partitions_seg1", 1),
    ]


def test_a_missing_or_edited_plan_never_makes_a_resume_refuse(new_job):
    job = new_job("plan_resume")
    run_segment(job["dir"], 0, 0)
    plan_path = os.path.join(job["dir"], "dag_execution_plan.json")
    open(plan_path, "w").write('{"edited": true')  # torn / hand-edited
    recipe = load_recipe(job["recipe"], {"resume": "plan_resume"})
    p = prepare_job(recipe, job_id="plan_resume", airflow_run_id="run_1")
    assert p.resumed and len(p.groups) == 3
    assert json.load(open(plan_path))["job_id"] == "plan_resume"  # rewritten whole
    os.remove(plan_path)
    p = prepare_job(recipe, job_id="plan_resume", airflow_run_id="run_1")
    assert p.resumed and os.path.exists(plan_path)
