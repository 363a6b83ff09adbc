"""The embedded Ray for scheduler tasks: one local head, started once, reused by every task process."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.ports import free_port

pytestmark = pytest.mark.integration

TASK = """
from airflow_provider_dj.hooks.ray import RayHook
ray = RayHook(ray_conn_id=None).get_client()
@ray.remote(num_cpus=1)
def square(x):
    return x * x
print("RESULT", sum(ray.get([square.remote(i) for i in range(5)])))
"""


def test_two_task_processes_share_one_started_head(tmp_path, ray_cluster):
    port = free_port()  # claimed: no other test worker's server or Ray node gets it
    env = dict(os.environ, DJ_RAY_STATE_DIR=str(tmp_path), DJ_RAY_HEAD_PORT=str(port))
    env.pop("RAY_ADDRESS", None)
    try:
        first = subprocess.run([sys.executable, "-c", TASK], env=env, capture_output=True, text=True, timeout=180)
        assert "RESULT 30" in first.stdout, first.stderr[-3000:]
        head = json.load(open(tmp_path / "ray-head.json"))
        assert head["address"].endswith(f":{port}")
        second = subprocess.run([sys.executable, "-c", TASK], env=env, capture_output=True, text=True, timeout=180)
        assert "RESULT 30" in second.stdout, second.stderr[-3000:]
        assert json.load(open(tmp_path / "ray-head.json")) == head  # not restarted
        assert "starting the embedded local Ray head" in first.stdout + first.stderr
        assert "starting the embedded local Ray head" not in second.stdout + second.stderr
    finally:
        subprocess.run(
            [sys.executable, "-c", "from airflow_provider_dj.hooks.ray import stop_local_head; stop_local_head()"],
            env=env,
            timeout=120,
        )
    assert not (tmp_path / "ray-head.json").exists()
    # stopping the shared head leaves every other Ray on the machine running (here: the test session's own)
    assert ray_cluster.get(ray_cluster.remote(lambda: 42).remote()) == 42
