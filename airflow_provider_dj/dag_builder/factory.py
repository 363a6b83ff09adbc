"""Recipe file -> Airflow DAG.  Task wiring only: no data is read at parse time.

Shape, per recipe::

    gpu_preflight >> validate >> partitions_seg0 (mapped over execution groups)
        [>> barrier_seg0 >> global_op<i>_<dedup> >> partitions_seg1 ...] [>> review] >> export

``review`` (the review gate, operators/review.py) exists only for a recipe with ``review:``.

``register_recipe_dags`` builds one DAG per ``*.yaml``/``*.yml`` file in the
recipes folder.  A broken recipe never hides its siblings: it becomes a
placeholder DAG ``dj_broken__<file>`` whose description and single task
carry the error, so the problem is visible in the UI next to the good DAGs.
"""

from __future__ import annotations

import glob
import logging
import os
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import pendulum
import yaml

from airflow_provider_dj import settings
from airflow_provider_dj.engine.config.recipe import RecipeError, load_recipe, sanitize_dag_id
from airflow_provider_dj.engine.planning.decisions import parse_time_concurrency
from airflow_provider_dj.engine.planning.plan import build_plan

if TYPE_CHECKING:
    from airflow.sdk import Context

log = logging.getLogger(__name__)

#: The recipes folder when ``recipes_dir`` is unset: this name, next to the DAG file that registers them.
RECIPES_FOLDER_NAME = "recipes"
START_DATE = pendulum.datetime(2024, 1, 1, tz="UTC")
JOB_DIR_TEMPLATE = "{{ ti.xcom_pull(task_ids='validate', key='job_dir') }}"

# Trigger-time schema for overrides.  Airflow validates dag_run.conf against
# these before the run is created; the validate task then applies the
# recipe's own, stricter validation (did-you-mean, ranges, cross-key rules).
_NULL = "null"
PARAM_SCHEMAS: dict[str, list[str]] = {
    "dataset_path": ["string", _NULL],
    "export_path": ["string", _NULL],
    "work_dir": ["string", _NULL],
    "job_id": ["string", _NULL],
    "resume": ["string", _NULL],
    "np": ["integer", _NULL],
    "skip_op_error": ["boolean", _NULL],
    "keep_stats_in_res_ds": ["boolean", _NULL],
    "max_failed_ratio": ["number", _NULL],
    "partition": ["object", _NULL],
    "checkpoint": ["object", _NULL],
    "intermediate_storage": ["object", _NULL],
    "partition.mode": ["string", _NULL],
    "partition.num_of_partitions": ["integer", _NULL],
    "partition.size": ["integer", _NULL],
    "partition.target_size_mb": ["number", _NULL],
    "partition.max_size_mb": ["number", _NULL],
    "partition.max_concurrent_partitions": ["integer", "string", _NULL],
    "checkpoint.enabled": ["boolean", _NULL],
    "checkpoint.strategy": ["string", _NULL],
    "checkpoint.n_ops": ["integer", _NULL],
    "checkpoint.op_names": ["array", _NULL],
    "intermediate_storage.format": ["string", _NULL],
    "intermediate_storage.compression": ["string", _NULL],
    "intermediate_storage.preserve_intermediate_data": ["boolean", _NULL],
    "intermediate_storage.retention_policy": ["string", _NULL],
}


_DIALECT = {"$schema": "http://json-schema.org/draft-07/schema#"}


def _params() -> dict:
    from airflow.sdk import Param

    # The schemas name their dialect: jsonschema checks a schema against its
    # dialect's meta-schema on every validation, and Airflow validates every Param
    # for every task (about 1,300 times in a 7-task run); the draft-07 meta-schema
    # costs a third of the 2020-12 default's (docs/benchmarks.md).
    # The schemas use nothing newer than draft-07 (``type`` lists only).
    return {
        key: Param(None, type=types, description=f"override the recipe's {key} for this run", **_DIALECT)
        for key, types in PARAM_SCHEMAS.items()
    }


