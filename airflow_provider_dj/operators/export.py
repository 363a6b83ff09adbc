"""ExportOperator: the job's last task — atomic export in input order, then the summary.

When the DAG declares the export as an outlet Asset (the DAG factory does, see
``airflow_provider_dj/dag_builder/assets.py``), a successful export annotates that Asset's
event with what was exported, so consumer DAGs scheduled on it know which job,
how many rows and which content hash they got.
"""

from __future__ import annotations

from typing import Any, Sequence

from airflow_provider_dj.engine.job.completed_export import is_job_complete
from airflow_provider_dj.engine.runner.steps import finish_job, wants_parallel_export
from airflow_provider_dj.engine.storage.context import JobContext
from airflow_provider_dj.operators.base import DJBaseOperator, event_defaults, fail_fast_on_guard, run_id_of
from airflow_provider_dj.operators.local_run import ray_cpus


class ExportOperator(DJBaseOperator):
    template_fields: Sequence[str] = ("job_dir",)
    ui_color = "#e3e3f7"
    lineage_step = "export"

    def __init__(
        self,
        *,
        job_dir: str,
        ray_conn_id: str | None = "ray_default",
        local_run: dict | None = None,
        recipe_name: str | None = None,
        declared_export_path: str | None = None,
        export_path_template: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.job_dir = job_dir
        self.ray_conn_id = ray_conn_id
        self.local_run = local_run  # what `dj-airflow run` decided (operators/local_run.py)
        self.recipe_name = recipe_name
        self.declared_export_path = declared_export_path
        self.export_path_template = export_path_template

    def _annotate_asset_events(self, context: Any, result: dict) -> None:
        """Put the export's identity into the outlet Asset's event (emitted by Airflow on success)."""
        from airflow.sdk import Asset

        from airflow_provider_dj.dag_builder.assets import export_event_extra

        assets = [o for o in (self.outlets or []) if isinstance(o, Asset)]
        events = context.get("outlet_events")
        if not assets or events is None:
            return
        extra = export_event_extra(
            result,
            recipe_name=self.recipe_name or self.dag_id,
            declared_export_path=self.declared_export_path or result["export_path"],
            context=context,
            export_path_template=self.export_path_template,
            job_templates=JobContext(self.job_dir).effective_config.get("templates"),
        )
        for asset in assets:
            events[asset].extra.update(extra)
        self.log.info(
            "Asset event for %s: job %s, %d rows, xxh3 %s",
            ", ".join(a.uri for a in assets),
            extra["job_id"],
            extra["rows"],
            extra["checksum_xxh3_128"],
        )

    def _part_source(self):
        """Parallel JSONL serialization on Ray for big exports (engine/output/parts.py); None: in this task."""
        if not wants_parallel_export(self.job_dir):
            return None
        from airflow_provider_dj.engine.output import parts as export_parts
        from airflow_provider_dj.hooks.ray import RayHook

        parts = [p["partition_id"] for p in JobContext(self.job_dir).partitioning_info["partitions"]]
        ray = RayHook(ray_conn_id=self.ray_conn_id, in_process_cpus=ray_cpus(self.local_run)).get_client()
        cpus = int(ray.cluster_resources().get("CPU", 1))
        self.log.info("Serializing %d partitions to JSONL on Ray, %d at a time", len(parts), max(1, cpus))
        return export_parts.parts_on_ray(ray, self.job_dir, parts, max_in_flight=max(1, cpus))

    def execute(self, context: Any) -> dict:
        if is_job_complete(self.job_dir):
            result = self._export(context)
        else:
            # A stopped job never exports: a pending stop ends this task first (docs/stop_and_kill.md).
            result = self.run_stoppable(context, self.job_dir, lambda: self._export(context))
        self._annotate_asset_events(context, result)
        return result

    def _export(self, context: Any) -> dict:
        # A failure here is reported (job_failed + a failed summary) by the DAG's
        # on_failure_callback once retries are exhausted, not on every try.
        return fail_fast_on_guard(
            lambda: finish_job(
                self.job_dir,
                event_defaults=event_defaults(context),
                run_id=run_id_of(context),
                part_source=None if is_job_complete(self.job_dir) else self._part_source(),
                say=lambda m: self.log.info("%s", m),
            )
        )
