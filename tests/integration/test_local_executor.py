"""The local executor (``engine.run_job``) runs the DAG's steps: the same export, resume and stop.

Real parts: the DAG's run is a real Airflow ``dag.test()`` with a real local Ray; the local executor
runs its partitions inline, on a pool of local processes and as Ray tasks.  Exports are compared
byte for byte, accounting op by op, and the job directories file by file.
"""

from __future__ import annotations

import json
import os
import threading
import time

import pytest

from tests.helpers_compare import assert_same_bytes
from tests.integration.crash_helpers import events_since, write_faults

pytestmark = pytest.mark.integration


def _summary(job_dir: str) -> dict:
    with open(os.path.join(job_dir, "job_summary.json")) as fh:
        return json.load(fh)


def _accounting(summary: dict) -> list[dict]:
    keys = ("op_index", "op_name", "rows_in", "rows_out", "filtered", "duplicates", "failed")
    return [{k: o[k] for k in keys} for o in summary["ops"]]


def _checkpoint_files(job_dir: str) -> list[str]:
    root = os.path.join(job_dir, "checkpoints")
    return sorted(os.path.relpath(os.path.join(d, f), root) for d, _, files in os.walk(root) for f in files)


def _bytes(path: str) -> bytes:
    with open(path, "rb") as fh:
        return fh.read()


def test_every_executor_exports_the_dags_bytes(make_recipe, run_dag, tmp_path):
    from airflow_provider_dj.engine import run_job

    recipe = make_recipe("local_exec", parts=4)
    dag_run = run_dag(recipe, conf={"job_id": "dag"})
    assert dag_run.state == "success"
    work = tmp_path / "work"
    reference = _summary(str(work / "dag"))
    ref_bytes = _bytes(reference["export"]["path"])
    assert 0 < reference["export"]["rows"] < 400

    for job_id, kwargs in (("inline", {"workers": 1}), ("pool", {"workers": 2}), ("ray", {"executor": "ray"})):
        export = tmp_path / f"{job_id}.jsonl"
        result = run_job(recipe, job_id=job_id, overrides={"export_path": str(export)}, **kwargs)
        assert_same_bytes(_bytes(str(export)), ref_bytes, f"{job_id}: the export differs from the DAG run's")
        assert (
            result.rows == reference["export"]["rows"] and result.checksum == reference["export"]["checksum_xxh3_128"]
        )
        summary = _summary(result.job_dir)
        assert summary["status"] == "completed"
        assert _accounting(summary) == _accounting(reference)
        assert _checkpoint_files(result.job_dir) == _checkpoint_files(str(work / "dag"))
        steps = {e.get("step") for e in events_since(result.job_dir, 0, "op_start")}
        assert steps == {"partitions_seg0", "partitions_seg1"}  # each event names the DAG task of its step


def test_a_failed_partition_fails_the_job_and_resume_finishes_it(make_recipe, tmp_path):
    from airflow_provider_dj.engine import run_job
    from airflow_provider_dj.engine.execution.ray_dispatch import PartitionFailedError

    recipe = make_recipe("local_fail", parts=4)
    clean = run_job(recipe, job_id="clean", workers=1, overrides={"export_path": str(tmp_path / "clean.jsonl")})
    export = tmp_path / "failing.jsonl"
    job_dir = str(tmp_path / "work" / "failing")
    write_faults(job_dir, [{"point": "after_op", "partition_id": 1, "op_index": 2, "times": 1, "kind": "raise"}])

    with pytest.raises(PartitionFailedError, match="partition 1 failed in segment 0"):
        run_job(recipe, job_id="failing", workers=1, overrides={"export_path": str(export)})
    failed = _summary(job_dir)
    assert failed["status"] == "failed" and "partitions_seg0" in failed["error"]
    assert not export.exists()
    assert not os.path.exists(os.path.join(job_dir, "metadata", "runner.lock"))  # released: resume at once

    since = time.time()
    resumed = run_job(recipe, resume="failing", workers=1, overrides={"export_path": str(export)})
    assert_same_bytes(_bytes(str(export)), _bytes(clean.export_path))
    assert resumed.summary["status"] == "completed"
    ran = [e["op_index"] for e in events_since(job_dir, since, "op_start", partition_id=1, step="partitions_seg0")]
    assert ran == [3]  # op 2 was committed before the fault: only op 3 runs again
    others = events_since(job_dir, since, "partition_complete", step="partitions_seg0")
    assert {e["partition_id"]: e["status"] for e in others if e["partition_id"] != 1} == dict.fromkeys(
        (0, 2, 3), "already_complete"
    )


def test_a_stop_request_stops_the_job_and_resume_goes_on(make_recipe, tmp_path):
    from airflow_provider_dj.engine import JobStopped, run_job
    from airflow_provider_dj.engine.jobdir.stop_control import request_stop

    recipe = make_recipe("local_stop", parts=4)
    export = tmp_path / "stopped.jsonl"
    job_dir = str(tmp_path / "work" / "stopping")
    # Hold partition 2 before its op 1 so the stop arrives while the job runs.
    write_faults(
        job_dir, [{"point": "op_start", "partition_id": 2, "op_index": 1, "times": 1, "kind": "delay", "seconds": 3}]
    )

    def stop_when_held() -> None:
        deadline = time.time() + 60
        while time.time() < deadline and not os.path.isdir(os.path.join(job_dir, "_fault_injection.fired")):
            time.sleep(0.05)
        request_stop(job_dir, requested_by="test")

    stopper = threading.Thread(target=stop_when_held)
    stopper.start()
    with pytest.raises(JobStopped, match="STOPPED on request"):
        run_job(recipe, job_id="stopping", workers=1, overrides={"export_path": str(export)})
    stopper.join()
    assert _summary(job_dir)["status"] == "stopped"
    assert not export.exists()

    resumed = run_job(recipe, resume="stopping", workers=1, overrides={"export_path": str(export)})
    assert resumed.summary["status"] == "completed" and export.exists()
    assert resumed.rows == _summary(job_dir)["export"]["rows"] > 0
