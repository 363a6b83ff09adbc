"""Execution groups share one actor pool: a stateful op starts once per actor, not per partition.

Real Airflow (dag.test) and the session's real local Ray; nothing is mocked.
The stateful op is a test op (tests/integration/stateful_op_helpers.py)
whose ``__init__`` sleeps and appends a line to a file, so instantiations
are counted on disk as well as in the engine's ``op_init`` events.  Its
non-stateful twin runs the same recipe as plain Ray tasks for the
reference export.
"""

from __future__ import annotations

import json
import os
import time

import pytest

from airflow_provider_dj.engine.jobdir.events import read_events
from tests.integration.stateful_op_helpers import init_count

pytestmark = pytest.mark.integration

RECIPE = """\
project_name: {name}
dataset_path: {data}
export_path: {export}
work_dir: {work}
text_keys: text
partition: {{mode: manual, num_of_partitions: 6, execution_group_size: 3, max_concurrent_partitions: 1}}
checkpoint: {{enabled: true, strategy: every_op}}
process:
  - whitespace_normalization_mapper:
  - {op}: {{count_file: {count}, init_s: 0.3}}
  - words_num_filter: {{min_num: 5}}
"""
OP = 1  # the counting op's index
LAST = "checkpoint_op_002_words_num_filter"


def _recipe(tmp_path, corpus, name: str, op: str) -> tuple[str, str, str]:
    path = tmp_path / f"{name}.yaml"
    export = tmp_path / f"{name}_out.jsonl"
    count = tmp_path / f"{name}_inits.txt"
    path.write_text(RECIPE.format(name=name, data=corpus, export=export, work=tmp_path / "work", op=op, count=count))
    return str(path), str(export), str(count)


def _state(dr) -> str:
    return str(dr.state).rsplit(".", 1)[-1].lower()


@pytest.fixture(scope="module")
def plain_export(tmp_path_factory, corpus, airflow_home, ray_cluster) -> bytes:
    """The same pipeline as plain Ray tasks: the op is built once per partition (6 inits)."""
    from airflow_provider_dj.cli.airflow_env import write_cli_dag_stub
    from airflow_provider_dj.dag_builder.factory import build_dag

    tmp = tmp_path_factory.mktemp("plain")
    recipe, export, count = _recipe(tmp, corpus, "pool_plain_ref", "test_counting_init_mapper_plain")
    write_cli_dag_stub(airflow_home, recipe, "pool_plain_ref")
    dr = build_dag(recipe, dag_id="pool_plain_ref").test(run_conf={"job_id": "plain"})
    assert _state(dr) == "success"
    assert init_count(count) == 6  # one per partition: what the pool saves
    assert not read_events(str(tmp / "work" / "plain"), "actor_start")  # no stateful op: no pool
    data = open(export, "rb").read()
    assert data.count(b"\n") > 300
    return data


def test_pool_inits_the_op_once_per_group_and_exports_the_same(tmp_path, corpus, run_dag, plain_export):
    recipe, export, count = _recipe(tmp_path, corpus, "pool_once", "test_counting_init_mapper")
    dr = run_dag(recipe, {"job_id": "pool"}, retries=0)
    assert _state(dr) == "success"
    job_dir = str(tmp_path / "work" / "pool")

    assert init_count(count) == 2, "the stateful op must be built once per execution group (2 groups of 3)"
    inits = read_events(job_dir, "op_init")
    assert [(e["op_index"], e["op_name"]) for e in inits] == [(OP, "test_counting_init_mapper")] * 2
    assert sorted(e["partition_id"] for e in inits) == [0, 3]  # the first partition of each group pays it
    assert all(e["duration"] >= 0.3 for e in inits)  # the sleep in __init__ is inside the measured set-up
    starts = read_events(job_dir, "actor_start")
    assert len(starts) == 2 and {e["segment"] for e in starts} == {0}
    done = [e for e in read_events(job_dir, "partition_complete") if e.get("status") == "success"]
    assert sorted(e["partition_id"] for e in done) == list(range(6))
    # one actor per group ran all three partitions in one process
    pids = {e["partition_id"]: e["writer"] for e in read_events(job_dir, "op_complete") if e["op_index"] == OP}
    assert pids[0] == pids[1] == pids[2] and pids[3] == pids[4] == pids[5]
    (planning,) = read_events(job_dir, "execution_planning")
    assert planning["max_in_flight_per_group"] == 1

    assert open(export, "rb").read() == plain_export


def test_failed_partition_lets_siblings_finish_then_resume(tmp_path, corpus, run_dag, plain_export):
    recipe, export, count = _recipe(tmp_path, corpus, "pool_fail", "test_counting_init_mapper")
    job_dir = tmp_path / "work" / "poolfail"
    os.makedirs(job_dir)
    (job_dir / "_fault_injection.json").write_text(
        json.dumps([{"point": "op_start", "partition_id": 1, "op_index": OP, "times": 1, "kind": "raise"}])
    )

    dr = run_dag(recipe, {"job_id": "poolfail"}, retries=0)
    assert _state(dr) == "failed"
    assert not os.path.exists(export)
    assert os.listdir(job_dir / "_fault_injection.fired") == ["fault0_0"]  # partition 1 raised at op 1's start
    done = sorted(e["partition_id"] for e in read_events(str(job_dir), "partition_complete"))
    assert done == [0, 2, 3, 4, 5], "the siblings of the failed partition (and the other group) must finish"
    # the actor survived the op's exception: still one init per group
    assert init_count(count) == 2
    committed = sorted(f for f in os.listdir(job_dir / "checkpoints" / LAST) if f.endswith(".commit.json"))
    assert committed == [f"partition_0000{p}.commit.json" for p in (0, 2, 3, 4, 5)]
    ws = sorted(
        f
        for f in os.listdir(job_dir / "checkpoints" / "checkpoint_op_000_whitespace_normalization_mapper")
        if f.endswith(".commit.json")
    )
    assert "partition_00001.commit.json" in ws  # partition 1's work before the failing op is kept

    since = time.time()
    dr = run_dag(recipe, {"resume": "poolfail"}, retries=0)
    assert _state(dr) == "success"
    assert open(export, "rb").read() == plain_export
    again = read_events(str(job_dir), "partition_complete", since=since)
    assert sorted(e["partition_id"] for e in again if e.get("status") == "already_complete") == [0, 2, 3, 4, 5]
    resumed = read_events(str(job_dir), "partition_resume", since=since)
    assert [(e["partition_id"], e["resumed_after_op"]) for e in resumed] == [(1, 0)]
    # only partition 1 had work: one actor built the op once; the finished group built nothing
    assert [e["partition_id"] for e in read_events(str(job_dir), "op_init", since=since)] == [1]
    assert init_count(count) == 3
