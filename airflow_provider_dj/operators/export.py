"""ExportOperator: the job's last task — atomic export in input order, then the summary.

When the DAG declares the export as an outlet Asset (the DAG factory does, see
``airflow_provider_dj/dag_builder/assets.py``), a successful export annotates that Asset's
event with what was exported, so consumer DAGs scheduled on it know which job,
how many rows and which content hash they got.

Ray Jobs mode (the ``ray`` connection names a dashboard; docs/deployment.md): the export runs as one
Ray Job whose driver lives on the cluster (engine/runner/export_job.py), which calls ``finish_job``
there (a large JSONL export's parts as its Ray tasks), so this task reads no checkpoint and writes no
export byte.  It is submitted under a deterministic id (``dj-<job>-<dir hash>-export``, then ``-r<n>``
after a failed or stopped attempt; hooks/ray_jobs.py), and the task waits for it in the triggerer
(``deferrable``, by default ``[dj] ray_jobs_deferrable``) or in the worker.  It succeeds once the
job's summary says ``completed``; its XCom result is what the driver recorded (``ray_jobs/export.json``),
and the Asset event and the OpenLineage facets are read from the job directory as in every mode.  A job
already complete submits nothing (its export is verified against its summary, as in every mode); a
retry attaches to a running submission instead of starting another; ``on_kill`` stops the Ray Job.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

from airflow.configuration import conf

from airflow_provider_dj.engine.job.completed_export import is_job_complete
from airflow_provider_dj.engine.runner.steps import finish_job, wants_parallel_export
from airflow_provider_dj.engine.storage.context import JobContext
from airflow_provider_dj.hooks.ray import RayHook
from airflow_provider_dj.operators.base import (
    DJBaseOperator,
    event_defaults,
    guard_fails_fast,
    run_id_of,
)
from airflow_provider_dj.operators.local_run import ray_cpus
from airflow_provider_dj.operators.ray_job_step import RayJobStep, RayJobStepMixin

if TYPE_CHECKING:
    from airflow.sdk import Context


class ExportOperator(RayJobStepMixin, DJBaseOperator):
    """Check the accounting and write the export atomically, in input order (module docstring).

    :param job_dir: the job directory (templated).
    :param ray_conn_id: the Ray connection for the parallel serialization of a large JSONL export; in
        Ray Jobs mode the whole export runs there as one Ray Job.
    :param recipe_name: the recipe's ``project_name`` for the export's Asset event (None: the DAG id).
    :param declared_export_path: the export path the DAG declared as its outlet Asset.
    :param export_path_template: the recipe's template of ``export_path``, when it has one.
    :param local_run: set only by ``dj-airflow run``: its in-process Ray's CPUs and CPU-only concurrency
        (operators/local_run.py); None under a scheduler.
    :param deferrable: Ray Jobs mode: wait in the triggerer (True) or the worker (False); default:
        Airflow's ``[operators] default_deferrable``, as Airflow's own operators (the generated DAGs
        pass ``[dj] ray_jobs_deferrable`` or the recipe's ``partition.ray_jobs_deferrable``).
    :param poll_interval: Ray Jobs mode: seconds between looks at the Ray Job.
    """

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
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        poll_interval: float = 5.0,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.job_dir = job_dir
        self.ray_conn_id = ray_conn_id
        self.local_run = local_run  # what `dj-airflow run` decided (operators/local_run.py)
        self.recipe_name = recipe_name
        self.declared_export_path = declared_export_path
        self.export_path_template = export_path_template
        self.deferrable = bool(deferrable)
        self.poll_interval = poll_interval
        self._ray_job: tuple[Any, str] | None = None  # Ray Jobs mode: (client, submission id)

    def _annotate_asset_events(self, context: Context, result: dict) -> None:
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

        parts = [p["partition_id"] for p in JobContext(self.job_dir).partitioning_info["partitions"]]
        ray = RayHook(ray_conn_id=self.ray_conn_id, in_process_cpus=ray_cpus(self.local_run)).get_client()
        cpus = int(ray.cluster_resources().get("CPU", 1))
        self.log.info("Serializing %d partitions to JSONL on Ray, %d at a time", len(parts), max(1, cpus))
        return export_parts.parts_on_ray(ray, self.job_dir, parts, max_in_flight=max(1, cpus))

    def execute(self, context: Context) -> dict:
        if is_job_complete(self.job_dir):
            result = self._export(context)  # verified against its summary; nothing submitted in any mode
        elif RayHook(ray_conn_id=self.ray_conn_id).resolve()["mode"] == "jobs":
            with self.stop_protocol(context, self.job_dir):
                result = self._run_ray_job(context)
        else:
            # A stopped job never exports: a pending stop ends this task first (docs/stop_and_kill.md).
            with self.stop_protocol(context, self.job_dir):
                result = self._export(context)
        self._annotate_asset_events(context, result)
        return result

    def _export(self, context: Context) -> dict:
        # A failure here is reported (job_failed + a failed summary) by the DAG's
        # on_failure_callback once retries are exhausted, not on every try.
        with guard_fails_fast():
            result = finish_job(
                self.job_dir,
                event_defaults=event_defaults(context),
                run_id=run_id_of(context),
                part_source=None if is_job_complete(self.job_dir) else self._part_source(),
                say=lambda m: self.log.info("%s", m),
            )
        return result.to_dict()  # XCom's plain dict

    def on_kill(self) -> None:
        """Ray Jobs mode: stop the export's Ray Job (its driver records the stop).  Otherwise a large
        export's Ray tasks end with this process (their driver)."""
        self._stop_ray_job()

    # -- Ray Jobs mode (operators/ray_job_step.py) ------------------------------
    def _run_ray_job(self, context: Context) -> dict:
        return self._submit_and_wait(context)

    def execute_complete(self, context: Context, event: dict | None = None) -> dict:
        """The trigger saw the Ray Job end: verify the export and annotate its Asset event, or fail with
        the Ray Job's log tail."""
        result = super().execute_complete(context, event)
        self._annotate_asset_events(context, result)
        return result

    def _ray_job_step(self, context: Context) -> RayJobStep:
        from airflow_provider_dj.engine.jobdir import ray_jobs
        from airflow_provider_dj.engine.runner.export_job import export_result, settle_stopped_export, verify_export
        from airflow_provider_dj.hooks.ray_jobs import export_spec

        job_dir = self.job_dir
        job_id = JobContext(job_dir).job_id

        def succeeded(entry: dict, sid: str, message: str) -> dict:
            result = entry.get("results") or export_result(job_dir).to_dict()
            self.log.info("%s", f"Ray job {sid}: {message}; exported {result['rows']} rows to {result['export_path']}")
            return result

        return RayJobStep(
            label="Export",
            again="export again",
            submit=lambda client, spec_for: client.submit_or_attach_export(spec_for, job_dir=job_dir, job_id=job_id),
            spec=lambda client, sid, attempt: export_spec(
                job_dir=job_dir,
                job_id=job_id,
                submission_id=sid,
                attempt=attempt,
                namespace=client.namespace,
                **self._spec_context(context),
            ),
            poll=lambda client, sid: client.poll_export(sid, job_dir),
            trigger={"step": "export"},
            record_entry=lambda sid: ray_jobs.find_submission(ray_jobs.read_export_record(job_dir), sid),
            verify=lambda: verify_export(job_dir),
            succeeded=succeeded,
            settle_stopped=lambda sid, request, defaults: settle_stopped_export(job_dir, job_id, sid, request),
        )