def _doc(recipe, plan) -> str:
    ops = "\n".join(f"{o.index}. `{o.name}` {o.args or ''}" for o in plan.ops)
    return (
        f"### Data-Juicer recipe `{recipe.project_name}`\n\nRecipe file: `{recipe.source_file}`\n\n"
        f"Input: `{recipe.dataset_path}`  \nExport: `{recipe.export_path}`  \nWork dir: `{recipe.work_dir}`\n\n"
        f"{_templates_doc(recipe)}Ops:\n{ops}\n\nCheckpoint strategy: {plan.strategy} (after ops {plan.checkpoint_points}).\n\n"
        f'Override recipe values with `dag_run.conf`, e.g. `{{"partition": {{"num_of_partitions": 4}}}}` '
        f'or `{{"partition.num_of_partitions": 4}}`; resume a job with `{{"resume": "<job id>"}}`.'
    )


def _templates_doc(recipe) -> str:
    values = recipe.templates.get("values") or {}
    if not values:
        return ""
    lines = "\n".join(f"- `{k}`: `{v['template']}`" for k, v in values.items())
    return f"Templated values, rendered by the validate task with the run's context:\n{lines}\n\n"


def build_dag(
    recipe_path: str,
    *,
    dag_id: str | None = None,
    retries: int | None = None,
    retry_delay: timedelta | None = None,
    default_group_size: int | None = None,
    local_run: dict | None = None,
):
    """Build the DAG for one recipe file.  Raises RecipeError for a bad recipe.

    ``None`` arguments come from the settings (task_retries, task_retry_delay_s,
    default_group_size); ``dj-airflow run`` passes the group size it chose and
    what its in-process run needs (``local_run``: operators/local_run.py)."""
    from airflow.sdk import DAG

    from airflow_provider_dj.dag_builder.assets import export_asset, input_asset, templated_keys
    from airflow_provider_dj.operators.base import release_lock_on_failure
    from airflow_provider_dj.operators.export import ExportOperator
    from airflow_provider_dj.operators.gpu_preflight import GpuPreflightOperator
    from airflow_provider_dj.operators.local_run import LocalRun
    from airflow_provider_dj.operators.resume_validator import ResumeValidatorOperator

    recipe_path = os.path.abspath(recipe_path)
    # Templated values kept as written, paths not confined (that touches the file system): the
    # validate task renders and confines the recipe a run uses.
    recipe = load_recipe(recipe_path, confine_paths=False)
    templated = templated_keys(recipe)
    plan = build_plan(recipe)
    dag_id = dag_id or sanitize_dag_id(recipe.project_name)
    if retries is None:
        retries = int(settings.get("task_retries"))
    if retry_delay is None:
        retry_delay = timedelta(seconds=float(settings.get("task_retry_delay_s")))
    group_size = _group_size(default_group_size)
    # partition.max_concurrent_partitions, parse-time layer: how many mapped
    # task instances of one run execute at once (auto: engine.planning.concurrency).
    # The validate task enforces the run-time layer inside each group.
    local = LocalRun.of(local_run)
    run_args = {"local_run": local.to_dict()} if local else {}
    # The tasks that may submit Ray Jobs (validate, partition groups, global steps, export).
    ray_job_args = {**run_args, "deferrable": _ray_jobs_deferrable(recipe)}
    conc = parse_time_concurrency(recipe, cpu_default=local.max_concurrent_partitions if local else None)
    concurrency = _mapped_task_concurrency(recipe, conc.value)
    with DAG(
        dag_id=dag_id,
        schedule=recipe.schedule,
        start_date=START_DATE,
        catchup=False,
        max_active_runs=1,
        params=_params(),
        default_args={"retries": retries, "retry_delay": retry_delay, "on_failure_callback": release_lock_on_failure},
        tags=["data-juicer", "airflow-provider-dj"],
        description=f"Data-Juicer recipe {os.path.basename(recipe_path)}",
        doc_md=_doc(recipe, plan),
    ) as dag:
        preflight = GpuPreflightOperator(task_id="gpu_preflight", recipe_path=recipe_path, **run_args)
        validate = ResumeValidatorOperator(
            task_id="validate",
            recipe_path=recipe_path,
            group_size=group_size,
            max_active_groups=conc.value,
            **ray_job_args,
        )
        preflight >> validate
        upstream = _add_segment_tasks(plan, validate, concurrency, ray_job_args)
        if recipe.review is not None:
            upstream = _add_review_task(recipe, upstream, run_args)
        # The export is an Airflow Asset (its input the inlet): consumer DAGs can be scheduled on it.
        export = ExportOperator(
            task_id="export",
            job_dir=JOB_DIR_TEMPLATE,
            trigger_rule="none_failed",
            recipe_name=recipe.project_name,
            declared_export_path=recipe.export_path,
            export_path_template=templated.get("export_path"),
            outlets=[export_asset(recipe.export_path, templated="export_path" in templated)],
            inlets=[input_asset(recipe.dataset_path, templated="dataset_path" in templated)],
            **ray_job_args,
        )
        upstream >> export
    return dag


