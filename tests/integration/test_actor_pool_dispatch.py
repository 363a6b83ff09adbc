"""The actor pool at the dispatch layer (engine.execution.ray_dispatch.run_partitions), on the session's real local Ray.

No Airflow here: the job is prepared with the engine (``prepare_job``) and
one segment's partitions are dispatched directly, so the two paths that are
awkward through dag.test are driven exactly: an actor process that dies
mid-partition (a replacement actor runs the rest), and a kill from another
thread (what ``on_kill`` does) that must kill the pool's actors.
Nothing is mocked; faults come from engine.jobdir.faults.
"""

from __future__ import annotations

import json
import os
import threading
import time

import pytest

from airflow_provider_dj.engine.config.recipe import load_recipe
from airflow_provider_dj.engine.execution.ray_dispatch import (
    DispatchHandle,
    DispatchKilledError,
    PartitionFailedError,
    run_partitions,
)
from airflow_provider_dj.engine.job.setup import prepare_job
from airflow_provider_dj.engine.jobdir.events import read_events
from tests.integration.stateful_op_helpers import init_count

pytestmark = pytest.mark.integration

RECIPE = """\
project_name: pool_dispatch
dataset_path: {data}
export_path: {work}/out.jsonl
work_dir: {work}
partition: {{mode: manual, num_of_partitions: 3}}
checkpoint: {{enabled: true, strategy: every_op}}
process:
  - whitespace_normalization_mapper:
  - test_counting_init_mapper: {{count_file: {count}, init_s: 0.1}}
"""


def _job(tmp_path, corpus, faults: list[dict]) -> tuple[str, str]:
    count = tmp_path / "inits.txt"
    path = tmp_path / "recipe.yaml"
    path.write_text(RECIPE.format(data=corpus, work=tmp_path / "work", count=count))
    job_dir = str(prepare_job(load_recipe(str(path)), job_id="j").job_dir)
    with open(os.path.join(job_dir, "_fault_injection.json"), "w") as fh:
        json.dump(faults, fh)
    return job_dir, str(count)


def test_dead_actor_is_replaced_and_siblings_finish(tmp_path, corpus, ray_cluster):
    job_dir, count = _job(
        tmp_path, corpus, [{"point": "op_start", "partition_id": 1, "op_index": 1, "times": 1, "kind": "exit"}]
    )
    with pytest.raises(PartitionFailedError, match="partition 1 failed in segment 0"):
        run_partitions(ray_cluster, job_dir, 0, [0, 1, 2], max_in_flight=1)
    done = sorted(e["partition_id"] for e in read_events(job_dir, "partition_complete"))
    assert done == [0, 2]
    # actor 0 died with partition 1; actor 1 started for partition 2 and built the op again
    assert [e["actor_index"] for e in read_events(job_dir, "actor_start")] == [0, 1]
    assert [e["partition_id"] for e in read_events(job_dir, "op_init")] == [0, 2]
    assert init_count(count) == 2


def test_kill_kills_the_pool_actors(tmp_path, corpus, ray_cluster):
    job_dir, _ = _job(
        tmp_path, corpus, [{"point": "op_start", "partition_id": 0, "op_index": 1, "kind": "delay", "seconds": 60}]
    )
    handle = DispatchHandle()
    outcome: dict = {}

    def dispatch() -> None:
        try:
            outcome["result"] = run_partitions(
                ray_cluster, job_dir, 0, [0, 1, 2], max_in_flight=1, handle=handle, poll_s=0.2
            )
        except BaseException as exc:  # noqa: BLE001 - inspected below
            outcome["error"] = exc

    thread = threading.Thread(target=dispatch)
    thread.start()
    deadline = time.monotonic() + 120
    while not read_events(job_dir, "op_init") and time.monotonic() < deadline:
        time.sleep(0.2)  # wait until partition 0 holds the actor (inside the delay)
    assert read_events(job_dir, "op_init"), "the pool never started partition 0"
    assert len(handle.actors) == 1
    actor = handle.actors[0]
    handle.cancel("test: Airflow killed the task")
    thread.join(60)
    assert not thread.is_alive()
    assert isinstance(outcome.get("error"), DispatchKilledError)
    with pytest.raises(ray_cluster.exceptions.RayActorError):
        ray_cluster.get(actor.run.remote(2, None, {}), timeout=60)
    assert not read_events(job_dir, "partition_complete")  # nothing finished after the kill
