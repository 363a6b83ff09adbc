"""A real job directory whose partition 1 failed after a crash, run in-process (no Airflow, no Ray).

The engine runs one partition in-process with the code path Ray tasks use, so
checkpoints, events, logs, failed samples and tracer candidates are real.
"""

from __future__ import annotations

import json
import os

import pytest

from airflow_provider_dj.engine.config.recipe import load_recipe
from airflow_provider_dj.engine.execution.segment_runner import run_segment
from airflow_provider_dj.engine.job.setup import prepare_job
from airflow_provider_dj.engine.jobdir import lock as job_lock
from airflow_provider_dj.engine.jobdir.events import EventLog
from airflow_provider_dj.engine.jobdir.faults import InjectedFault
from tests.helpers_job_view import crash_fault, view_recipe, write_view_input

DAG_ID = "dj_view"
RUN_ID = "manual__2026-12-01T03:00:00+00:00"
PARTS = 4
ROWS = 200
FAILED_PARTITION = 1


@pytest.fixture(scope="module")
def crashed_job(tmp_path_factory):
    """{"dir", "work", "nulls"}: partitions 0, 2, 3 finished segment 0; partition 1 crashed as op 1 started."""
    tmp = tmp_path_factory.mktemp("view")
    mp = pytest.MonkeyPatch()
    mp.setenv("DJ_STATE_DIR", str(tmp / "state"))
    mp.setenv("DJ_WORK_DIR", str(tmp / "work"))
    data, nulls = write_view_input(str(tmp / "in.jsonl"), ROWS)
    rpath = tmp / "r.yaml"
    rpath.write_text(view_recipe("view_unit", data, str(tmp / "out.jsonl"), str(tmp / "work"), PARTS))
    job_dir = tmp / "work" / "crashed"
    job_dir.mkdir(parents=True)
    (job_dir / "_fault_injection.json").write_text(json.dumps(crash_fault(FAILED_PARTITION)))
    prepared = prepare_job(load_recipe(rpath), job_id="crashed", airflow_run_id=RUN_ID)
    defaults = {"airflow_dag_id": DAG_ID, "airflow_run_id": RUN_ID}
    EventLog(prepared.job_dir, "crashed", writer="validate", defaults=defaults).emit(
        "job_start", status="new", partitions=PARTS
    )
    for pid in range(PARTS):
        if pid == FAILED_PARTITION:
            with pytest.raises(InjectedFault):
                run_segment(prepared.job_dir, 0, pid, try_number=1)
        else:
            run_segment(prepared.job_dir, 0, pid, try_number=1)
    job_lock.release(prepared.job_dir, RUN_ID)
    yield {"dir": prepared.job_dir, "work": str(tmp / "work"), "nulls": nulls, "tmp": tmp}
    mp.undo()


def resume_failed_partition(job_dir: str) -> None:
    """What a clear of the failed task does: the partition runs again (try 2) from its checkpoint."""
    run_segment(job_dir, 0, FAILED_PARTITION, try_number=2)


def read_json(path: str):
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


def listdir(path: str) -> list[str]:
    return sorted(os.listdir(path)) if os.path.isdir(path) else []
