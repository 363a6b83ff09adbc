"""Resume with partitions at different checkpoint positions: one partition per execution group.

A real job directory: partitions planned from a real corpus, partition 0
stopped by an injected fault after its first op (checkpoint committed),
partition 1 run to the end, 2 and 3 untouched.  Segments run in-process
(``run_segment``), as a Ray task would run them.
"""

from __future__ import annotations

import json
import os

import pytest

from airflow_provider_dj.engine.config.recipe import parse_recipe
from airflow_provider_dj.engine.execution.segment_runner import run_segment
from airflow_provider_dj.engine.job.setup import prepare_job
from airflow_provider_dj.engine.jobdir.faults import FAULT_FILE, InjectedFault
from airflow_provider_dj.testing.sample_corpus import write_corpus


@pytest.fixture
def recipe(tmp_path):
    data = write_corpus(str(tmp_path / "corpus.jsonl"), 200, seed=5)
    return parse_recipe(
        {
            "project_name": "resume_groups",
            "dataset_path": data,
            "export_path": "out.jsonl",
            "work_dir": "work",
            "partition": {"mode": "manual", "num_of_partitions": 4},
            "checkpoint": {"enabled": True, "strategy": "every_op"},
            "process": [
                {"whitespace_normalization_mapper": None},
                {"clean_email_mapper": None},
                {"text_length_filter": {"min_len": 5}},
            ],
        },
        base_dir=str(tmp_path),
    )


def test_mixed_positions_on_resume_give_groups_of_one(recipe):
    sizes_asked = []

    def size(info, job_dir):  # what the validate task's resolver receives
        sizes_asked.append((info["num_partitions"], os.path.basename(job_dir)))
        return 4

    new = prepare_job(recipe, job_id="j1", group_size=size, airflow_run_id="run1")
    assert [list(g.partition_ids) for g in new.groups] == [[0, 1, 2, 3]]
    assert sizes_asked == [(4, "j1")]

    with open(os.path.join(new.job_dir, FAULT_FILE), "w") as fh:
        json.dump([{"point": "after_op", "partition_id": 0, "op_index": 0, "times": 1, "kind": "raise"}], fh)
    with pytest.raises(InjectedFault):
        run_segment(new.job_dir, 0, 0)
    run_segment(new.job_dir, 0, 1)

    resumed = prepare_job(recipe, job_id="j1", group_size=size, airflow_run_id="run1")
    assert resumed.resumed
    assert [list(g.partition_ids) for g in resumed.groups] == [[0], [1], [2], [3]]
    positions = {pid: c["last_op"] for g in resumed.groups for pid, c in g.completed.items()}
    assert positions == {"0": 0, "1": 2, "2": -1, "3": -1}
    with open(os.path.join(new.job_dir, "dag_execution_plan.json")) as fh:
        plan = json.load(fh)
    assert [g["partition_ids"] for g in plan["execution_groups"]] == [[0], [1], [2], [3]]


def test_same_position_on_resume_keeps_the_group(recipe):
    new = prepare_job(recipe, job_id="j2", group_size=2, airflow_run_id="run1")
    run_segment(new.job_dir, 0, 0)  # partition 0 final; 1-3 all before op 0
    resumed = prepare_job(recipe, job_id="j2", group_size=2, airflow_run_id="run1")
    assert [list(g.partition_ids) for g in resumed.groups] == [[0, 1], [2, 3]]
