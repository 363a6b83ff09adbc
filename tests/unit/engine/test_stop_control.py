"""Stop requests as job-directory state (engine.jobdir.stop_control) and the segment runner's stop points.

Engine only, in-process: no Airflow, no Ray, nothing mocked.
"""

from __future__ import annotations

import json
import os
import pickle

import pytest

from airflow_provider_dj.engine.config.recipe import load_recipe
from airflow_provider_dj.engine.execution.segment_runner import run_segment
from airflow_provider_dj.engine.job.export import export_job
from airflow_provider_dj.engine.job.setup import prepare_job
from airflow_provider_dj.engine.jobdir import stop_control
from airflow_provider_dj.engine.jobdir.events import read_events
from airflow_provider_dj.engine.jobdir.stop_control import StopRequested
from airflow_provider_dj.engine.storage.checkpoints import CheckpointStore
from airflow_provider_dj.engine.storage.context import JobContext
from airflow_provider_dj.testing.sample_corpus import write_corpus

RECIPE = """\
project_name: stopunit
dataset_path: {data}
export_path: {export}
work_dir: {work}
text_keys: text
partition: {{mode: manual, num_of_partitions: 2}}
checkpoint: {{enabled: true, strategy: every_op}}
process:
  - clean_email_mapper:
  - whitespace_normalization_mapper:
  - words_num_filter: {{min_num: 5, max_num: 2000}}
  - text_length_filter: {{min_len: 20}}
"""


def _job(tmp_path, job_id: str, export: str):
    data = (
        write_corpus(str(tmp_path / "corpus.jsonl"), 120, seed=5)
        if not (tmp_path / "corpus.jsonl").exists()
        else str(tmp_path / "corpus.jsonl")
    )
    rpath = tmp_path / f"{job_id}.yaml"
    rpath.write_text(RECIPE.format(data=data, export=tmp_path / export, work=tmp_path / "work"))
    return prepare_job(load_recipe(str(rpath)), job_id=job_id)


def test_request_read_clear_round_trip(tmp_path):
    d = str(tmp_path)
    assert stop_control.read_stop_request(d) is None
    stop_control.check_stop(d)  # nothing pending: no exception
    req = stop_control.request_stop(d, force=True, requested_by="tester")
    on_disk = json.load(open(os.path.join(d, "control", "stop_request.json")))
    assert on_disk == req and on_disk["force"] is True and on_disk["requested_by"] == "tester"
    with pytest.raises(StopRequested) as info:
        stop_control.check_stop(d)
    assert info.value.force and info.value.request == req
    assert stop_control.clear_stop_request(d) is True
    assert stop_control.read_stop_request(d) is None
    assert stop_control.clear_stop_request(d) is False


def test_stop_requested_survives_pickling_with_its_request(tmp_path):
    exc = StopRequested(str(tmp_path), {"force": True, "requested_by": "x"}, partition_ids=[3])
    back = pickle.loads(pickle.dumps(exc))
    assert (back.job_dir, back.request, back.partition_ids, back.force) == (str(tmp_path), exc.request, [3], True)


def test_validate_clears_only_requests_older_than_its_start(tmp_path):
    d = str(tmp_path)
    req = stop_control.request_stop(d)
    assert stop_control.clear_stop_request_before(d, started_at=req["requested_at_epoch"] - 1) is None
    assert stop_control.read_stop_request(d) == req  # made after the run started: this run's stop, kept
    assert stop_control.clear_stop_request_before(d, started_at=req["requested_at_epoch"] + 1) == req
    assert stop_control.read_stop_request(d) is None


def test_pending_stop_stops_new_tasks_but_a_cleared_stopped_task_resumes(tmp_path):
    d = str(tmp_path)
    assert stop_control.handle_pending_stop(d, "dag.run1.part.0", 1) is None  # nothing pending
    req = stop_control.request_stop(d)
    with pytest.raises(StopRequested):
        stop_control.handle_pending_stop(d, "dag.run1.part.0", 1)  # stopped: acknowledged at try 1
    with pytest.raises(StopRequested):
        stop_control.handle_pending_stop(d, "dag.run1.part.1", 1)  # a sibling starting later stops too
    with pytest.raises(StopRequested):
        stop_control.handle_pending_stop(d, "dag.run1.part.0", 1)  # same try again: still stopped
    # The UI clear of part.0 runs it at try 2: that is a resume.
    assert stop_control.handle_pending_stop(d, "dag.run1.part.0", 2) == req
    assert stop_control.read_stop_request(d) is None
    assert os.listdir(os.path.join(d, "control", "stopped")) == []  # acknowledgements go with the request
    assert stop_control.handle_pending_stop(d, "dag.run1.part.1", 2) is None


