"""A recipe's input and export as Airflow Assets, so downstream DAGs can be scheduled on fresh data.

Why: a nightly corpus job is usually followed by a consumer (training, an
evaluation, a publish step).  Polling the job directory works
(``CheckpointSensor``), but Airflow's native answer is data-aware
scheduling: the ``export`` task declares the export as an outlet Asset, each
successful export emits an asset event, and a DAG scheduled on that Asset
runs once per event.  The event's ``extra`` says which export it was (job
id, rows, content hash, recipe, the run's logical date and the path actually
written), so a consumer can check what it got before using it.

URIs: a local path becomes ``file://`` + its absolute path; an object-store
URL (``s3://...``) is used as is.  The recipe's parse-time paths are what
the DAG declares; a run whose ``dag_run.conf`` overrides ``export_path``
still emits on the declared Asset, with the path it really wrote in
``extra["export_path"]`` (``extra["export_path_overridden"]`` is true):
Airflow's outlets are fixed when the DAG is parsed, and an event that does
not happen would hide the run from the consumer.

Templated paths (``export_path: /data/clean/{{ ds }}.jsonl``, docs/nightly.md):
an Asset URI is fixed at parse time, so it cannot be the path a run renders.
The DAG declares the template's pattern instead, every Jinja expression
replaced by ``*`` (``file:///data/clean/*.jsonl``, the set of files the
recipe writes, as a glob input's Asset already names a set); each event
carries the rendered path in ``extra["export_path"]`` and the template in
``extra["export_path_template"]``.  A template with no static start
(``{{ var.value.root }}/x.jsonl``) gets an ``x-dj-airflow:`` URI of its pattern.

Partition keys: Airflow 3.2+ routes an event that carries a partition key
only to partition-aware consumers (a plain ``schedule=[asset]`` DAG ignores
it), so the export does not invent one: an event carries the DAG run's own
partition key when the run has one (Airflow attaches it), and always the
logical date in ``extra["logical_date"]`` (``extra["partition_key"]``
carries the same value, for consumers that key their work by it).

This module is on the Airflow side of the layering (operators and the DAG
factory use it); the engine knows nothing of Assets.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from airflow.sdk import Context

ASSET_GROUP = "data-juicer"


def path_to_asset_uri(path: str) -> str:
    """``file:///abs/path`` for a local path; an fsspec URL (``s3://b/k``) unchanged."""
    if "://" in path:
        return path
    return "file://" + os.path.abspath(path)


def asset_uri(path: str, *, templated: bool = False) -> str:
    """The URI of a recipe path; a templated one is named by its pattern (``{{ ds }}`` -> ``*``)."""
    if not templated:
        return path_to_asset_uri(path)
    from airflow_provider_dj.engine.config.templates import template_pattern

    pattern = template_pattern(path)
    if "://" in pattern or pattern.startswith("/"):
        return path_to_asset_uri(pattern)
    return "x-dj-airflow:" + pattern


def export_asset(export_path: str, *, templated: bool = False):
    """The Asset a recipe's export task declares as its outlet."""
    from airflow.sdk import Asset

    return Asset(asset_uri(export_path, templated=templated), group=ASSET_GROUP)


def input_asset(dataset_path: str, *, templated: bool = False):
    """The Asset for a recipe's input (a file, folder or glob), declared as the export task's inlet."""
    from airflow.sdk import Asset

    return Asset(asset_uri(dataset_path, templated=templated), group=ASSET_GROUP)


def templated_keys(recipe) -> dict[str, str]:
    """Key path -> template of a recipe's templated values (empty without templates)."""
    return {k: v["template"] for k, v in (recipe.templates.get("values") or {}).items()}


def recipe_export_asset(recipe_path: str):
    """The export Asset of a recipe file, for a consumer DAG's ``schedule=[...]``.

    Reads and validates the recipe (no data), exactly as the recipe's own DAG
    does, so producer and consumer agree on the URI.
    """
    from airflow_provider_dj.engine.config.recipe import load_recipe

    recipe = load_recipe(recipe_path, confine_paths=False)  # parse time, as the DAG's own (factory.py)
    return export_asset(recipe.export_path, templated="export_path" in templated_keys(recipe))


def _iso(value: Any) -> str | None:
    if value is None:
        return None
    iso = getattr(value, "isoformat", None)
    return iso() if iso else str(value)


def export_event_extra(
    result: dict,
    *,
    recipe_name: str,
    declared_export_path: str,
    context: Context,
    export_path_template: str | None = None,
    job_templates: dict | None = None,
) -> dict:
    """What an export's asset event carries (JSON values only).

    ``export_path_template``: the recipe's template of the export path (None when it has none);
    ``job_templates``: the job's record of its rendering (its effective config's ``templates``)."""
    dag_run = context.get("dag_run")
    logical_date = _iso(context.get("logical_date"))
    actual = result["export_path"]
    record = job_templates or {}
    if export_path_template is not None:
        rendered_from = (record.get("values") or {}).get("export_path", {}).get("template")
        overridden = rendered_from != export_path_template  # dag_run.conf replaced the template
    else:
        declared = declared_export_path
        if result.get("manifest"):  # a sharded export reports its manifest, beside the declared path
            from airflow_provider_dj.engine.output.shards import manifest_path

            declared = manifest_path(declared_export_path)
        overridden = path_to_asset_uri(actual) != path_to_asset_uri(declared)
    return {
        "job_id": result["job_id"],
        "rows": result["rows"],
        "checksum_xxh3_128": result["checksum"],
        "recipe": recipe_name,
        "export_path": actual,
        "export_uri": path_to_asset_uri(actual),
        "export_path_overridden": overridden,
        "export_path_template": export_path_template,
        "rendered_for_logical_date": record.get("logical_date") if record.get("values") else None,
        "logical_date": logical_date,
        "partition_key": getattr(dag_run, "partition_key", None) or logical_date,
        "run_id": getattr(dag_run, "run_id", None),
        "already_complete": bool(result.get("already_complete", False)),
    }
