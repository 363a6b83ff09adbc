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

from typing import TYPE_CHECKING, Any, Sequence

from airflow_provider_dj import settings
from airflow_provider_dj.engine.config.recipe import RecipeError
from airflow_provider_dj.engine.runner.preflight import gpu_preflight_step
from airflow_provider_dj.operators.base import DJBaseOperator
from airflow_provider_dj.operators.local_run import ray_cpus
from airflow_provider_dj.operators.resume_validator import RecipeRefused, run_identity

if TYPE_CHECKING:
    from airflow.sdk import Context


class GpuPreflightOperator(DJBaseOperator):
    """Probe GPU ops on a sample; ``probe_executor``: auto (Ray when importable) | ray | local | inline.

    :param recipe_path: the recipe file (templated).
    :param probe_executor: where the probe runs: ``auto``, ``ray``, ``local`` (a subprocess) or ``inline``.
    :param ray_conn_id: the Ray connection.
    :param local_run: set only by ``dj-airflow run``: its in-process Ray's CPUs and CPU-only concurrency
        (operators/local_run.py); None under a scheduler.
    :param heartbeat_s: how often a running probe logs that it is alive."""

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

    def _ray_client(self):
        from airflow_provider_dj.hooks.ray import RayHook

        return RayHook(ray_conn_id=self.ray_conn_id, in_process_cpus=ray_cpus(self.local_run)).get_client()

    def execute(self, context: Context) -> dict:
        from airflow_provider_dj.dag_builder.templating import task_renderer

        try:
            return gpu_preflight_step(
                self.recipe_path,
                dict(getattr(context.get("dag_run"), "conf", None) or {}),
                renderer=lambda: task_renderer(self, context),
                run=run_identity(context) if context.get("dag_run") is not None else None,
                executor=self.probe_executor or settings.get("probe_executor") or "auto",
                ray_client=self._ray_client,
                heartbeat_s=self.heartbeat_s,
                say=lambda m: self.log.info("%s", m),
                warn=lambda m: self.log.warning("%s", m),
            )
        except RecipeError as exc:
            # A bad override, or a path outside [dj] allowed_roots: the first task refuses the run before
            # it probes (reads) anything, and a retry would be refused the same way.
            self.log.error("Recipe refused before any work; nothing was read or written:\n%s", exc)
            raise RecipeRefused(str(exc)) from exc
