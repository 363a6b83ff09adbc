"""Ray Jobs mode refuses a dashboard that does not answer before the partition task writes anything.

A real planned job directory and a real loopback port nothing listens on: the operator's execute
raises ``RayDashboardUnreachableError`` naming the address, and the job directory is as it was.
"""

from __future__ import annotations

import json
import os
import socket
from types import SimpleNamespace

import pytest

from airflow_provider_dj.engine.config.recipe import load_recipe
from airflow_provider_dj.engine.job.setup import prepare_job
from airflow_provider_dj.testing.sample_corpus import write_corpus


def _tree(root: str) -> dict[str, int]:
    return {
        os.path.relpath(os.path.join(d, f), root): os.stat(os.path.join(d, f)).st_mtime_ns
        for d, _, files in os.walk(root)
        for f in files
    }


def test_a_dead_dashboard_is_refused_naming_it_and_nothing_is_written(tmp_path, monkeypatch):
    from airflow_provider_dj.hooks.ray_jobs import RayDashboardUnreachableError
    from airflow_provider_dj.operators.partition_group import PartitionGroupOperator

    data = write_corpus(str(tmp_path / "in.jsonl"), 20, seed=5)
    recipe = tmp_path / "r.yaml"
    recipe.write_text(
        f"dataset_path: {data}\nexport_path: {tmp_path / 'out.jsonl'}\nwork_dir: {tmp_path / 'work'}\n"
        "partition: {mode: manual, num_of_partitions: 2}\nprocess:\n  - words_num_filter: {min_num: 3}\n"
    )
    prepared = prepare_job(load_recipe(recipe), job_id="dead", airflow_run_id="run1")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    address = f"http://127.0.0.1:{port}"
    monkeypatch.setenv("AIRFLOW_CONN_RAY_DEFAULT", json.dumps({"conn_type": "ray", "host": address}))
    op = PartitionGroupOperator(
        task_id="partitions_seg0",
        job_dir=prepared.job_dir,
        segment_index=0,
        execution_group=prepared.groups[0].to_dict(),
    )
    ti = SimpleNamespace(dag_id="d", run_id="run1", task_id="partitions_seg0", map_index=0, try_number=1)
    before = _tree(prepared.job_dir)
    with pytest.raises(RayDashboardUnreachableError, match=f"the Ray dashboard at {address} does not answer"):
        op.execute({"ti": ti, "dag_run": SimpleNamespace(run_id="run1")})
    assert _tree(prepared.job_dir) == before


def test_a_trigger_whose_dashboard_stops_answering_tells_the_task_once():
    import asyncio

    from airflow_provider_dj.triggers.ray_job import RayJobTrigger

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    trigger = RayJobTrigger(
        dashboard_address=f"http://127.0.0.1:{port}",
        submission_id="dj-x-s0-g0",
        job_dir="/nonexistent",
        segment_index=0,
        partition_ids=[0],
        poll_interval=0.01,
        max_poll_errors=3,
    )

    async def events() -> list:
        return [e.payload async for e in trigger.run()]

    (event,) = asyncio.run(events())
    assert event["status"] == "error" and event["submission_id"] == "dj-x-s0-g0"
    assert f"http://127.0.0.1:{port} does not answer" in event["message"]


class _BusyDashboard:
    """Ray's JobSubmissionClient as a loaded dashboard answers it: ``stop_job`` refused (RuntimeError,
    as Ray raises for an HTTP error) ``refusals`` times, then accepted.  Stands in for the dashboard
    because a real one cannot be made to refuse on cue."""

    def __init__(self, refusals: int) -> None:
        self.refusals, self.calls = refusals, 0

    def stop_job(self, submission_id: str) -> bool:
        self.calls += 1
        if self.calls <= self.refusals:
            raise RuntimeError("Request failed with status code 500: request timed out")
        return True


def _client_over(dashboard) -> object:
    from airflow_provider_dj.hooks.ray_jobs import RayJobsClient

    client = object.__new__(RayJobsClient)  # no connection: the stand-in answers instead
    client._client, client.address = dashboard, "http://127.0.0.1:1"
    return client


def test_a_stop_refused_by_a_busy_dashboard_is_asked_again_until_it_is_taken():
    dashboard = _BusyDashboard(refusals=2)
    assert _client_over(dashboard).stop("dj-x-s0-g0", pause_s=0) is True
    assert dashboard.calls == 3


def test_a_stop_refused_every_time_gives_up_after_its_attempts_and_says_so(caplog):
    dashboard = _BusyDashboard(refusals=99)
    assert _client_over(dashboard).stop("dj-x-s0-g0", attempts=3, pause_s=0) is False
    assert dashboard.calls == 3
    assert "refused 3 times: Request failed with status code 500" in caplog.text
