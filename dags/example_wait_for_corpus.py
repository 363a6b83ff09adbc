"""Example airflow DAG: a training job that waits for tonight's corpus export.

The recipe DAG ``dj_demo`` (dags/recipes/demo.yaml) cleans the corpus; this
DAG starts "training" only once that night's job has exported.  The
CheckpointSensor reads the job directory itself, so it works across DAGs
(and across Airflow deployments sharing the storage).  It is deferrable, so
a night-long wait holds no worker slot; if the corpus job fails, the sensor
fails at once naming the failed partition instead of waiting out its
timeout.

Naming the job: a *scheduled* run of a recipe DAG uses a job id derived
from the DAG id and its logical date (see ResumeValidatorOperator), which
the ``dj_scheduled_job_id`` macro recomputes here.  Runs triggered with
``{"job_id": "..."}`` in their conf should pass that id instead.
"""

from __future__ import annotations

import os
from datetime import timedelta

import pendulum
from airflow.sdk import DAG, task

from airflow_provider_dj.sensors.checkpoint import CheckpointSensor, scheduled_job_id

# The demo recipe's work_dir (relative paths in a recipe resolve from its folder).
WORK_DIR = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "demo_output", "jobs"))

with DAG(
    dag_id="example_wait_for_corpus",
    schedule="@daily",
    start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
    catchup=False,
    user_defined_macros={"dj_scheduled_job_id": scheduled_job_id},
    tags=["data-juicer", "example"],
    doc_md=__doc__,
) as dag:
    wait = CheckpointSensor(
        task_id="wait_for_corpus_export",
        work_dir=WORK_DIR,
        job_id="{{ dj_scheduled_job_id('dj_demo', logical_date) }}",
        wait_for="export",
        deferrable=True,
        poke_interval=60,
        timeout=int(timedelta(hours=12).total_seconds()),
    )

    @task
    def train(job_dir: str) -> str:
        """Stand-in for a training step: reads the export named in the job summary."""
        import json

        from airflow_provider_dj.engine.jobdir.layout import JOB_SUMMARY

        with open(os.path.join(job_dir, JOB_SUMMARY), encoding="utf-8") as fh:
            summary = json.load(fh)
        print(f"training on {summary['export']['rows']} rows from {summary['export']['path']}")
        return summary["export"]["path"]

    wait >> train(os.path.join(WORK_DIR, "{{ dj_scheduled_job_id('dj_demo', logical_date) }}"))
