"""The plugin object and its registration: installing the package is enough (no plugins/ file, no config)."""

from __future__ import annotations

import os

import tomllib

from airflow_provider_dj.plugins import job_view_plugin

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def test_the_entry_point_names_the_plugin_class_and_the_static_files_are_package_data():
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as fh:
        project = tomllib.load(fh)
    eps = project["project"]["entry-points"]["airflow.plugins"]
    assert eps == {"data_juicer_job_view": "airflow_provider_dj.plugins.job_view_plugin:DataJuicerJobViewPlugin"}
    module, _, attr = eps["data_juicer_job_view"].partition(":")
    assert getattr(__import__(module, fromlist=[attr]), attr) is job_view_plugin.DataJuicerJobViewPlugin
    data = project["tool"]["setuptools"]["package-data"]["airflow_provider_dj.plugins"]
    assert sorted(data) == ["static/*.css", "static/*.js"]
    static = os.path.join(ROOT, "airflow_provider_dj", "plugins", "static")
    assert sorted(os.listdir(static)) == ["job_view.css", "job_view.js"]


def test_the_plugin_is_valid_for_airflow_and_its_tabs_are_templated_relative_links():
    from airflow.plugins_manager import is_valid_plugin

    plugin = job_view_plugin.DataJuicerJobViewPlugin
    assert is_valid_plugin(plugin)
    (app,) = plugin.fastapi_apps
    assert app["url_prefix"] == "/dj-jobs"
    views = {v["destination"]: v for v in plugin.external_views}
    assert set(views) == {"dag_run", "task_instance", "nav"}
    for v in views.values():
        assert not v["href"].startswith("/") and v["href"].startswith("dj-jobs/") and v["url_route"]
    assert views["dag_run"]["href"] == "dj-jobs/dag/{DAG_ID}/run/{RUN_ID}"
    assert views["task_instance"]["href"] == "dj-jobs/dag/{DAG_ID}/run/{RUN_ID}/task/{TASK_ID}/{MAP_INDEX}"
    assert views["dag_run"]["name"] == views["task_instance"]["name"] == "Data-Juicer job"
