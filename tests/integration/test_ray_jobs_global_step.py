"""A global step's Ray Job in Ray Jobs mode, the parts that need no cluster (engine/runner/global_job.py).

Real planned job directories: the driver refuses a submitter of another version with nothing
written (the group driver's check, reused); the step's submission ids are deterministic and apart
from the groups'; its record is kept beside theirs and a job's stop finds it; the settings that plan
the step travel in the spec; a step whose keep masks are all committed submits nothing and asks no
dashboard.  The export's Ray Job likewise (engine/runner/export_job.py): its driver, run here, writes
the in-process bytes and records the result the operator returns; its ids are attached to or walked on
as a group's; a completed job submits nothing; a job's stop finds it.  The step's and the export's runs
on a real Ray Jobs cluster are tested in tests/integration/test_ray_jobs_mode.py.
"""

from __future__ import annotations

import json
import os
import shlex
import socket
from types import SimpleNamespace

import pytest

from airflow_provider_dj import __version__
from airflow_provider_dj.engine.jobdir import ray_jobs
from airflow_provider_dj.engine.runner import global_job
from airflow_provider_dj.engine.runner.global_job import GlobalJobSpec
from airflow_provider_dj.engine.runner.group_job import EXIT_REFUSED

pytestmark = pytest.mark.integration


@pytest.fixture
def planned(tmp_path):
    from airflow_provider_dj.engine.config.recipe import load_recipe
    from airflow_provider_dj.engine.job.setup import prepare_job
    from airflow_provider_dj.testing.sample_corpus import write_corpus

    data = write_corpus(str(tmp_path / "in.jsonl"), 60, seed=5)
    recipe = tmp_path / "r.yaml"
    recipe.write_text(
        f"dataset_path: {data}\nexport_path: {tmp_path / 'out.jsonl'}\nwork_dir: {tmp_path / 'work'}\n"
        "partition: {mode: manual, num_of_partitions: 2}\nprocess:\n  - words_num_filter: {min_num: 3}\n"
        "  - document_deduplicator: {lowercase: true}\n"
    )
    return prepare_job(load_recipe(recipe), job_id="g1")


def _op_index(job_dir: str) -> int:
    from airflow_provider_dj.engine.storage.context import JobContext

    return JobContext(job_dir).plan.segments[0].keys_for_global


def _spec(job_dir: str, op_index: int, **kw) -> GlobalJobSpec:
    fields = dict(
        job_dir=job_dir,
        job_id="g1",
        op_index=op_index,
        submission_id=ray_jobs.global_base_submission_id(job_dir, "g1", op_index),
        attempt=0,
        provider_version=__version__,
        submitter_host="airflow-worker-1",
    )
    return GlobalJobSpec(**{**fields, **kw})


def _tree(root: str) -> dict[str, int]:
    return {
        os.path.relpath(os.path.join(d, f), root): os.stat(os.path.join(d, f)).st_mtime_ns
        for d, _, files in os.walk(root)
        for f in files
    }


def _dead_dashboard() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


def test_a_submitter_of_another_version_is_refused_by_the_global_driver_and_nothing_is_written(planned, capsys):
    op_index = _op_index(planned.job_dir)
    before = _tree(planned.job_dir)
    spec = _spec(planned.job_dir, op_index, provider_version="0.0.0+elsewhere")
    assert global_job.main(["--spec", spec.to_json()]) == EXIT_REFUSED
    err = capsys.readouterr().err
    assert err.startswith("refused before any work: provider version mismatch") and "0.0.0+elsewhere" in err
    assert _tree(planned.job_dir) == before and ray_jobs.read_global_record(planned.job_dir, op_index) is None


