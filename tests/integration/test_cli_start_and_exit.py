"""`dj-airflow run`'s start-up and exit shortcuts, on the real console script and a real Ray.

* Ray is started in a parked background thread at launch
  (hooks/ray_in_process.py): the cluster must outlive the start call, since
  Ray ties its GCS and raylet to the thread that spawned them.
* The console script leaves with ``os._exit`` after killing its Ray
  processes: nothing of the run may be left running, and nothing it wrote
  may be missing.
* Under ``--airflow``, an empty input runs one placeholder partition task instead of mapping
  over nothing (dag.test sleeps a second for each empty expansion).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time

import pytest

from tests.integration.crash_helpers import DJ_AIRFLOW, kill_session, live_session_members

pytestmark = pytest.mark.integration

RECIPE = """\
project_name: {name}
dataset_path: {data}
export_path: {export}
work_dir: {work}
process:
  - whitespace_normalization_mapper:
  - words_num_filter: {{min_num: 2}}
  - document_deduplicator:
partition: {{mode: manual, num_of_partitions: {parts}}}
"""


def _left_alive(sid: int, within: float = 60.0) -> list[int]:
    """The session's processes still alive once SIGKILLed ones had ``within`` seconds to go (a slow host)."""
    deadline = time.monotonic() + within
    while True:
        left = live_session_members(sid)
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.2)


def _short_ray_tmp() -> str:
    # Ray's socket paths must fit in 107 bytes: pytest's tmp_path is too deep.
    return tempfile.mkdtemp(prefix="djr", dir="/tmp")


def _run_console_script(args: list[str], cwd, env_extra: dict | None = None) -> tuple[int, str, list[int]]:
    """Run dj-airflow in its own session; return rc, output and the session's processes still alive after exit."""
    env = dict(os.environ)
    env.pop("RAY_ADDRESS", None)
    env.update({"DJ_TASK_RETRIES": "0"}, **(env_extra or {}))
    proc = subprocess.Popen(
        [DJ_AIRFLOW, *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=cwd, env=env, start_new_session=True
    )
    try:
        out, _ = proc.communicate(timeout=240)
        return proc.returncode, out.decode(errors="replace"), _left_alive(proc.pid)
    finally:
        kill_session(proc.pid)


def _recipe(tmp_path, name: str, rows: list[str], parts: int = 2) -> str:
    data = tmp_path / f"{name}.jsonl"
    data.write_text("".join(json.dumps({"text": r}) + "\n" for r in rows))
    path = tmp_path / f"{name}.yaml"
    path.write_text(
        RECIPE.format(name=name, data=data, export=tmp_path / f"{name}_out.jsonl", work=tmp_path / "work", parts=parts)
    )
    return str(path)


def test_background_ray_outlives_its_start_call_and_dies_with_kill_children(tmp_path):
    script = textwrap.dedent("""
        import os, sys, time
        from airflow_provider_dj.hooks import ray_in_process
        assert ray_in_process.start_in_background(1)
        assert not ray_in_process.start_in_background(1), "a second call must not start a second cluster"
        ray_in_process.ensure_started(1, {})
        import ray
        assert ray.is_initialized()
        time.sleep(2)  # a cluster tied to a finished thread would be gone by now
        @ray.remote
        def double(x):
            return 2 * x
        print("result", ray.get(double.remote(21), timeout=60), flush=True)
        print("killed", ray_in_process.kill_children(), flush=True)
        os._exit(0)
    """)
    env = dict(os.environ, RAY_TMPDIR=_short_ray_tmp())
    env.pop("RAY_ADDRESS", None)
    proc = subprocess.Popen(
        [sys.executable, "-c", script],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=env,
        start_new_session=True,
    )
    try:
        out = proc.communicate(timeout=180)[0].decode(errors="replace")
        left = _left_alive(proc.pid)
    finally:
        kill_session(proc.pid)
    assert proc.returncode == 0, out[-3000:]
    assert "result 42" in out
    killed = int(out.split("killed ")[1].split()[0])
    assert killed >= 2  # at least the GCS and the raylet
    assert left == [], f"Ray processes left after kill_children: {left}"


def test_run_exits_fast_with_everything_written_and_no_ray_left(tmp_path, airflow_home):
    rows = ["alpha beta  gamma", "one", "delta epsilon", "alpha beta  gamma", "zeta eta theta"]
    recipe = _recipe(tmp_path, "cli_fast_exit", rows)
    rc, out, left = _run_console_script(
        ["run", recipe, "--job-id", "fast1", "--num-cpus", "1"], tmp_path, {"RAY_TMPDIR": _short_ray_tmp()}
    )
    assert rc == 0, out[-4000:]
    assert left == [], f"processes of the run still alive after it exited: {left}"
    exported = [json.loads(line)["text"] for line in open(tmp_path / "cli_fast_exit_out.jsonl")]
    assert exported == ["alpha beta  gamma", "delta epsilon", "zeta eta theta"]  # filtered "one", dropped the dup
    summary = json.load(open(tmp_path / "work" / "fast1" / "job_summary.json"))
    assert summary["status"] == "completed" and summary["export"]["rows"] == 3
    assert "export: 3 rows ->" in out  # the printed summary made it out before os._exit


def test_empty_input_runs_a_placeholder_partition_task(tmp_path, airflow_home):
    recipe = _recipe(tmp_path, "cli_empty", [])
    rc, out, left = _run_console_script(["run", "--airflow", recipe, "--job-id", "empty1"], tmp_path)
    assert rc == 0, out[-4000:]
    assert left == []
    assert os.path.getsize(tmp_path / "cli_empty_out.jsonl") == 0
    summary = json.load(open(tmp_path / "work" / "empty1" / "job_summary.json"))
    assert summary["status"] == "completed" and summary["input"]["total_rows"] == 0
    assert out.count("no partitions to run") >= 2  # one placeholder task per segment
    assert "No tasks to run" not in out  # dag.test's one-second idle loop was not entered