def test_stop_lands_after_the_committed_op_and_resume_matches_a_clean_run(tmp_path):
    clean = _job(tmp_path, "clean", "clean.jsonl")
    for pid in range(2):
        run_segment(clean.job_dir, 0, pid)
    export_job(clean.job_dir)

    job = _job(tmp_path, "stopped", "stopped.jsonl")

    def stop_after_op_1(pid, op_index, n, total):
        if pid == 0 and op_index == 1:
            stop_control.request_stop(job.job_dir, requested_by="test")

    with pytest.raises(StopRequested) as info:
        run_segment(job.job_dir, 0, 0, progress=stop_after_op_1)
    assert info.value.partition_ids == [0]
    ctx = JobContext(job.job_dir)
    store = CheckpointStore(job.job_dir, ctx.storage_format)
    phash = ctx.partition(0)["content_hash"]
    committed = [i for i, op in enumerate(ctx.plan.ops) if store.is_committed(i, op.name, 0, phash, op.fingerprint)]
    assert committed == [0, 1]  # op 1's checkpoint was committed before the stop took effect
    stopped = read_events(job.job_dir, "partition_stopped")
    assert [(e["partition_id"], e["after_op"]) for e in stopped] == [(0, 1)]
    # Partition 1 starts while the request is pending: it does nothing at all.
    with pytest.raises(StopRequested):
        run_segment(job.job_dir, 0, 1)
    assert not any(
        store.is_committed(i, op.name, 1, ctx.partition(1)["content_hash"], op.fingerprint)
        for i, op in enumerate(ctx.plan.ops)
    )
    assert [e["partition_id"] for e in read_events(job.job_dir, "partition_start")] == [0]

    stop_control.clear_stop_request(job.job_dir)
    r0 = run_segment(job.job_dir, 0, 0)
    assert r0.resumed_from_op == 1 and r0.ops_run == [2, 3]
    run_segment(job.job_dir, 0, 1)
    export_job(job.job_dir)
    assert open(tmp_path / "stopped.jsonl", "rb").read() == open(tmp_path / "clean.jsonl", "rb").read()
    assert os.path.getsize(tmp_path / "clean.jsonl") > 0


def test_a_stop_raised_inside_an_op_is_reported_as_a_stop_not_an_op_failure(tmp_path, monkeypatch):
    """An expensive op's batch loop calls check_stop after each committed batch (engine.execution.batch_cursor).
    Here a wrapper around the real apply_op stands in for such an op at op 2: it runs the op, then a
    stop is requested and checked, as the batch loop would after its last batch."""
    job = _job(tmp_path, "inop", "inop.jsonl")
    from airflow_provider_dj.engine.execution import segment_runner

    real = segment_runner.apply_op

    def op_with_batch_boundary(op, i, table, skip, *rest):
        out = real(op, i, table, skip, *rest)
        if i == 2:
            stop_control.request_stop(job.job_dir, requested_by="test")
            stop_control.check_stop(job.job_dir)
        return out

    monkeypatch.setattr(segment_runner, "apply_op", op_with_batch_boundary)
    with pytest.raises(StopRequested):
        run_segment(job.job_dir, 0, 0)
    assert read_events(job.job_dir, "op_failed") == [] and read_events(job.job_dir, "partition_failed") == []
    assert [(e["op_index"], e["status"]) for e in read_events(job.job_dir, "partition_stopped")] == [(2, "stopped")]
    assert [e["op_index"] for e in read_events(job.job_dir, "checkpoint_save")] == [0, 1]


def test_unreadable_request_file_still_counts_as_a_stop(tmp_path):
    d = str(tmp_path)
    os.makedirs(os.path.join(d, "control"))
    open(os.path.join(d, "control", "stop_request.json"), "w").write("{torn")
    with pytest.raises(StopRequested) as info:
        stop_control.check_stop(d)
    assert info.value.request["requested_by"] == "unreadable request file"
