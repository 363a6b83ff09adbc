"""More partitions than Airflow may map: the validate task plans within ``[core] max_map_length``.

A real Airflow run (dag.test()) of one-row partitions, one partition per group by default
(``[dj] default_group_size`` 1, a scheduler's default), with Airflow's limit patched to 16: the
validate task reads the limit from Airflow's configuration, and Airflow's own check of the pushed
groups (its execution API) accepts them.  Without the cap the push of 40 groups is refused with a bare
"Server returned error", as 1,100 groups were against the default 1,024.  40 partitions, not 1,100:
each partition costs a Ray task and its checkpoint (about 65 ms here), and the count past the limit is
what matters; 1,100 and more partitions are planned against the real 1,024 in
tests/unit/engine/test_group_cap.py and tests/unit/engine/test_start_job_group_cap.py.
"""

from __future__ import annotations

import json
import os

import pytest

from tests.integration.conftest import read_jsonl

pytestmark = pytest.mark.integration

PARTITIONS = 40
MAX_MAP_LENGTH = 16


def test_more_partitions_than_max_map_length_run_in_that_many_task_instances(
    tmp_path, airflow_home, run_dag, monkeypatch
):
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps({"id": i, "text": f" row {i} "}) + "\n" for i in range(PARTITIONS)))
    recipe = tmp_path / "many_parts.yaml"
    recipe.write_text(
        f"project_name: it_many_partitions\ndataset_path: {data}\nexport_path: {tmp_path}/out.jsonl\n"
        f"work_dir: {tmp_path}/work\ntext_keys: text\n"
        f"partition:\n  mode: manual\n  num_of_partitions: {PARTITIONS}\n"
        "process:\n  - whitespace_normalization_mapper:\n"
    )
    monkeypatch.setenv("AIRFLOW__DJ__DEFAULT_GROUP_SIZE", "1")
    monkeypatch.setenv("AIRFLOW__CORE__MAX_MAP_LENGTH", str(MAX_MAP_LENGTH))
    dr = run_dag(str(recipe), {"job_id": "many"})
    assert str(dr.state).split(".")[-1].lower() == "success"
    mapped = [ti for ti in dr.get_task_instances() if ti.task_id == "partitions_seg0"]
    assert len(mapped) == MAX_MAP_LENGTH
    assert {str(ti.state).split(".")[-1].lower() for ti in mapped} == {"success"}
    rows = read_jsonl(tmp_path / "out.jsonl")
    assert [r["id"] for r in rows] == list(range(PARTITIONS))
    assert [r["text"] for r in rows] == [f"row {i}" for i in range(PARTITIONS)]
    plan = json.load(open(os.path.join(tmp_path, "work", "many", "dag_execution_plan.json")))
    sizes = [len(g["partition_ids"]) for g in plan["execution_groups"]]
    assert len(sizes) == MAX_MAP_LENGTH and sum(sizes) == PARTITIONS and max(sizes) - min(sizes) <= 1