def test_the_steps_ids_spec_and_record_stand_beside_the_groups(planned, monkeypatch):
    from airflow_provider_dj import settings
    from airflow_provider_dj.engine.runner.group_job import MODULE, entrypoint
    from airflow_provider_dj.hooks.ray_jobs import global_spec

    job_dir, op_index = planned.job_dir, _op_index(planned.job_dir)
    base = ray_jobs.global_base_submission_id(job_dir, "g1", op_index)
    group_base = ray_jobs.base_submission_id(job_dir, "g1", 0, 0)
    assert base == f"{group_base.rsplit('-s0-g0', 1)[0]}-op{op_index}" and base.startswith("dj-g1-")
    assert ray_jobs.submission_id(base, 2) == f"{base}-r2" and ray_jobs.attempt_of(base, f"{base}-r2") == 2

    monkeypatch.setenv("DJ_GLOBAL_STEP_SHARDS", "3")
    settings.reset()
    spec = global_spec(job_dir=job_dir, job_id="g1", op_index=op_index, submission_id=base, attempt=0)
    assert spec.settings == {"global_step_shards": "3"} and GlobalJobSpec.from_json(spec.to_json()) == spec
    words = shlex.split(entrypoint(spec, python="/opt/py/bin/python"))
    assert words[:3] == ["/opt/py/bin/python", "-m", global_job.MODULE] and global_job.MODULE != MODULE
    assert json.loads(words[4])["op_index"] == op_index
    monkeypatch.delenv("DJ_GLOBAL_STEP_SHARDS")
    monkeypatch.setenv("AIRFLOW__DJ__GLOBAL_STEP_SHARDS", "7")  # the cluster's own value: the spec's wins
    global_job.apply_submitter_settings(spec.settings, global_job.STEP_SETTINGS)
    assert settings.get("global_step_shards") == 3

    who = {"host": "ray-head", "pid": 1, "provider_version": __version__, "dashboard_address": _dead_dashboard()}
    kw = dict(job_id="g1", op_name="document_deduplicator", attempt=0)
    ray_jobs.record_global_transition(job_dir, op_index, base, "started", identity=who, **kw)
    assert ray_jobs.read_records(job_dir) == []  # the groups' records only (the job view's table)
    ((record, entry),) = ray_jobs.running_submissions(job_dir)
    assert (record["op_index"], entry["submission_id"], entry["state"]) == (op_index, base, "started")
    from airflow_provider_dj.hooks.ray_jobs_stop import stop_running_groups

    (stop,) = stop_running_groups(job_dir, connect_timeout_s=1)
    assert (stop.op_index, stop.segment_index, stop.outcome) == (op_index, None, "not_stopped")
    assert stop.line().startswith(f"Ray job {base} (global op {op_index}) at {who['dashboard_address']}: NOT stopped")
    ray_jobs.record_global_transition(job_dir, op_index, base, "succeeded", results={"op_index": op_index}, **kw)
    assert ray_jobs.running_submissions(job_dir) == []
    assert [t["state"] for t in ray_jobs.read_global_record(job_dir, op_index)["submissions"][0]["transitions"]] == [
        "started",
        "succeeded",
    ]


def test_a_step_whose_keep_masks_are_committed_submits_nothing_and_asks_no_dashboard(planned, monkeypatch):
    from airflow_provider_dj.engine.runner.dispatch import LocalDispatcher
    from airflow_provider_dj.engine.runner.global_job import verify_global
    from airflow_provider_dj.engine.runner.steps import run_global_step, run_group
    from airflow_provider_dj.operators.global_op import GlobalOpOperator

    job_dir, op_index = planned.job_dir, _op_index(planned.job_dir)
    for group in planned.groups:
        run_group(job_dir, 0, group, LocalDispatcher(1))
    assert verify_global(job_dir, op_index) == (
        False,
        f"global op {op_index}: 0/2 keep masks committed (not yet: [0, 1])",
    )
    run_global_step(job_dir, op_index)
    assert verify_global(job_dir, op_index) == (True, f"global op {op_index}: 2/2 keep masks committed")
    monkeypatch.setenv("AIRFLOW_CONN_RAY_DEFAULT", json.dumps({"conn_type": "ray", "host": _dead_dashboard()}))
    op = GlobalOpOperator(task_id=f"global_op{op_index}", job_dir=job_dir, op_index=op_index)
    ti = SimpleNamespace(dag_id="d", run_id="r", task_id=op.task_id, map_index=-1, try_number=2)
    assert op.execute({"ti": ti, "dag_run": SimpleNamespace(run_id="r")}) == {"op_index": op_index, "skipped": True}
    assert op._ray_job is None and not os.path.exists(os.path.join(job_dir, "ray_jobs"))


# -- the export's Ray Job (engine/runner/export_job.py) ---------------------------------------------


