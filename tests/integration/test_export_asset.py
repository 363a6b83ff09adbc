"""The export task declares the export as an Airflow Asset and annotates its event.

Real Airflow (dag.test() writes the asset event into the metadata DB through
the same execution-API path a scheduled task uses) and a real local Ray.
"""

from __future__ import annotations

import json
import os

import pytest
import xxhash

pytestmark = pytest.mark.integration


def _events_for(dag_id: str):
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        rows = session.execute(
            select(AssetEvent, AssetModel.uri)
            .join(AssetModel, AssetEvent.asset_id == AssetModel.id)
            .where(AssetEvent.source_dag_id == dag_id)
        ).all()
        return [(ev.source_task_id, uri, dict(ev.extra or {}), ev.source_run_id) for ev, uri in rows]


def test_export_emits_asset_event_with_job_rows_and_hash(make_recipe, run_dag, tmp_path):
    from airflow.sdk import Asset

    from airflow_provider_dj.dag_builder.assets import path_to_asset_uri
    from airflow_provider_dj.dag_builder.factory import build_dag
    from airflow_provider_dj.engine.config.recipe import load_recipe

    recipe_path = make_recipe("asset_event_recipe", parts=2)
    recipe = load_recipe(recipe_path)
    dag = build_dag(recipe_path, dag_id="asset_event_recipe")
    export_task = dag.get_task("export")
    assert [o.uri for o in export_task.outlets if isinstance(o, Asset)] == ["file://" + recipe.export_path]
    assert [i.uri for i in export_task.inlets if isinstance(i, Asset)] == [path_to_asset_uri(recipe.dataset_path)]

    dr = run_dag(recipe_path)
    assert dr.state == "success"
    with open(recipe.export_path, "rb") as fh:
        data = fh.read()
    events = _events_for("asset_event_recipe")
    assert len(events) == 1, events
    task_id, uri, extra, run_id = events[0]
    assert (task_id, uri, run_id) == ("export", "file://" + recipe.export_path, dr.run_id)
    job_dirs = [
        d for d in os.listdir(recipe.work_dir) if os.path.isfile(os.path.join(recipe.work_dir, d, "job_summary.json"))
    ]
    assert len(job_dirs) == 1
    with open(os.path.join(recipe.work_dir, job_dirs[0], "job_summary.json")) as fh:
        summary = json.load(fh)
    assert extra["job_id"] == summary["job_id"] == job_dirs[0]
    assert extra["rows"] == data.count(b"\n") == summary["export"]["rows"] > 0
    assert extra["checksum_xxh3_128"] == xxhash.xxh3_128_hexdigest(data)
    assert extra["recipe"] == "asset_event_recipe"
    assert extra["export_path"] == recipe.export_path and extra["export_path_overridden"] is False
    assert extra["run_id"] == dr.run_id and extra["already_complete"] is False


def test_overridden_export_path_is_named_in_the_event(make_recipe, run_dag, tmp_path):
    recipe_path = make_recipe("asset_override_recipe", parts=1)
    other = str(tmp_path / "elsewhere.jsonl")
    dr = run_dag(recipe_path, conf={"export_path": other})
    assert dr.state == "success"
    ((_task, uri, extra, _run),) = _events_for("asset_override_recipe")
    assert uri == "file://" + str(tmp_path / "asset_override_recipe_out.jsonl")  # the declared Asset
    assert extra["export_path"] == other and extra["export_path_overridden"] is True
    assert not os.path.exists(tmp_path / "asset_override_recipe_out.jsonl")
    with open(other, "rb") as fh:
        assert extra["checksum_xxh3_128"] == xxhash.xxh3_128_hexdigest(fh.read())


def test_check_export_file_refuses_a_changed_or_truncated_export(tmp_path):
    from airflow_provider_dj.engine.output.check import ExportMismatchError, check_export_file

    path = tmp_path / "x.jsonl"
    data = b'{"text": "a"}\n{"text": "b"}\n'
    path.write_bytes(data)
    digest = xxhash.xxh3_128_hexdigest(data)
    assert check_export_file(str(path), rows=2, checksum=digest) == 2
    path.write_bytes(data.replace(b"a", b"c"))
    with pytest.raises(ExportMismatchError, match="xxh3 .* announced"):
        check_export_file(str(path), rows=2, checksum=digest)
    path.write_bytes(data[:14])
    with pytest.raises(ExportMismatchError):
        check_export_file(str(path), rows=2, checksum=digest)
    with pytest.raises(ExportMismatchError, match="does not exist"):
        check_export_file(str(tmp_path / "gone.jsonl"), rows=2, checksum=digest)


def test_example_consumer_dag_is_scheduled_on_the_recipe_export(make_recipe, monkeypatch):
    """dags/example_train_on_export.py, loaded as the dag-processor would, watches the recipe's export Asset."""
    import importlib.util

    from airflow_provider_dj.engine.config.recipe import load_recipe

    recipe_path = make_recipe("asset_consumer_recipe", parts=1)
    monkeypatch.setenv("DJ_EXAMPLE_TRAIN_RECIPE", recipe_path)
    here = os.path.dirname(os.path.abspath(__file__))
    path = os.path.join(here, "..", "..", "dags", "example_train_on_export.py")
    spec = importlib.util.spec_from_file_location("example_train_on_export_under_test", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.EXPORT.uri == "file://" + load_recipe(recipe_path).export_path
    assert [a.uri for a in mod.dag.timetable.asset_condition.objects] == [mod.EXPORT.uri]
