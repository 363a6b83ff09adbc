"""The job's first step plans 1,100 partitions within Airflow's default ``[core] max_map_length`` (1,024).

Real engine and real files, no Airflow and no Ray: ``start_job`` is what the ``validate`` task calls,
with the limit it read from Airflow's configuration (operators/resume_validator.py).
"""

from __future__ import annotations

import json
import os

import pytest

from airflow_provider_dj.engine.runner.start import load_effective_recipe, start_job

PARTITIONS = 1100


@pytest.fixture
def recipe_path(tmp_path):
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps({"id": i, "text": f"row {i}"}) + "\n" for i in range(PARTITIONS)))
    path = tmp_path / "many.yaml"
    path.write_text(
        f"project_name: many\ndataset_path: {data}\nexport_path: {tmp_path}/out.jsonl\nwork_dir: {tmp_path}/work\n"
        f"partition:\n  mode: manual\n  num_of_partitions: {PARTITIONS}\n"
        "process:\n  - whitespace_normalization_mapper:\n"
    )
    return str(path)


def _start(recipe_path: str, job_id: str, overrides: dict | None = None, **kwargs):
    said, warned = [], []
    started = start_job(
        load_effective_recipe(recipe_path, overrides),
        job_id=job_id,
        default_group_size=1,
        say=said.append,
        warn=warned.append,
        **kwargs,
    )
    return started, said, warned


def _sizes(started) -> list[int]:
    plan = json.load(open(os.path.join(started.job_dir, "dag_execution_plan.json")))
    assert [g["partition_ids"] for g in plan["execution_groups"]] == [list(g.partition_ids) for g in started.groups]
    return [len(g.partition_ids) for g in started.groups]


def test_default_size_is_capped_at_the_readable_cap(recipe_path):
    started, said, warned = _start(recipe_path, "readable", max_mapped_tasks=1024)
    sizes = _sizes(started)
    assert len(sizes) == 256 and set(sizes) == {4, 5} and sum(sizes) == PARTITIONS
    assert any("[dj] max_groups_per_segment=256" in line for line in said)
    assert not warned  # the planner's own default, not the recipe's


def test_the_readable_cap_off_leaves_airflows_limit(recipe_path, monkeypatch):
    monkeypatch.setenv("AIRFLOW__DJ__MAX_GROUPS_PER_SEGMENT", "0")
    sizes = _sizes(_start(recipe_path, "airflow_limit", max_mapped_tasks=1024)[0])
    assert len(sizes) == 1024 and sizes.count(2) == 76 and sizes.count(1) == 948


def test_an_explicit_size_past_airflows_limit_is_raised_with_a_warning(recipe_path):
    overrides = {"partition": {"execution_group_size": 1}}
    started, _, warned = _start(recipe_path, "explicit", overrides, max_mapped_tasks=1024)
    assert len(_sizes(started)) == 1024  # the readable cap does not bind a recipe's integer
    (warning,) = warned
    assert "partition.execution_group_size" in warning and "raised from 1 to 2" in warning
    assert "max_map_length=1024" in warning and "1100 partitions" in warning


def test_no_cap_where_nothing_maps_the_groups(recipe_path):
    assert len(_sizes(_start(recipe_path, "local")[0])) == PARTITIONS