def _run_to_export(job_dir: str, groups: list) -> None:
    """Every step before the export, in this process."""
    from airflow_provider_dj.engine.runner.dispatch import LocalDispatcher
    from airflow_provider_dj.engine.runner.steps import run_global_step, run_group
    from airflow_provider_dj.engine.storage.context import JobContext

    for seg in JobContext(job_dir).plan.segments:
        for group in groups:
            run_group(job_dir, seg.index, group, LocalDispatcher(1))
        if seg.keys_for_global is not None:
            run_global_step(job_dir, seg.keys_for_global)


def _export_op(**kw):
    from airflow_provider_dj.operators.export import ExportOperator

    return ExportOperator(task_id="export", **kw)


def _ctx(try_number: int = 1) -> dict:
    ti = SimpleNamespace(dag_id="d", run_id="r", task_id="export", map_index=-1, try_number=try_number)
    return {"ti": ti, "dag_run": SimpleNamespace(run_id="r")}


class _Finished:
    """What ``ExportOperator._finish`` asks of a Ray Jobs client after the export's Ray Job succeeded."""

    address = "http://head.example:8265"

    def logs_tail(self, sid):
        return ""


def test_the_export_driver_writes_the_in_process_bytes_and_the_operator_reads_its_record(
    planned, tmp_path, monkeypatch, capsys
):
    """In Ray Jobs mode the operator submits (a dead dashboard: refused, nothing written); the export's
    driver refuses another version with nothing written, else exports the in-process run's bytes and records
    ``finish_job``'s result, which the operator returns; a completed job submits nothing, asks no dashboard."""
    from airflow_provider_dj.engine import run_job
    from airflow_provider_dj.engine.runner import export_job
    from airflow_provider_dj.engine.runner.export_job import ExportJobSpec
    from airflow_provider_dj.hooks.ray_jobs import RayDashboardUnreachableError, export_spec

    job_dir = planned.job_dir
    reference = run_job(
        str(tmp_path / "r.yaml"), job_id="ref", workers=1, overrides={"export_path": str(tmp_path / "ref.jsonl")}
    )
    _run_to_export(job_dir, planned.groups)
    monkeypatch.setenv("AIRFLOW_CONN_RAY_DEFAULT", json.dumps({"conn_type": "ray", "host": _dead_dashboard()}))
    before = _tree(job_dir)
    with pytest.raises(RayDashboardUnreachableError):
        _export_op(job_dir=job_dir).execute(_ctx())
    assert _tree(job_dir) == before and not os.path.exists(tmp_path / "out.jsonl")

    base = ray_jobs.export_base_submission_id(job_dir, "g1")
    assert base == f"{ray_jobs.base_submission_id(job_dir, 'g1', 0, 0).rsplit('-s0-g0', 1)[0]}-export"
    spec = export_spec(job_dir=job_dir, job_id="g1", submission_id=base, attempt=0, run_id="r")
    assert ExportJobSpec.from_json(spec.to_json()) == spec and spec.metadata["dj_step"] == "export"
    other = ExportJobSpec(**{**spec.__dict__, "provider_version": "0.0.0+elsewhere"})
    assert export_job.main(["--spec", other.to_json()]) == EXIT_REFUSED
    assert capsys.readouterr().err.startswith("refused before any work: provider version mismatch")
    assert _tree(job_dir) == before and ray_jobs.read_export_record(job_dir) is None

    assert export_job.main(["--spec", spec.to_json()]) == 0  # the driver's run, here without a cluster
    with open(tmp_path / "out.jsonl", "rb") as a, open(reference.export_path, "rb") as b:
        assert a.read() == b.read()
    record = ray_jobs.read_export_record(job_dir)
    (entry,) = record["submissions"]
    assert (record["step"], entry["submission_id"], entry["state"]) == ("export", base, "succeeded")
    assert (
        entry["results"] == export_job.export_result(job_dir).to_dict() and entry["results"]["rows"] == reference.rows
    )
    assert export_job.verify_export(job_dir)[0] is True and ray_jobs.running_submissions(job_dir) == []

    op = _export_op(job_dir=job_dir)
    assert op._finish(_Finished(), base, "SUCCEEDED", _ctx()) == entry["results"]  # the XCom: the driver's record
    done = op.execute(_ctx(try_number=2))  # a retry of a completed job: verified, nothing submitted
    assert done == {**entry["results"], "already_complete": True} and op._ray_job is None
    assert len(ray_jobs.read_export_record(job_dir)["submissions"]) == 1


