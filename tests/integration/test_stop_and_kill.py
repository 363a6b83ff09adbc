"""Graceful stop, forced stop and Airflow's kill paths, on a real Airflow (dag.test) and a real local Ray.

Nothing is mocked.  A ``delay`` fault (engine.jobdir.faults) holds one partition's
Ray task at a known point so the stop or kill lands mid-run; a helper
thread plays the user (``stop_job``) or Airflow's supervisor (SIGTERM to
the task process, which Airflow's task runner turns into ``on_kill``).
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from datetime import timedelta

import pytest

from airflow_provider_dj.client.control import job_status, stop_job
from airflow_provider_dj.engine.jobdir import stop_control
from airflow_provider_dj.engine.jobdir.events import read_events
from airflow_provider_dj.engine.jobdir.heartbeat import read_heartbeat
from airflow_provider_dj.engine.jobdir.layout import STOP_REQUEST
from airflow_provider_dj.engine.storage.checkpoints import CheckpointStore
from airflow_provider_dj.engine.storage.context import JobContext
from tests.helpers_compare import assert_same_bytes

pytestmark = pytest.mark.integration

RECIPE = """\
project_name: {name}
dataset_path: {data}
export_path: {export}
work_dir: {work}
text_keys: text
partition: {{mode: manual, num_of_partitions: 3}}
checkpoint: {{enabled: true, strategy: every_op}}
process:
  - clean_email_mapper:
  - whitespace_normalization_mapper:
  - words_num_filter: {{min_num: 5, max_num: 2000}}
  - text_length_filter: {{min_len: 20}}
  - document_deduplicator: {{lowercase: true}}
"""


#: Upper bound of a hold that ends when the stop request is written (faults.py ``until``):
#: only reached if the test's own stop never lands.
STOP_HOLD_S = 300
#: A hold that only the test ends (by writing this file in the job dir, after it checked the kill),
#: so the kill lands inside it however slow the machine is.
RELEASE = "_test_release"
#: After the release: longer than a released op takes to write its commit marker or event.
SILENCE_S = 3.0


def _release(job_dir: str) -> None:
    with open(os.path.join(job_dir, RELEASE), "w") as fh:
        fh.write("go")


def _recipe(tmp_path, corpus, name: str) -> str:
    path = tmp_path / f"{name}.yaml"
    path.write_text(
        RECIPE.format(name=name, data=corpus, export=tmp_path / f"{name}_out.jsonl", work=tmp_path / "work")
    )
    return str(path)


@pytest.fixture(scope="module")
def clean_export(tmp_path_factory, corpus, run_dag) -> bytes:
    """The export of the same recipe run without any interruption."""
    tmp = tmp_path_factory.mktemp("clean")
    dr = run_dag(_recipe(tmp, corpus, "stop_clean"), conf={"job_id": "clean"})
    assert str(dr.state).endswith("success")
    data = (tmp / "stop_clean_out.jsonl").read_bytes()
    assert data.count(b"\n") > 100
    return data


@pytest.fixture(scope="module")
def run_dag(airflow_home, ray_cluster):
    """Like conftest's run_dag, module-scoped, and able to adjust the DAG before it runs."""
    from airflow_provider_dj.cli.airflow_env import write_cli_dag_stub
    from airflow_provider_dj.dag_builder.factory import build_dag
    from airflow_provider_dj.engine.config.recipe import load_recipe, sanitize_dag_id

    def run(recipe_path: str, conf: dict | None = None, retries: int | None = None, adjust=None):
        dag_id = sanitize_dag_id(load_recipe(recipe_path).project_name)
        write_cli_dag_stub(airflow_home, recipe_path, dag_id)
        dag = build_dag(recipe_path, dag_id=dag_id, retries=retries)
        if adjust:
            adjust(dag)
        return dag.test(run_conf=conf or {})

    return run


def _fault(job_dir: str, **fault) -> None:
    os.makedirs(job_dir, exist_ok=True)
    with open(os.path.join(job_dir, "_fault_injection.json"), "w") as fh:
        json.dump([fault], fh)


def _wait_for(pred, what: str, limit: float = 120.0):
    t0 = time.time()
    while time.time() - t0 < limit:
        got = pred()
        if got:
            return got
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def _op_start(job_dir: str, pid: int, op: int) -> dict | None:
    evs = [e for e in read_events(job_dir, "op_start") if e.get("partition_id") == pid and e.get("op_index") == op]
    return evs[0] if evs else None


