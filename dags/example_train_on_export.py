"""Example airflow DAG: a "train" step scheduled on a recipe's export Asset.

Each successful export of the recipe's DAG emits an asset event on the
export's Asset (``file://<export_path>`` or the ``s3://`` URL), and Airflow
starts this DAG once per event: no sensor, no polling, no job-id arithmetic.
The event's ``extra`` says what was exported (job id, rows, xxh3-128 content
hash, recipe, logical date and the path actually written); the task checks
the file against it before "training" (here: it only counts and logs the
rows), so a consumer never trains on a half-written or different file.

Which recipe: ``DJ_EXAMPLE_TRAIN_RECIPE`` (a recipe file path), by default
the demo recipe ``dags/recipes/demo.yaml``.  Compare
``example_wait_for_corpus.py``, which waits with a ``CheckpointSensor``
instead (useful across Airflow deployments that share only the storage).
"""

from __future__ import annotations

import os

import pendulum
from airflow.sdk import DAG, task

from airflow_provider_dj import settings
from airflow_provider_dj.dag_builder.assets import recipe_export_asset

RECIPE = settings.get("example_train_recipe") or os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "recipes", "demo.yaml"
)
EXPORT = recipe_export_asset(RECIPE)

with DAG(
    dag_id="example_train_on_export",
    schedule=[EXPORT],
    start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
    catchup=False,
    tags=["data-juicer", "example"],
    doc_md=__doc__,
) as dag:

    @task
    def train(*, triggering_asset_events=None) -> dict:
        from airflow_provider_dj.engine.output.check import check_export_file

        events = list((triggering_asset_events or {}).get(EXPORT, []))
        if not events:
            raise RuntimeError(f"started without an asset event for {EXPORT.uri}; this DAG runs on exports only")
        extra = dict(events[-1].extra or {})
        rows = check_export_file(extra["export_path"], rows=extra["rows"], checksum=extra["checksum_xxh3_128"])
        print(
            f"training on {rows} rows of job {extra['job_id']} (recipe {extra['recipe']}, "
            f"logical date {extra.get('logical_date')}) from {extra['export_path']}"
        )
        return {"job_id": extra["job_id"], "rows": rows, "export_path": extra["export_path"]}

    train()