def _group_size(default_group_size: int | None) -> int:
    """The partitions per mapped task the validate task uses when the recipe sets no integer
    ``execution_group_size``: ``default_group_size``, else the setting, else 1."""
    # Partitions per mapped task are resolved by the validate task, once the
    # partitions (and the GPU probe report) exist: the recipe's integer
    # execution_group_size wins; `auto` sizes groups from the probe for GPU
    # pipelines (docs/gpu_planning.md); otherwise this default: one per task
    # (the grain a person clears in the UI), except under `dj-airflow run`,
    # whose in-process runner executes mapped tasks one after another: it
    # passes the CPU count (default_group_size) so a task's partitions run
    # as concurrent Ray tasks on every core.
    if default_group_size is None:
        default_group_size = settings.get("default_group_size")
    return 1 if default_group_size is None else default_group_size


def _ray_jobs_deferrable(recipe) -> bool:
    """Whether the DAG's Ray Jobs mode tasks wait in the triggerer: the recipe's
    ``partition.ray_jobs_deferrable``, else the deployment's ``[dj] ray_jobs_deferrable``."""
    chosen = recipe.partition.extra.get("ray_jobs_deferrable")
    return bool(settings.get("ray_jobs_deferrable")) if chosen is None else chosen


def _mapped_task_concurrency(recipe, max_active: int) -> dict:
    """The mapped partition tasks' concurrency arguments: at most ``max_active`` task instances of a
    run at once, in the recipe's Airflow pool when it names one."""
    concurrency: dict = {"max_active_tis_per_dagrun": max_active}
    if recipe.partition.extra.get("pool"):
        concurrency["pool"] = recipe.partition.extra["pool"]
    return concurrency


def _add_segment_tasks(plan, validate, concurrency: dict, ray_job_args: dict):
    """Add each segment's mapped partition task after ``validate``, with a barrier sensor and the
    global op's task after a segment that feeds one; return the last task (the export's upstream)."""
    from airflow_provider_dj.operators.global_op import GlobalOpOperator
    from airflow_provider_dj.operators.partition_group import MAP_INDEX_TEMPLATE, PartitionGroupOperator
    from airflow_provider_dj.sensors.checkpoint import CheckpointSensor

    upstream = validate
    for seg in plan.segments:
        seg_task = PartitionGroupOperator.partial(
            task_id=seg.task_id(),
            **concurrency,
            job_dir=JOB_DIR_TEMPLATE,
            segment_index=seg.index,
            map_index_template=MAP_INDEX_TEMPLATE,
            trigger_rule="none_failed",
            **ray_job_args,
        ).expand(execution_group=validate.output)
        upstream >> seg_task
        upstream = seg_task
        if seg.keys_for_global is not None:
            barrier = CheckpointSensor(
                task_id=plan.barrier_task_id(seg.index),
                job_dir=JOB_DIR_TEMPLATE,
                segment_index=seg.index,
                trigger_rule="none_failed",
                poke_interval=2,
            )
            glob_task = GlobalOpOperator(
                task_id=plan.global_task_id(seg.keys_for_global),
                job_dir=JOB_DIR_TEMPLATE,
                op_index=seg.keys_for_global,
                trigger_rule="none_failed",
                **ray_job_args,
            )
            upstream >> barrier >> glob_task
            upstream = glob_task
    return upstream


