"""The run-time layer of max_concurrent_partitions, through a real DAG run on the session's local Ray.

One execution group of 4 partitions with ``max_concurrent_partitions: 1``:
the validate task resolves the limit and records it (``execution_planning``
event), the group carries it, and the dispatcher keeps one Ray task in
flight, which the partitions' own start/complete events show.
"""

from __future__ import annotations

import os

from airflow_provider_dj.engine.jobdir.events import read_events


def test_group_runs_one_partition_at_a_time(tmp_path, corpus, run_dag):
    recipe = tmp_path / "inflight.yaml"
    recipe.write_text(
        f"project_name: inflight_limit\ndataset_path: {corpus}\nexport_path: {tmp_path / 'out.jsonl'}\n"
        f"work_dir: {tmp_path / 'work'}\n"
        "partition: {mode: manual, num_of_partitions: 4, execution_group_size: 4, max_concurrent_partitions: 1}\n"
        "checkpoint: {enabled: true, strategy: every_op}\n"
        "process:\n  - whitespace_normalization_mapper:\n  - clean_email_mapper:\n"
    )
    dr = run_dag(str(recipe))
    assert str(dr.state).endswith("success")
    (job_id,) = [n for n in os.listdir(tmp_path / "work") if not n.startswith("_")]  # "_…": what jobs share
    job_dir = str(tmp_path / "work" / job_id)
    (planning,) = read_events(job_dir, "execution_planning")
    assert planning["execution_group_size"]["size"] == 4
    assert planning["max_concurrent_partitions"] == {
        "value": 1,
        "source": "recipe",
        "reason": "partition.max_concurrent_partitions=1",
    }
    assert planning["max_in_flight_per_group"] == 1
    starts = {e["partition_id"]: e["timestamp"] for e in read_events(job_dir, "partition_start")}
    ends = {e["partition_id"]: e["timestamp"] for e in read_events(job_dir, "partition_complete")}
    assert sorted(starts) == sorted(ends) == [0, 1, 2, 3]
    spans = sorted((starts[p], ends[p]) for p in starts)
    for (_, end), (next_start, _) in zip(spans, spans[1:]):
        assert next_start >= end  # never two partitions in flight at once
    with open(tmp_path / "out.jsonl") as fh:
        assert sum(1 for _ in fh) == 400  # the session corpus: no row lost or duplicated
