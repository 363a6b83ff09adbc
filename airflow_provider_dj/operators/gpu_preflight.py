"""GpuPreflightOperator: the first task of every recipe DAG.

Before any partition starts, it measures each single-GPU CUDA Mapper/Filter
on a small sample (model init, warmup, steady throughput, output ratio,
peak memory) and writes ``{job}/gpu_probe_results.json``, which the
``validate`` task's planner reads to size model replicas and execution
groups.  The report is the source of truth; the XCom is a short summary.

The job directory is derived exactly as ``validate`` derives it (``job_id``
/ ``resume`` from the recipe or ``dag_run.conf``, else from the DAG run),
so a retried or cleared run finds its earlier report and reuses unchanged
measurements.  The report is the only file this task writes there; resume
validation does not read it, so it never makes a resume refuse.  A
``resume`` naming a job directory that does not exist is left for
``validate`` to refuse: this task does not create it.

Recipes without CUDA ops skip all of this.  ``gpu_preflight_enabled: false``
skips probing but then every CUDA op must carry explicit ``num_gpus``.
"""

from __future__ import annotations

from typing import Any, Sequence

from airflow.sdk import BaseOperator

from airflow_provider_dj import settings
from airflow_provider_dj.core import fs as storage
from airflow_provider_dj.engine.config.overrides import normalize_overrides
from airflow_provider_dj.engine.config.recipe import RecipeError, load_recipe
from airflow_provider_dj.engine.jobdir.identity import job_id_for_run, validate_job_id
from airflow_provider_dj.engine.preflight.preflight import (
    PreflightSettings,
    cuda_ops,
    declared_num_gpus,
    op_entries_from_recipe,
    run_preflight,
)
from airflow_provider_dj.operators.local_run import ray_cpus


class GpuPreflightOperator(BaseOperator):
    """Probe GPU ops on a sample; ``probe_executor``: auto (Ray when importable) | ray | local | inline."""

    template_fields: Sequence[str] = ("recipe_path",)
    ui_color = "#e8f4d9"

    def __init__(
        self,
        *,
        recipe_path: str,
        probe_executor: str | None = None,
        ray_conn_id: str = "ray_default",
        local_run: dict | None = None,
        heartbeat_s: float = 30.0,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.recipe_path = recipe_path
        self.probe_executor = probe_executor
        self.ray_conn_id = ray_conn_id
        self.local_run = local_run  # what `dj-airflow run` decided (operators/local_run.py)
        self.heartbeat_s = heartbeat_s

    @staticmethod
    def _job_id(recipe, context: Any) -> str:
        # Same derivation as the validate task (ResumeValidatorOperator._job_id).
        if recipe.job_id or recipe.resume:
            return validate_job_id(recipe.job_id or recipe.resume, "job_id" if recipe.job_id else "resume")
        dag_run = context["dag_run"]
        when = getattr(dag_run, "logical_date", None) or getattr(dag_run, "run_after", None)
        return job_id_for_run(dag_run.dag_id, dag_run.run_id, when)

    def _ray_client(self):
        from airflow_provider_dj.hooks.ray import RayHook

        return RayHook(ray_conn_id=self.ray_conn_id, in_process_cpus=ray_cpus(self.local_run)).get_client()

    def execute(self, context: Any) -> dict:
        conf = dict(getattr(context.get("dag_run"), "conf", None) or {})
        overrides = normalize_overrides(conf)
        # Op names are never templated, so the unrendered recipe tells whether there is a CUDA op;
        # a template that does not render is then the validate task's error to report.
        recipe = load_recipe(self.recipe_path, overrides)
        gpu = cuda_ops(op_entries_from_recipe(recipe))
        if not gpu:
            self.log.info("No CUDA ops in %s: no GPU probe needed.", self.recipe_path)
            return {"gpu_ops": [], "probed": False}
        if recipe.templates:
            from airflow_provider_dj.templating import task_renderer

            recipe = load_recipe(self.recipe_path, overrides, renderer=task_renderer(self, context))
        ops = op_entries_from_recipe(recipe)
        gpu = cuda_ops(ops)
        names = [o.name for o in gpu]
        if not recipe.partition.extra.get("gpu_preflight_enabled", True):
            missing = [o for o in gpu if declared_num_gpus(o) is None]
            if missing:
                o = missing[0]
                raise RecipeError(
                    recipe.source_file,
                    f"process[{o.index}].{o.name}.num_gpus",
                    f"partition.gpu_preflight_enabled is false, so nothing measures CUDA op {o.name}: "
                    f"give it explicit resources (num_gpus, and memory / batch_size as needed)"
                    + (
                        f"; also missing for {', '.join(f'process[{m.index}].{m.name}' for m in missing[1:])}"
                        if len(missing) > 1
                        else ""
                    )
                    + ", or set partition.gpu_preflight_enabled: true",
                )
            self.log.info("GPU preflight disabled; using the recipe's explicit resources for %s", names)
            return {"gpu_ops": names, "probed": False, "skipped": True}
        job_id = self._job_id(recipe, context)
        job_dir = storage.join(recipe.work_dir, job_id)
        if recipe.resume and not storage.exists(job_dir):
            self.log.warning(
                "resume=%s names no job directory at %s; not probing (validate will refuse).", recipe.resume, job_dir
            )
            return {"gpu_ops": names, "probed": False, "job_dir": job_dir}
        executor = self.probe_executor or settings.get("probe_executor") or "auto"
        report = run_preflight(
            ops,
            PreflightSettings.from_recipe(recipe),
            job_dir,
            executor=executor,
            heartbeat_s=self.heartbeat_s,
            ray_client=self._ray_client,
            say=lambda m: self.log.info("%s", m),
            warn=lambda m: self.log.warning("%s", m),
        )
        assert report is not None
        for op in report["ops"]:
            self.log.info(
                "%s (process[%d]): %s rows/s, init %.2fs, output ratio %.3f, peak %s bytes (%s), num_gpus %s%s",
                op["op_name"],
                op["op_index"],
                op["rows_per_s"],
                op["model_init_s"],
                op["output_ratio"],
                op["peak_memory_bytes"],
                op["memory_source"],
                op["num_gpus"],
                " (cached)" if op.get("reused") else "",
            )
        return {
            "gpu_ops": names,
            "probed": True,
            "job_dir": job_dir,
            "report": storage.join(job_dir, "gpu_probe_results.json"),
            "device": report["device"]["kind"],
            "reused": [o["op_name"] for o in report["ops"] if o.get("reused")],
            "num_gpus": {str(o["op_index"]): o["num_gpus"] for o in report["ops"]},
        }
