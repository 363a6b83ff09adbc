"""PartitionGroupOperator: one mapped task instance per execution group.

Each instance runs one segment of the pipeline for its partitions on Ray.
All durable state is in the job directory keyed by partition id — not in
XCom, which a UI clear deletes, and not by map_index — so every try, retry
or clear resumes from the partitions' latest valid checkpoints and runs
only what is missing.  The grid shows each instance by its partitions and
row range (``map_index_template``), so a failed partition is obvious and
can be cleared alone.

Stops and kills (docs/stop_and_kill.md): a stop request ends the task as
stopped (JobStoppedError: failed, no retry, summary ``stopped``).  Airflow's
kill paths — "mark failed" or "clear" while running (SIGTERM from the
supervisor), ``execution_timeout`` — call ``on_kill``, which cancels this
task's Ray tasks with force, so no orphaned worker keeps writing into the
job directory.

Ray Jobs mode (the ``ray`` connection names a dashboard; docs/deployment.md): the group runs as one
Ray Job whose driver lives on the cluster (engine/runner/group_job.py), submitted under a
deterministic id (hooks/ray_jobs.py).  The task then waits for it in the triggerer
(``deferrable=True``, the default: no worker slot is held while the partitions run) or in the
worker; ``execute_complete`` verifies the group's checkpoints and succeeds, or fails with the Ray
Job's log tail.  A retry or a UI clear finds the group's submission (on the cluster by its id, and
in the job directory's ``ray_jobs/`` record) and attaches to a running one, trusts a succeeded one
once its checkpoints are verified, and submits again after a failed or stopped one, resuming from
the checkpoints.  ``on_kill`` stops the Ray Job.  Airflow 3.3's ``ResumableJobMixin`` is not used:
it persists an id the external system chose, after submitting, in a store a clear may reset; here
the id is computed before submitting, so there is no window in which a submitted job has no
record, and the cluster and the job directory answer on any Airflow version.
"""

from __future__ import annotations

import time
from typing import Any, Sequence

from airflow_provider_dj.engine.runner.dispatch import RayDispatcher
from airflow_provider_dj.engine.runner.steps import run_group
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

MAP_INDEX_TEMPLATE = "{{ task.execution_group['label'] }}"