def _in_background(fn) -> tuple[threading.Thread, list]:
    errors: list = []

    def body():
        try:
            fn()
        except BaseException as exc:  # noqa: BLE001 - re-raised by the test
            errors.append(exc)

    t = threading.Thread(target=body, daemon=True)
    t.start()
    return t, errors


def _committed_ops(job_dir: str, pid: int) -> list[int]:
    ctx = JobContext(job_dir)
    store = CheckpointStore(job_dir, ctx.storage_format)
    phash = ctx.partition(pid)["content_hash"]
    return [
        i
        for i, op in enumerate(ctx.plan.ops)
        if not op.is_global and store.is_committed(i, op.name, pid, phash, op.fingerprint)
    ]


def _ti_states(dr) -> dict:
    return {(ti.task_id, ti.map_index): (str(ti.state), ti.try_number) for ti in dr.get_task_instances()}


def _worker_pid(event: dict) -> int:
    return int(str(event["writer"]).rsplit("_", 1)[1])


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is dead too
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_graceful_stop_mid_run_then_resume_exports_what_a_clean_run_exports(tmp_path, corpus, run_dag, clean_export):
    recipe = _recipe(tmp_path, corpus, "stop_graceful")
    job_id = "graceful"
    job_dir = str(tmp_path / "work" / job_id)
    # The first partition to reach op 2 pauses there until the stop request exists, so the stop
    # lands while op 2 is running however slowly the user's thread gets to it (the bound is only a
    # backstop).  (dag.test() runs mapped instances in no fixed order, so which partition that is is
    # read back.)
    _fault(job_dir, point="op_start", op_index=2, kind="delay", seconds=STOP_HOLD_S, until=STOP_REQUEST, times=1)
    results: dict = {}

    def first_at_op2():
        evs = [e for e in read_events(job_dir, "op_start") if e.get("op_index") == 2]
        return evs[0] if evs else None

    def user_stops():
        results["first"] = _wait_for(first_at_op2, "a partition to start op 2")["partition_id"]
        assert job_status(job_dir)["status"] == "running"
        results["stop"] = stop_job(job_id, work_dir=str(tmp_path / "work"), timeout=0)

    t, errors = _in_background(user_stops)
    dr = run_dag(recipe, conf={"job_id": job_id})  # retries=2 from the DAG default: a stop must not retry
    t.join(30)
    assert not errors, errors
    assert results["stop"].state == "stop_pending" and results["stop"].request["force"] is False
    first = results["first"]
    others = sorted({0, 1, 2} - {first})

    # The run ends failed (honest: nothing was exported), every partition task that had not finished
    # before the stop failed once (no retry), and the export never ran.
    assert str(dr.state).endswith("failed")
    states = _ti_states(dr)
    parts = {k: v for k, v in states.items() if k[0] == "partitions_seg0"}
    assert len(parts) == 3 and parts[("partitions_seg0", first)] == ("failed", 1), parts
    assert states[("export", -1)][0] == "upstream_failed"
    assert not os.path.exists(tmp_path / "stop_graceful_out.jsonl")

    # The paused partition finished op 2 and committed it; nothing after.  A partition that started after
    # the request did no work; one that ran to its end before the pause is untouched (success).
    assert _committed_ops(job_dir, first) == [0, 1, 2]
    for pid in others:
        if parts[("partitions_seg0", pid)] == ("failed", 1):
            assert _committed_ops(job_dir, pid) == []
        else:
            assert parts[("partitions_seg0", pid)] == ("success", 1) and _committed_ops(job_dir, pid) == [0, 1, 2, 3]
    stopped = read_events(job_dir, "partition_stopped")
    assert [(e["partition_id"], e.get("after_op")) for e in stopped] == [(first, 2)]
    assert read_events(job_dir, "partition_failed") == []

    summary = json.load(open(os.path.join(job_dir, "job_summary.json")))
    assert summary["status"] == "stopped"
    assert summary["resume_command"] == f"dj-airflow run {recipe} --resume {job_id}"
    assert summary["stop_request"]["requested_by"].startswith("stop_job")
    assert not os.path.exists(os.path.join(job_dir, "metadata", "runner.lock"))  # released on stop
    assert job_status(job_dir)["status"] == "stopped"

    # Resume: the stop request is cleared, partition 0 continues after op 2, the export is byte-identical.
    dr2 = run_dag(recipe, conf={"resume": job_id})
    assert str(dr2.state).endswith("success")
    assert stop_control.read_stop_request(job_dir) is None
    assert_same_bytes((tmp_path / "stop_graceful_out.jsonl").read_bytes(), clean_export)
    resumed = [e for e in read_events(job_dir, "partition_resume") if e["partition_id"] == first]
    assert resumed and resumed[0]["resumed_after_op"] == 2
    assert json.load(open(os.path.join(job_dir, "job_summary.json")))["status"] == "completed"


