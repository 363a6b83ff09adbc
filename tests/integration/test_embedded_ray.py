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


# -- a dead embedded head is replaced ------------------------------------------------------------------------------

#: What a task process does: connect through the hook (which checks the recorded head first), run a Ray task.
TIMED_TASK = (
    "import time; t0 = time.monotonic()\n"
    + TASK
    + "print('CONNECT_AND_RUN_S', round(time.monotonic() - t0, 1))\n"
    + "from airflow_provider_dj.hooks.ray import local_head_record; print('HEAD', local_head_record()['pid'])\n"
)

#: A task that met a dead head used to spend Ray's 60 s connect wait and fail; a replacement costs one head
#: start (5-7 s on a quiet two-core machine, several times that under a loaded one).
REPLACED_WITHIN_S = 55


def _head_processes(pid: int) -> dict[int, str]:
    from airflow_provider_dj.hooks.ray_local_head import _session_processes

    return {p: name for p, (name, _state, _cmd) in (_session_processes(pid) or {}).items()}


def _kill_head_part(pid: int, part: str) -> None:
    """SIGKILL, as the OOM killer does, one process of head ``pid`` (by name) or its whole group; then wait
    until its raylet is gone (it exits with its agents): the state a later task finds."""
    import signal
    import time

    if part == "group":
        os.killpg(pid, signal.SIGKILL)
    else:
        (victim,) = [p for p, name in _head_processes(pid).items() if name == part[:15]]  # /proc truncates names
        os.kill(victim, signal.SIGKILL)
    deadline = time.monotonic() + 60
    while "raylet" in _head_processes(pid).values():
        assert time.monotonic() < deadline, f"the raylet of head {pid} outlived its killed {part}"
        time.sleep(0.1)


def _run_tasks(env: dict, n: int) -> list[str]:
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", TIMED_TASK], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        for _ in range(n)
    ]
    outs = [p.communicate(timeout=300)[0] for p in procs]
    for out in outs:
        assert "RESULT 30" in out, out[-3000:]
    return outs


def _task_value(out: str, key: str) -> float:
    (line,) = [ln for ln in out.splitlines() if ln.startswith(key + " ")]
    return float(line.split()[1])


def test_a_dead_embedded_head_is_replaced_and_a_healthy_one_reused(tmp_path, monkeypatch, caplog):
    """A real head, killed the ways the OOM killer kills it: its dashboard agent, its raylet (each time the
    raylet exits while ``ray start`` and the GCS live on), its whole process group.  The next task replaces it within a head's start-up, not after Ray's 60 s connect wait, and
    says so; two tasks finding it dead at once start one new head; a healthy head is reused."""
    import logging

    from airflow_provider_dj.hooks import ray_local_head as heads

    port = free_port()
    env = dict(os.environ, DJ_RAY_STATE_DIR=str(tmp_path), DJ_RAY_HEAD_PORT=str(port))
    env.pop("RAY_ADDRESS", None)
    monkeypatch.setenv("DJ_RAY_STATE_DIR", str(tmp_path))
    monkeypatch.setenv("DJ_RAY_HEAD_PORT", str(port))
    caplog.set_level(logging.INFO, logger=heads.__name__)
    pids = []
    try:
        address = heads.ensure_local_head(num_cpus=1)
        pids.append(heads.local_head_record()["pid"])
        assert heads.ensure_local_head(num_cpus=1) == address  # healthy: reused, not restarted
        assert heads.local_head_record()["pid"] == pids[0]

        # Its dashboard agent killed; two tasks find it dead at once: one replaces it, both run on the new one.
        _kill_head_part(pids[0], "ray::DashboardAgent")
        outs = _run_tasks(env, 2)
        replaced = [o for o in outs if "was dead (its raylet is gone); started a new one" in o]
        assert len(replaced) == 1, outs
        assert sum(o.count("starting the embedded local Ray head") for o in outs) == 1
        pids.append(heads.local_head_record()["pid"])
        assert pids[1] != pids[0] and {_task_value(o, "HEAD") for o in outs} == {pids[1]}
        took = sorted(_task_value(o, "CONNECT_AND_RUN_S") for o in outs)
        print(f"\ntwo tasks meeting a dead head: connected and ran a Ray task in {took} s")
        assert took[-1] < REPLACED_WITHIN_S, outs
        assert _head_processes(pids[0]) == {}  # nothing of the dead head is left

        # Its raylet itself (the runtime-env agent ends the same way as the dashboard agent, and the e2e
        # scenario kills both agents): the next task, here in this process, replaces it.
        for part in ("raylet",):
            caplog.clear()
            _kill_head_part(pids[-1], part)
            assert heads.ensure_local_head(num_cpus=1) == address  # the configured port again
            pids.append(heads.local_head_record()["pid"])
            assert pids[-1] != pids[-2] and _head_processes(pids[-2]) == {}
            assert f"the embedded Ray head at {address} was dead (its raylet is gone); started a new one" in caplog.text

        # The whole process group: the task's connect finds the recorded process gone.
        _kill_head_part(pids[-1], "group")
        (out,) = _run_tasks(env, 1)
        assert f"was dead (its process {pids[-1]} is gone); started a new one" in out, out[-3000:]
        assert _task_value(out, "HEAD") == heads.local_head_record()["pid"] not in pids
        pids.append(heads.local_head_record()["pid"])
        assert _task_value(out, "CONNECT_AND_RUN_S") < REPLACED_WITHIN_S, out[-3000:]
    finally:
        heads.stop_local_head(timeout=10)
        from tests.integration.crash_helpers import kill_session

        for pid in pids:
            kill_session(pid)