class PartitionGroupOperator(DJBaseOperator):
    template_fields: Sequence[str] = ("job_dir",)
    ui_color = "#d9ecf9"
    lineage_step = "partitions"

    def __init__(
        self,
        *,
        job_dir: str,
        segment_index: int,
        execution_group: dict,
        ray_conn_id: str | None = RayHook.default_conn_name,
        local_run: dict | None = None,
        cpus_per_partition: float = 1,
        deferrable: bool = True,
        poll_interval: float = 5.0,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.job_dir = job_dir
        self.segment_index = segment_index
        self.execution_group = execution_group
        self.ray_conn_id = ray_conn_id
        self.local_run = local_run  # what `dj-airflow run` decided (operators/local_run.py)
        self.cpus_per_partition = cpus_per_partition
        self.deferrable = deferrable  # Ray Jobs mode: wait in the triggerer (True) or in the worker
        self.poll_interval = poll_interval  # Ray Jobs mode: seconds between looks at the Ray Job
        self._dispatcher: RayDispatcher | None = None
        self._ray_job: tuple[Any, str] | None = None  # Ray Jobs mode: (client, submission id)

    def execute(self, context: Any) -> list[dict]:
        if RayHook(ray_conn_id=self.ray_conn_id).resolve()["mode"] == "jobs":
            return self.run_stoppable(context, self.job_dir, lambda: self._run_ray_job(context))
        return self.run_stoppable(context, self.job_dir, lambda: self._run_group(context))

    def on_kill(self) -> None:
        """Cancel this task's Ray work (force: the workers die) and wait until it has ended; in Ray Jobs
        mode, stop the group's Ray Job (its driver records the stop)."""
        if self._ray_job is not None:
            client, sid = self._ray_job
            self.log.warning("on_kill: stopping Ray job %s at %s: %s", sid, client.address, client.stop(sid))
            return
        dispatcher = self._dispatcher
        if dispatcher is None or dispatcher.handle is None:
            self.log.info("on_kill: no Ray work was started")
            return
        n, left = dispatcher.cancel("Airflow killed the task (on_kill)")
        self.log.warning(
            "on_kill: cancelled %d Ray task(s)/actor(s) of partitions %s; %d still running",
            n,
            self.execution_group.get("partition_ids"),
            left,
        )

    def _connect(self):
        return RayHook(ray_conn_id=self.ray_conn_id, in_process_cpus=ray_cpus(self.local_run)).get_client()

    def _run_group(self, context: Any) -> list[dict]:
        self._dispatcher = RayDispatcher(self._connect, num_cpus=self.cpus_per_partition)
        return fail_fast_on_guard(
            lambda: run_group(
                self.job_dir,
                self.segment_index,
                self.execution_group,
                self._dispatcher,
                try_number=try_number(context),
                event_defaults=event_defaults(context),
                run_id=run_id_of(context),
                say=lambda m: self.log.info("%s", m),
            )
        )

    # -- Ray Jobs mode ---------------------------------------------------------
    def _run_ray_job(self, context: Any) -> list[dict]:
        """Submit the group as a Ray Job, or find its earlier submission; then wait (here or deferred)."""
        from airflow_provider_dj.engine.storage.context import JobContext
        from airflow_provider_dj.hooks.ray_jobs import group_spec

        client = RayHook(ray_conn_id=self.ray_conn_id).get_jobs_client()  # a dead dashboard: refused here
        group, seg = self.execution_group, self.segment_index
        if not group["partition_ids"]:
            self.log.info("Segment %s: no partitions to run", seg)
            return []
        job_id = JobContext(self.job_dir).job_id

        def spec_for(sid: str, attempt: int):
            return group_spec(
                job_dir=self.job_dir,
                job_id=job_id,
                segment_index=seg,
                group=group,
                submission_id=sid,
                attempt=attempt,
                num_cpus=self.cpus_per_partition,
                namespace=client.namespace,
                try_number=try_number(context),
                run_id=run_id_of(context),
                step_key=task_key(context),
                event_defaults=event_defaults(context),
            )

        sub = client.submit_or_attach(spec_for, job_dir=self.job_dir, job_id=job_id, segment_index=seg, group=group)
        self._ray_job = (client, sub.submission_id)
        self.log.info(
            "%s",
            f"Segment {seg}, execution group {group['group_id']} ({group['label']}): Ray job {sub.submission_id} "
            f"{sub.action} at {client.address} (status {sub.status})",
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
                    segment_index=seg,
                    partition_ids=list(group["partition_ids"]),
                    poll_interval=float(self.poll_interval),
                ),
                method_name="execute_complete",
            )
        return self._finish(client, sub.submission_id, self._wait_in_worker(client, sub.submission_id), context)

    def _wait_in_worker(self, client: Any, sid: str) -> str:
        from airflow_provider_dj.hooks.ray_jobs import ACTIVE

        last = None
        while True:
            status, progress = client.poll(sid, self.job_dir, self.segment_index, self.execution_group["partition_ids"])
            if (status, progress) != last:
                self.log.info("Ray job %s: %s; %s", sid, status, progress)
                last = (status, progress)
            if status not in ACTIVE:
                return status
            time.sleep(float(self.poll_interval))

    def execute_complete(self, context: Any, event: dict | None = None) -> list[dict]:
        """The trigger saw the Ray Job end: verify the group's checkpoints, or fail with its log tail."""
        if not event or not event.get("submission_id"):
            raise AirflowFailException(f"{self.task_id}: the Ray job trigger returned no event")
        client = RayHook(ray_conn_id=self.ray_conn_id).get_jobs_client()
        self._ray_job = (client, event["submission_id"])
        if event.get("status") == "error":
            self.log.warning("the trigger could not follow Ray job %s: %s", event["submission_id"], event["message"])
        sid = event["submission_id"]
        return self._finish(client, sid, client.status(sid) or "UNKNOWN", context)

    def _finish(self, client: Any, sid: str, status: str, context: Any = None) -> list[dict]:
        """The group's outcome from its Ray Job's status, the job's stop request, its driver's record and
        the checkpoints.  A Ray Job that ended without success while the job's stop request is pending
        was stopped by it, whatever its driver recorded: the task ends stopped, without retry."""
        from airflow_provider_dj.engine.jobdir import ray_jobs, stop_control
        from airflow_provider_dj.engine.runner.group_job import verify_group
        from airflow_provider_dj.hooks.ray_jobs import ACTIVE, RayJobFailedError

        group, seg = self.execution_group, self.segment_index
        entry = ray_jobs.find_submission(ray_jobs.read_record(self.job_dir, seg, int(group["group_id"])), sid) or {}
        if status == "SUCCEEDED" or entry.get("state") == "succeeded":
            done, message = verify_group(self.job_dir, seg, group["partition_ids"])
            if done:
                results = entry.get("results") or []
                for r in results:
                    self.log.info("%s", _result_line(r))
                self.log.info("%s", f"Ray job {sid}: {message}")
                return results
            raise RayJobFailedError(
                f"Ray job {sid} reported {status} but {message}: clear this task to run the group again"
            )
        refusal = None if entry else client.refusal(sid)
        if refusal:  # refused before any work: a retry would be refused again
            raise AirflowFailException(refusal)
        request = stop_control.read_stop_request(self.job_dir)
        if request is not None and status not in ACTIVE:  # a retry would only stop at once: stopped now
            raise self._stopped(sid, request, context or {})
        if entry.get("state") == "stopped" and entry.get("stopped_by") == "stop_request":
            raise JobStoppedError(f"Ray job {sid} stopped: {entry.get('error')}")  # the request was cleared since
        tail = client.logs_tail(sid)
        what = entry.get("error") or f"status {status}"
        message = f"Ray job {sid} at {client.address} ended {status}: {what}\n--- its log, last lines ---\n{tail}"
        if entry.get("fatal"):
            raise AirflowFailException(message)
        raise RayJobFailedError(message)

    def _stopped(self, sid: str, request: dict, context: Any) -> JobStoppedError:
        """Record the group's stop as the in-worker path does (its Ray job's record, the partitions it cut
        short, this task's acknowledgement, the ``stopped`` summary, the runner lock released)."""
        from airflow_provider_dj.engine.jobdir.stop_control import StopRequested
        from airflow_provider_dj.engine.runner.group_job import settle_stopped_group
        from airflow_provider_dj.engine.runner.stop import record_stop
        from airflow_provider_dj.engine.storage.context import JobContext

        defaults = event_defaults(context)
        job_id = JobContext(self.job_dir).job_id
        cut = settle_stopped_group(
            self.job_dir, job_id, self.segment_index, self.execution_group, sid, request, event_defaults=defaults
        )
        stop = StopRequested(self.job_dir, request, partition_ids=cut)
        done = record_stop(
            self.job_dir,
            stop,
            task_key(context),
            try_number(context),
            run_id_of(context),
            defaults,
            lambda m: self.log.warning("%s", m),
        )
        return JobStoppedError(f"Ray job {sid} stopped: {done}")


def _result_line(r: dict) -> str:
    if r.get("skipped"):
        return f"partition {r['partition_id']}: already complete, no work done"
    return (
        f"partition {r['partition_id']}: resumed after op {r.get('resumed_from_op')}, ran ops {r.get('ops_run')}, "
        f"{r.get('rows_out')} rows out, {r.get('failed_rows')} failed samples"
    )