def test_force_stop_kills_inflight_work_and_a_half_written_checkpoint_is_not_trusted(
    tmp_path, corpus, run_dag, clean_export
):
    recipe = _recipe(tmp_path, corpus, "stop_force")
    job_id = "forced"
    job_dir = str(tmp_path / "work" / job_id)
    # Partition 0 hangs between op 2's data file and its commit marker until the test releases it.
    _fault(
        job_dir,
        point="checkpoint_mid_write",
        store="checkpoint_op",
        partition_id=0,
        op_index=2,
        kind="delay",
        seconds=STOP_HOLD_S,
        until=RELEASE,
        times=1,
    )
    seen: dict = {}

    def data_file():
        try:
            ctx = JobContext(job_dir)
            path = CheckpointStore(job_dir, ctx.storage_format).data_path(2, ctx.plan.ops[2].name, 0)
        except (FileNotFoundError, ValueError):
            return None
        return path if os.path.exists(path) else None

    def user_forces():
        seen["data_file"] = _wait_for(data_file, "op 2's data file of partition 0")
        seen["pid"] = _worker_pid(_op_start(job_dir, 0, 2))
        # The heartbeat (written within a second of a change) names op 2, for partition_stopped to name it.
        _wait_for(lambda: (read_heartbeat(job_dir, 0) or {}).get("op_index") == 2, "partition 0's heartbeat at op 2")
        seen["stop"] = stop_job(job_id, force=True, work_dir=str(tmp_path / "work"), timeout=0)

    t, errors = _in_background(user_forces)
    dr = run_dag(recipe, conf={"job_id": job_id})
    t.join(30)
    assert not errors, errors
    assert str(dr.state).endswith("failed")
    parts = {k: v for k, v in _ti_states(dr).items() if k[0] == "partitions_seg0"}
    assert parts[("partitions_seg0", 0)] == ("failed", 1), parts  # the forced stop is a stop: no retry
    assert {v[1] for v in parts.values()} == {1}, parts
    assert json.load(open(os.path.join(job_dir, "job_summary.json")))["status"] == "stopped"
    (killed,) = [e for e in read_events(job_dir, "partition_stopped") if e["partition_id"] == 0]
    assert killed["force"] is True and killed["op_index"] == 2, killed  # reported for the killed partition
    # The worker that held partition 0 was killed, not left to finish: released, it would write the
    # commit marker.  Release the hold, give a survivor time to write, and check nothing was written.
    assert not _pid_alive(seen["pid"])
    _release(job_dir)
    time.sleep(SILENCE_S)
    assert _committed_ops(job_dir, 0) == [0, 1]  # committed work kept; the half-written op 2 is not committed
    assert os.path.exists(seen["data_file"])  # the orphan data file is there, without its marker
    assert not [
        e for e in read_events(job_dir, "checkpoint_save") if e.get("partition_id") == 0 and e.get("op_index") == 2
    ]

    # Resume ignores the uncommitted file, recomputes op 2, and exports exactly the clean result.
    os.remove(os.path.join(job_dir, "_fault_injection.json"))
    dr2 = run_dag(recipe, conf={"resume": job_id})
    assert str(dr2.state).endswith("success")
    assert_same_bytes((tmp_path / "stop_force_out.jsonl").read_bytes(), clean_export)
    assert _committed_ops(job_dir, 0)[:3] == [0, 1, 2]


def _assert_killed_and_silent(job_dir: str, pid: int) -> None:
    """The Ray worker is gone and nothing for partition 0 op 2 is written once its hold is released."""
    assert not _pid_alive(pid), f"Ray worker {pid} still alive after the kill"
    _release(job_dir)
    time.sleep(SILENCE_S)
    late = [
        e
        for e in read_events(job_dir)
        if e.get("partition_id") == 0
        and e.get("op_index") == 2
        and e["event_type"] in ("op_complete", "checkpoint_save")
    ]
    assert late == [], late
    assert _committed_ops(job_dir, 0) == [0, 1]


