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

:param job_dir: the job directory (templated).
:param ray_conn_id: the Ray connection a large export's parts run on (or, in Ray Jobs mode, the step).
:param local_run: set by ``dj-airflow run`` (operators/local_run.py).
:param recipe_name: the recipe's name in the Asset event (default: the DAG id).
:param declared_export_path: the export path the DAG declares as its Asset.
:param export_path_template: the recipe's templated export path, for the Asset event.
:param deferrable: Ray Jobs mode: wait for the export's Ray Job in the triggerer (True) or in the
    worker (False); None: ``[dj] ray_jobs_deferrable``.
:param poll_interval: Ray Jobs mode: seconds between looks at the Ray Job.
"""

from __future__ import annotations

import time
from typing import Any, Sequence

from airflow_provider_dj import settings
from airflow_provider_dj.engine.job.completed_export import is_job_complete
from airflow_provider_dj.engine.runner.steps import finish_job, wants_parallel_export
from airflow_provider_dj.engine.storage.context import JobContext
from airflow_provider_dj.hooks.ray import RayHook
from airflow_provider_dj.operators.base import (
    AirflowFailException,
    DJBaseOperator,
    JobStoppedError,
    event_defaults,
    fail_fast_on_guard,
    run_id_of,
    task_key,
    try_number,
)
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
        deferrable: bool | None = None,
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
        self.deferrable = bool(settings.get("ray_jobs_deferrable")) if deferrable is None else bool(deferrable)
        self.poll_interval = poll_interval
        self._ray_job: tuple[Any, str] | None = None  # Ray Jobs mode: (client, submission id)

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

        parts = [p["partition_id"] for p in JobContext(self.job_dir).partitioning_info["partitions"]]
        ray = RayHook(ray_conn_id=self.ray_conn_id, in_process_cpus=ray_cpus(self.local_run)).get_client()
        cpus = int(ray.cluster_resources().get("CPU", 1))
        self.log.info("Serializing %d partitions to JSONL on Ray, %d at a time", len(parts), max(1, cpus))
        return export_parts.parts_on_ray(ray, self.job_dir, parts, max_in_flight=max(1, cpus))

    def execute(self, context: Any) -> dict:
        if is_job_complete(self.job_dir):
            result = self._export(context)  # verified against its summary; nothing submitted in any mode
        elif RayHook(ray_conn_id=self.ray_conn_id).resolve()["mode"] == "jobs":
            result = self.run_stoppable(context, self.job_dir, lambda: self._run_ray_job(context))
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

    def on_kill(self) -> None:
        """Ray Jobs mode: stop the export's Ray Job (its driver records the stop).  Otherwise a large
        export's Ray tasks end with this process (their driver)."""
        if self._ray_job is not None:
            client, sid = self._ray_job
            self.log.warning("on_kill: stopping Ray job %s at %s: %s", sid, client.address, client.stop(sid))

    # -- Ray Jobs mode ---------------------------------------------------------
    def _run_ray_job(self, context: Any) -> dict:
        """Submit the export as a Ray Job, or find its earlier submission; then wait (here or deferred)."""
        from airflow_provider_dj.hooks.ray_jobs import export_spec

        client = RayHook(ray_conn_id=self.ray_conn_id).get_jobs_client()  # a dead dashboard: refused here
        job_id = JobContext(self.job_dir).job_id

        def spec_for(sid: str, attempt: int):
            return export_spec(
                job_dir=self.job_dir,
                job_id=job_id,
                submission_id=sid,
                attempt=attempt,
                namespace=client.namespace,
                try_number=try_number(context),
                run_id=run_id_of(context),
                step_key=task_key(context),
                event_defaults=event_defaults(context),
            )

        sub = client.submit_or_attach_export(spec_for, job_dir=self.job_dir, job_id=job_id)
        self._ray_job = (client, sub.submission_id)
        self.log.info(
            "%s", f"Export: Ray job {sub.submission_id} {sub.action} at {client.address} (status {sub.status})"
        )
        if sub.action == "succeeded":
            return self._finish(client, sub.submission_id, sub.status, context)
        if self.deferrable:
            from airflow_provider_dj.triggers.ray_job import RayJobTrigger

            self.defer(
                trigger=RayJobTrigger(
                    dashboard_address=client.address,
                    submission_id=sub.submission_id,
                    job_dir=self.job_dir,
                    step="export",
                    poll_interval=float(self.poll_interval),
                ),
                method_name="execute_complete",
            )
        return self._finish(client, sub.submission_id, self._wait_in_worker(client, sub.submission_id), context)

    def _wait_in_worker(self, client: Any, sid: str) -> str:
        from airflow_provider_dj.hooks.ray_jobs import ACTIVE

        last = None
        while True:
            status, progress = client.poll_export(sid, self.job_dir)
            if (status, progress) != last:
                self.log.info("Ray job %s: %s; %s", sid, status, progress)
                last = (status, progress)
            if status not in ACTIVE:
                return status
            time.sleep(float(self.poll_interval))

    def execute_complete(self, context: Any, event: dict | None = None) -> dict:
        """The trigger saw the Ray Job end: verify the export and annotate its Asset event, or fail with
        the Ray Job's log tail."""
        if not event or not event.get("submission_id"):
            raise AirflowFailException(f"{self.task_id}: the Ray job trigger returned no event")
        client = RayHook(ray_conn_id=self.ray_conn_id).get_jobs_client()
        sid = event["submission_id"]
        self._ray_job = (client, sid)
        if event.get("status") == "error":
            self.log.warning("the trigger could not follow Ray job %s: %s", sid, event["message"])
        result = self._finish(client, sid, client.status(sid) or "UNKNOWN", context)
        self._annotate_asset_events(context, result)
        return result

    def _finish(self, client: Any, sid: str, status: str, context: Any = None) -> dict:
        """The export's outcome from its Ray Job's status, the job's stop request, its driver's record and
        the job's summary.  A Ray Job that ended without success while the job's stop request is pending
        was stopped by it, whatever its driver recorded: the task ends stopped, without retry."""
        from airflow_provider_dj.engine.jobdir import ray_jobs, stop_control
        from airflow_provider_dj.engine.runner.export_job import export_result, verify_export
        from airflow_provider_dj.hooks.ray_jobs import ACTIVE, RayJobFailedError

        entry = ray_jobs.find_submission(ray_jobs.read_export_record(self.job_dir), sid) or {}
        if status == "SUCCEEDED" or entry.get("state") == "succeeded":
            done, message = verify_export(self.job_dir)
            if done:
                result = entry.get("results") or export_result(self.job_dir)
                self.log.info(
                    "%s", f"Ray job {sid}: {message}; exported {result['rows']} rows to {result['export_path']}"
                )
                return result
            raise RayJobFailedError(
                f"Ray job {sid} at {client.address} reported {status} but {message}: clear this task to export "
                f"again\n--- its log, last lines ---\n{client.logs_tail(sid)}"
            )
        refusal = None if entry else client.refusal(sid)
        if refusal:  # refused before any work: a retry would be refused again
            raise AirflowFailException(refusal)
        request = stop_control.read_stop_request(self.job_dir)
        if request is not None and status not in ACTIVE:  # a retry would only stop at once: stopped now
            raise self._stopped(sid, request, context or {})
        if entry.get("state") == "stopped" and entry.get("stopped_by") == "stop_request":
            raise JobStoppedError(f"Ray job {sid} stopped: {entry.get('error')}")  # the request was cleared since
        what = entry.get("error") or f"status {status}"
        message = (
            f"Ray job {sid} at {client.address} ended {status}: {what}\n--- its log, last lines ---\n"
            f"{client.logs_tail(sid)}"
        )
        if entry.get("fatal"):
            raise AirflowFailException(message)
        raise RayJobFailedError(message)

    def _stopped(self, sid: str, request: dict, context: Any) -> JobStoppedError:
        """Record the export's stop as the in-worker path does (its Ray job's record, this task's
        acknowledgement, the ``stopped`` summary, the runner lock released)."""
        from airflow_provider_dj.engine.jobdir.stop_control import StopRequested
        from airflow_provider_dj.engine.runner.export_job import settle_stopped_export
        from airflow_provider_dj.engine.runner.stop import record_stop

        settle_stopped_export(self.job_dir, JobContext(self.job_dir).job_id, sid, request)
        done = record_stop(
            self.job_dir,
            StopRequested(self.job_dir, request),
            task_key(context),
            try_number(context),
            run_id_of(context),
            event_defaults(context),
            lambda m: self.log.warning("%s", m),
        )
        return JobStoppedError(f"Ray job {sid} stopped: {done}")
