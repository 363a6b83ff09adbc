"""Fixtures for monitor/summary tests: small jobs run in-process (no Airflow, no Ray).

The engine runs one partition in-process with the same code path Ray tasks
use, so these job directories are real: real checkpoints, events and logs.
"""

from __future__ import annotations

import json
import os

import pytest

from airflow_provider_dj.engine.config.recipe import load_recipe
from airflow_provider_dj.engine.job.setup import prepare_job
from airflow_provider_dj.testing.sample_corpus import write_corpus

RECIPE = """\
project_name: monitor_unit
dataset_path: {data}
export_path: {out}
work_dir: {work}
partition: {{mode: manual, num_of_partitions: 3}}
checkpoint: {{strategy: every_op}}
process:
  - whitespace_normalization_mapper:
  - words_num_filter: {{min_num: 3}}
  - document_deduplicator:
"""

ROWS = 120


@pytest.fixture(autouse=True)
def _state_dir(tmp_path, monkeypatch):
    """Each test gets its own recent-jobs registry and no DJ_WORK_DIR from outside."""
    monkeypatch.setenv("DJ_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.delenv("DJ_WORK_DIR", raising=False)


@pytest.fixture
def new_job(tmp_path):
    """A planned job (validate done, nothing run); returns a dict with dir, work, recipe."""

    def make(job_id: str = "j1", faults: list[dict] | None = None) -> dict:
        data = write_corpus(str(tmp_path / "in.jsonl"), ROWS, seed=9)
        rpath = tmp_path / "r.yaml"
        rpath.write_text(RECIPE.format(data=data, out=tmp_path / "out.jsonl", work=tmp_path / "work"))
        job_dir = tmp_path / "work" / job_id
        if faults:
            job_dir.mkdir(parents=True)
            (job_dir / "_fault_injection.json").write_text(json.dumps(faults))
        prepared = prepare_job(load_recipe(rpath), job_id=job_id, airflow_run_id="run_1")
        from airflow_provider_dj.engine.jobdir.events import EventLog

        EventLog(prepared.job_dir, job_id, writer="validate").emit(
            "job_start", status="new", partitions=prepared.num_partitions
        )
        return {
            "prepared": prepared,
            "dir": prepared.job_dir,
            "work": str(tmp_path / "work"),
            "recipe": str(rpath),
            "id": job_id,
            "out": str(tmp_path / "out.jsonl"),
        }

    return make


def run_all(job: dict) -> dict:
    """Run every step of the planned job in this process, as the DAG's tasks would, and export."""
    from airflow_provider_dj.engine.runner.local import run_prepared_job

    return run_prepared_job(job["prepared"]).summary


@pytest.fixture
def completed_job(new_job):
    job = new_job("done")
    job["summary"] = run_all(job)
    return job


def read_lines(path) -> list[str]:
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as fh:
        return fh.read().splitlines()