def test_execution_timeout_cancels_the_partition_tasks_ray_work(tmp_path, corpus, run_dag):
    recipe = _recipe(tmp_path, corpus, "kill_timeout")
    job_dir = str(tmp_path / "work" / "timeout")
    # Op 2 holds until the test releases it, so the task's timeout fires inside it.  The timeout leaves
    # a loaded machine ample time to reach op 2 first (it counts from the task's start).
    _fault(
        job_dir, point="op_start", partition_id=0, op_index=2, kind="delay", seconds=STOP_HOLD_S, until=RELEASE, times=1
    )

    def adjust(dag):
        dag.get_task("partitions_seg0").partial_kwargs["execution_timeout"] = timedelta(seconds=30)

    dr = run_dag(recipe, conf={"job_id": "timeout"}, retries=0, adjust=adjust)
    assert str(dr.state).endswith("failed")
    assert _ti_states(dr)[("partitions_seg0", 0)][0] == "failed"
    ev = _op_start(job_dir, 0, 2)
    assert ev is not None
    _assert_killed_and_silent(job_dir, _worker_pid(ev))


def test_sigterm_from_the_supervisor_runs_on_kill_and_kills_the_ray_work(tmp_path, corpus, run_dag):
    """'Mark failed' / 'clear' of a running task: Airflow's supervisor sends SIGTERM to the task
    process, whose handler calls the operator's on_kill.  Under dag.test the task process is this
    one, so the thread below sends SIGTERM to it once partition 0 is inside its slow op."""
    recipe = _recipe(tmp_path, corpus, "kill_sigterm")
    job_dir = str(tmp_path / "work" / "sigterm")
    _fault(
        job_dir, point="op_start", partition_id=0, op_index=2, kind="delay", seconds=STOP_HOLD_S, until=RELEASE, times=1
    )
    seen: dict = {}

    def supervisor_kills():
        ev = _wait_for(lambda: _op_start(job_dir, 0, 2), "partition 0 to start op 2")
        seen["ev"] = ev
        os.kill(os.getpid(), signal.SIGTERM)

    previous = signal.getsignal(signal.SIGTERM)
    try:
        t, errors = _in_background(supervisor_kills)
        dr = run_dag(recipe, conf={"job_id": "sigterm"}, retries=0)
        t.join(30)
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert not errors, errors
    assert str(dr.state).endswith("failed")
    assert _ti_states(dr)[("partitions_seg0", 0)][0] == "failed"
    _assert_killed_and_silent(job_dir, _worker_pid(seen["ev"]))


def test_cli_stop_waits_for_a_dj_airflow_run_which_exits_3(tmp_path, corpus, airflow_home, ray_cluster, capsys):
    """`dj-airflow stop` (default: wait) against `dj-airflow run`; the run says STOPPED and exits 3."""
    from airflow_provider_dj.cli.main import main

    recipe = _recipe(tmp_path, corpus, "cli_stop")
    work = str(tmp_path / "work")
    job_dir = os.path.join(work, "cli_stopped")
    # Partition 0 pauses in op 1 until the stop request exists: the run cannot finish before the stop lands.
    _fault(job_dir, point="op_start", partition_id=0, op_index=1, kind="delay", seconds=STOP_HOLD_S, until=STOP_REQUEST)
    rc: dict = {}

    def user():
        _wait_for(lambda: _op_start(job_dir, 0, 1), "partition 0 to start op 1")
        rc["stop"] = main(["stop", "cli_stopped", "--work-dir", work, "--timeout", "60"])

    t, errors = _in_background(user)
    rc["run"] = main(["run", recipe, "--job-id", "cli_stopped", "--num-cpus", "2"])
    t.join(60)
    assert not errors, errors
    out, err = capsys.readouterr()
    assert rc == {"run": 3, "stop": 0}, (out, err)
    assert "stopped: job cli_stopped stopped" in out
    assert "STOPPED on request" in err and "--resume cli_stopped" in err
    assert json.load(open(os.path.join(job_dir, "job_summary.json")))["status"] == "stopped"
