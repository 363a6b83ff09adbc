"""The Airflow plugin: the job view's app and its tabs, registered by the package's entry point.

``pyproject.toml`` declares ``[project.entry-points."airflow.plugins"]``, so
installing the provider is enough: no file in ``$AIRFLOW_HOME/plugins`` and
no config line.  The api-server mounts the app at ``/dj-jobs``; the UI shows

* a "Data-Juicer job" tab on every DAG run and task instance (an iframe on
  the same origin: the browser sends the UI's ``_token`` cookie, which the
  app checks), templated with the run's DAG id, run id, task id and map index;
* a "Data-Juicer jobs" entry in the navigation, listing recent jobs.

Hrefs are relative with no leading slash, so they work under a base URL.
"""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin

from airflow_provider_dj.plugins.app import URL_PREFIX, create_app

_BASE = URL_PREFIX.lstrip("/")

EXTERNAL_VIEWS = [
    {
        "name": "Data-Juicer job",
        "href": _BASE + "/dag/{DAG_ID}/run/{RUN_ID}",
        "destination": "dag_run",
        "url_route": "dj-job",
    },
    {
        "name": "Data-Juicer job",
        "href": _BASE + "/dag/{DAG_ID}/run/{RUN_ID}/task/{TASK_ID}/{MAP_INDEX}",
        "destination": "task_instance",
        "url_route": "dj-job-task",
    },
    {
        "name": "Data-Juicer jobs",
        "href": _BASE + "/",
        "destination": "nav",
        "url_route": "dj-jobs",
        "category": "browse",
    },
]


class DataJuicerJobViewPlugin(AirflowPlugin):
    name = "data_juicer_job_view"
    fastapi_apps = [{"app": create_app(), "url_prefix": URL_PREFIX, "name": "Data-Juicer job view"}]
    external_views = EXTERNAL_VIEWS
