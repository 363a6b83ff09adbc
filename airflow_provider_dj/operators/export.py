"""ExportOperator: the job's last task — atomic export in input order, then the summary.

When the DAG declares the export as an outlet Asset (the DAG factory does, see
``airflow_provider_dj/assets.py``), a successful export annotates that Asset's
event with what was exported, so consumer DAGs scheduled on it know which job,
how many rows and which content hash they got.
"""

from __future__ import annotations

from typing import Any, Sequence

from airflow.sdk import BaseOperator

from airflow_provider_dj.engine.job.export import export_job, is_job_complete, verify_completed_export
from airflow_provider_dj.engine.jobdir import lock as job_lock
from airflow_provider_dj.engine.jobdir.events import EventLog, read_events
from airflow_provider_dj.engine.storage.context import JobContext
from airflow_provider_dj.operators._common import event_defaults, fail_fast_on_guard, run_stoppable
from airflow_provider_dj.operators.local_run import ray_cpus


class ExportOperator(BaseOperator):
    template_fields: Sequence[str] = ("job_dir",)
    ui_color = "#e3e3f7"

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

        from airflow_provider_dj.assets import export_event_extra

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

    def _part_source(self, ctx: JobContext):
        """Parallel JSONL serialization on Ray for big exports (engine/output/parts.py); None: in this task."""
        from airflow_provider_dj.engine.execution.reuse import mostly_reused_export
        from airflow_provider_dj.engine.output import parts as export_parts

        info = ctx.partitioning_info
        parts = [p["partition_id"] for p in info["partitions"]]
        if (
            ctx.recipe.export_path.endswith(".parquet")
            or len(parts) < 2
            or info["total_rows"] < export_parts.parallel_export_min_rows()
            or mostly_reused_export(ctx)  # nightly reuse: copying the last export's bytes beats serializing
        ):
            return None
        from airflow_provider_dj.hooks.ray import RayHook

        ray = RayHook(ray_conn_id=self.ray_conn_id, in_process_cpus=ray_cpus(self.local_run)).get_client()
        cpus = int(ray.cluster_resources().get("CPU", 1))
        self.log.info("Serializing %d partitions to JSONL on Ray, %d at a time", len(parts), max(1, cpus))
        return export_parts.parts_on_ray(ray, self.job_dir, parts, max_in_flight=max(1, cpus))

    def execute(self, context: Any) -> dict:
        if is_job_complete(self.job_dir):
            result = self._export(context)
        else:
            # A stopped job never exports: a pending stop ends this task first (docs/stop_and_kill.md).
            result = run_stoppable(self, context, self.job_dir, lambda: self._export(context))
        self._annotate_asset_events(context, result)
        return result

    def _export(self, context: Any) -> dict:
        defaults = event_defaults(context)
        if is_job_complete(self.job_dir):
            summary = verify_completed_export(self.job_dir)
            self.log.info(
                "Job %s was already complete; export %s verified against the summary (%d rows, xxh3 %s). "
                "Nothing was rewritten.",
                summary["job_id"],
                summary["export"]["path"],
                summary["export"]["rows"],
                summary["export"]["checksum_xxh3_128"],
            )
            return {
                "export_path": summary["export"]["path"],
                "rows": summary["export"]["rows"],
                "checksum": summary["export"]["checksum_xxh3_128"],
                "job_id": summary["job_id"],
                "already_complete": True,
            }
        starts = read_events(self.job_dir, "job_start")
        started_at = starts[0]["timestamp"] if starts else None
        ctx = JobContext(self.job_dir)
        # A failure here is reported (job_failed + a failed summary) by the DAG's
        # on_failure_callback once retries are exhausted, not on every try.
        summary = fail_fast_on_guard(
            lambda: export_job(
                self.job_dir, event_defaults=defaults, started_at=started_at, part_source=self._part_source(ctx)
            )
        )
        job_lock.release(self.job_dir, context["dag_run"].run_id)
        EventLog(self.job_dir, ctx.job_id, defaults=defaults).emit(
            "job_complete",
            status="completed",
            input_rows=summary["input"]["total_rows"],
            output_rows=summary["export"]["rows"],
            partitions=summary["input"]["partitions"],
            duration=summary.get("duration_s"),
            checksum=summary["export"]["checksum_xxh3_128"],
            summary_path=f"{self.job_dir}/job_summary.json",
        )
        for op in summary["ops"]:
            self.log.info(
                "op %d %-32s in=%d out=%d filtered=%d duplicates=%d failed=%d",
                op["op_index"],
                op.get("op_name", ""),
                op["rows_in"],
                op["rows_out"],
                op["filtered"],
                op["duplicates"],
                op["failed"],
            )
        self.log.info("Exported %d rows to %s", summary["export"]["rows"], summary["export"]["path"])
        return {
            "export_path": summary["export"]["path"],
            "rows": summary["export"]["rows"],
            "checksum": summary["export"]["checksum_xxh3_128"],
            "job_id": summary["job_id"],
        }