def _add_review_task(recipe, upstream, run_args: dict):
    """The review gate before export (operators/review.py), only for a recipe with ``review:``: it
    passes at once when no bound is crossed, else waits for an approval.  A rejection fails it, so the
    export (``none_failed``) does not run; returns the task (the export's upstream)."""
    from airflow_provider_dj.operators.review import ReviewOperator

    review = ReviewOperator(
        task_id="review",
        job_dir=JOB_DIR_TEMPLATE,
        timeout_s=recipe.review.timeout_s,
        on_timeout=recipe.review.on_timeout,
        trigger_rule="none_failed",
        **run_args,
    )
    upstream >> review
    return review


def _broken_dag(dag_id: str, path: str, message: str):
    from airflow.sdk import DAG
    from airflow.sdk.bases.operator import BaseOperator

    class RecipeErrorOperator(BaseOperator):
        """Fails with the recipe's error so triggering the placeholder explains itself."""

        def __init__(self, *, error: str, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self.error = error

        def execute(self, context: Context) -> None:
            raise RecipeError(self.error)

    with DAG(
        dag_id=dag_id,
        schedule=None,
        start_date=START_DATE,
        catchup=False,
        tags=["data-juicer", "broken-recipe"],
        description=f"BROKEN RECIPE {os.path.basename(path)}",
        doc_md=f"### This recipe failed to load\n\n`{path}`\n\n```\n{message}\n```",
    ) as dag:
        RecipeErrorOperator(task_id="recipe_error", error=message)
    return dag


def recipes_dir(dag_file: str | None = None) -> str:
    """The ``recipes_dir`` setting, else the ``recipes`` folder beside ``dag_file`` (the DAG file that
    registers the recipes, wherever a deployment put it), else ``./recipes``."""
    configured = settings.get("recipes_dir")
    if configured:
        return configured
    base = os.path.dirname(os.path.abspath(dag_file)) if dag_file else os.getcwd()
    return os.path.join(base, RECIPES_FOLDER_NAME)


def list_recipe_files(directory: str) -> list[str]:
    files = glob.glob(os.path.join(directory, "*.yaml")) + glob.glob(os.path.join(directory, "*.yml"))
    return sorted(files)


def _peek_dag_id(path: str) -> str:
    """The DAG id a recipe file would get, from its YAML alone (cheap; no validation)."""
    with open(path, encoding="utf-8") as fh:
        data = yaml.safe_load(fh) or {}
    name = data.get("project_name") if isinstance(data, dict) else None
    return sanitize_dag_id(str(name) if name else os.path.splitext(os.path.basename(path))[0])


def register_recipe_dags(namespace: dict, directory: str | None = None, only_dag_id: str | None = None) -> dict:
    """Build and register every recipe's DAG into ``namespace`` (a DAG file's globals()).

    Returns {dag_id: dag}.  ``only_dag_id`` (Airflow's parsing context when a
    task runs) builds just that DAG.
    """
    directory = directory or recipes_dir(namespace.get("__file__"))
    files = list_recipe_files(directory)
    ids: dict[str, list[str]] = {}
    peek_errors: dict[str, str] = {}
    for path in files:
        try:
            ids.setdefault(_peek_dag_id(path), []).append(path)
        except Exception as exc:  # noqa: BLE001 - reported as a broken recipe
            peek_errors[path] = f"{path}: cannot read YAML: {exc}"
    built: dict[str, Any] = {}

    def broken(path: str, message: str) -> None:
        bid = "dj_broken__" + sanitize_dag_id(os.path.splitext(os.path.basename(path))[0])
        if only_dag_id and only_dag_id != bid:
            return
        log.error("recipe %s is broken: %s", path, message)
        built[bid] = _broken_dag(bid, path, message)

    for path, message in peek_errors.items():
        broken(path, message)
    for dag_id, paths in ids.items():
        if len(paths) > 1:
            for p in paths:
                others = [o for o in paths if o != p]
                broken(
                    p,
                    f"{p}: dag_id {dag_id!r} is also produced by {', '.join(others)}; "
                    f"give each recipe a distinct project_name",
                )
            continue
        if only_dag_id and only_dag_id != dag_id:
            continue
        path = paths[0]
        try:
            built[dag_id] = build_dag(path, dag_id=dag_id)
        except Exception as exc:  # noqa: BLE001 - one bad recipe must not hide the others
            broken(path, str(exc))
    namespace.update({f"dag__{k}": v for k, v in built.items()})
    return built