def test_a_running_exports_ray_job_is_found_by_a_jobs_stop(planned):
    from airflow_provider_dj.hooks.ray_jobs_stop import RayJobStop, stop_running_groups

    job_dir = planned.job_dir
    base = ray_jobs.export_base_submission_id(job_dir, "g1")
    who = {"host": "ray-head", "pid": 1, "provider_version": __version__, "dashboard_address": _dead_dashboard()}
    ray_jobs.record_export_transition(job_dir, base, "started", job_id="g1", attempt=0, identity=who)
    assert ray_jobs.read_records(job_dir) == [] and ray_jobs.read_global_records(job_dir) == []
    ((record, entry),) = ray_jobs.running_submissions(job_dir)
    assert (record["step"], entry["submission_id"]) == ("export", base)
    (stop,) = stop_running_groups(job_dir, connect_timeout_s=1)
    assert (stop.step, stop.op_index, stop.segment_index, stop.outcome) == ("export", None, None, "not_stopped")
    assert stop.line().startswith(f"Ray job {base} (export) at {who['dashboard_address']}: NOT stopped")
    assert RayJobStop(**stop.to_dict()) == stop


class _Dashboard:
    """Ray's job list as a dict of submission id -> status: what ``RayJobsClient`` asks of the dashboard."""

    def __init__(self, jobs: dict[str, str]):
        self.jobs, self.submitted, self.stopped = dict(jobs), [], []

    def get_job_info(self, sid):
        if sid not in self.jobs:
            raise RuntimeError(f"Job {sid} does not exist")
        return SimpleNamespace(status=self.jobs[sid])

    def submit_job(self, *, entrypoint, submission_id, metadata, **kw):
        self.submitted.append((submission_id, entrypoint, metadata))
        self.jobs[submission_id] = "PENDING"
        return submission_id

    def stop_job(self, sid):
        self.stopped.append(sid)
        return True


def test_the_exports_submission_is_attached_to_while_it_runs_and_resubmitted_after_a_failure(planned):
    """The export's ids walk as a group's do: a running one is attached to (a retry, a restarted worker),
    a failed one is followed by ``-r1`` whose entrypoint is the export's driver; ``on_kill`` stops it,
    and the trigger follows it with ``step="export"``."""
    from airflow_provider_dj.engine.runner import export_job
    from airflow_provider_dj.hooks.ray_jobs import RayJobsClient, export_spec
    from airflow_provider_dj.triggers.ray_job import RayJobTrigger

    job_dir = planned.job_dir
    base = ray_jobs.export_base_submission_id(job_dir, "g1")

    def spec_for(sid, attempt):
        return export_spec(job_dir=job_dir, job_id="g1", submission_id=sid, attempt=attempt)

    dashboard = _Dashboard({base: "RUNNING"})
    client = RayJobsClient("http://head.example:8265", client_factory=lambda address: dashboard)
    sub = client.submit_or_attach_export(spec_for, job_dir=job_dir, job_id="g1")
    assert (sub.submission_id, sub.action, dashboard.submitted) == (base, "attached", [])
    assert client.poll_export(base, job_dir) == ("RUNNING", export_job.verify_export(job_dir)[1])

    dashboard.jobs[base] = "FAILED"
    sub = client.submit_or_attach_export(spec_for, job_dir=job_dir, job_id="g1")
    ((sid, entrypoint, metadata),) = dashboard.submitted
    assert (sub.submission_id, sub.attempt, sub.action) == (f"{base}-r1", 1, "resubmitted") and sid == f"{base}-r1"
    words = shlex.split(entrypoint)
    assert words[1:3] == ["-m", export_job.MODULE] and json.loads(words[4])["attempt"] == 1
    assert metadata == {"dj_job_id": "g1", "dj_step": "export"}

    op = _export_op(job_dir=job_dir)
    op._ray_job = (client, sid)
    op.on_kill()
    assert dashboard.stopped == [sid]

    trigger = RayJobTrigger(dashboard_address=client.address, submission_id=sid, job_dir=job_dir, step="export")
    classpath, kwargs = trigger.serialize()
    assert kwargs["step"] == "export" and RayJobTrigger(**kwargs).serialize() == (classpath, kwargs)
    assert trigger._poll(client) == ("PENDING", "the export is not committed (no completed job_summary.json)")
