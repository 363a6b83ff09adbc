"""GlobalOpOperator: the whole-dataset step of a deduplicator.

Runs after the barrier, over the keys every partition committed, and
commits one keep mask per partition.  A small step (its keys within
``[dj] global_shard_memory_mb``) runs in the task process itself; a larger
one is sharded (engine/execution/global_shards.py) and its tasks run on the
Ray the ``ray`` connection names (embedded or a cluster), so this process
holds no key.  Its result is durable in the job directory: a retry or a
clear redoes only what did not commit.

Ray Jobs mode (the ``ray`` connection names a dashboard; docs/deployment.md): the step runs as one
Ray Job whose driver lives on the cluster (engine/runner/global_job.py), which runs the step there
and its key shards' tasks as its Ray tasks, so neither the keys nor the orchestration touch the
Airflow worker.  It is submitted under a deterministic id (``dj-<job>-<dir hash>-op<i>``, then
``-r<n>`` after a failed or stopped attempt; hooks/ray_jobs.py), and the task waits for it in the
triggerer (``deferrable``, by default ``[dj] ray_jobs_deferrable`` as the partition tasks do) or in
the worker.  It succeeds once every partition's keep mask is committed, else fails with the Ray
job's log tail.  A job already complete, or whose masks are all committed, submits nothing; a retry
or a restarted worker attaches to the running submission instead of starting another; ``on_kill``
stops the Ray Job.

:param job_dir: the job directory (templated).
:param op_index: the global op's index in the plan.
:param ray_conn_id: the Ray connection its sharded tasks run on (or, in Ray Jobs mode, the step).
:param local_run: set by ``dj-airflow run`` (operators/local_run.py).
:param deferrable: Ray Jobs mode: wait for the step's Ray Job in the triggerer (True) or in the
    worker (False); None: ``[dj] ray_jobs_deferrable``.
:param poll_interval: Ray Jobs mode: seconds between looks at the Ray Job.
"""

from __future__ import annotations

import time
from typing import Any, Sequence

from airflow_provider_dj import settings
from airflow_provider_dj.engine.execution.global_shards import ray_task_runner
from airflow_provider_dj.engine.job.completed_export import is_job_complete
from airflow_provider_dj.engine.runner.steps import run_global_step
from airflow_provider_dj.hooks.ray import RayHook
from airflow_provider_dj.operators.base import (
    AirflowFailException,
    DJBaseOperator,
    JobStoppedError,
    event_defaults,
    run_id_of,
    task_key,
    try_number,
)
from airflow_provider_dj.operators.local_run import ray_cpus


class GlobalOpOperator(DJBaseOperator):
    template_fields: Sequence[str] = ("job_dir",)
    ui_color = "#f6d9e8"
    lineage_step = "global"

    def __init__(
        self,
        *,
        job_dir: str,
        op_index: int,
        ray_conn_id: str | None = RayHook.default_conn_name,
        local_run: dict | None = None,
        deferrable: bool | None = None,
        poll_interval: float = 5.0,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.job_dir = job_dir
        self.op_index = op_index
        self.ray_conn_id = ray_conn_id
        self.local_run = local_run
        self.deferrable = bool(settings.get("ray_jobs_deferrable")) if deferrable is None else bool(deferrable)
        self.poll_interval = poll_interval
        self._ray_job: tuple[Any, str] | None = None  # Ray Jobs mode: (client, submission id)

    def _ray_tasks(self, fn: Any, args_list: list[tuple]) -> list[Any]:
        """Run a sharded step's tasks on Ray, connecting only when the step is sharded."""
        RayHook(ray_conn_id=self.ray_conn_id, in_process_cpus=ray_cpus(self.local_run)).get_client()
        return ray_task_runner(fn, args_list)

    def execute(self, context: Any) -> dict:
        if is_job_complete(self.job_dir):
            self.log.info("job already completed: nothing to do")
            return {"op_index": self.op_index, "skipped": True}
        if RayHook(ray_conn_id=self.ray_conn_id).resolve()["mode"] == "jobs":
            return self.run_stoppable(context, self.job_dir, lambda: self._run_ray_job(context))
        # A pending stop ends this task before the whole-dataset step (docs/stop_and_kill.md).
        result = self.run_stoppable(
            context,
            self.job_dir,
            lambda: run_global_step(
                self.job_dir, self.op_index, event_defaults=event_defaults(context), run_tasks=self._ray_tasks
            ),
        )
        self.log.info("global op %d: %s", self.op_index, result)
        return result

    def on_kill(self) -> None:
        """Ray Jobs mode: stop the step's Ray Job (its driver records the stop).  Otherwise the step's
        Ray tasks end with this process (their driver)."""
        if self._ray_job is not None:
            client, sid = self._ray_job
            self.log.warning("on_kill: stopping Ray job %s at %s: %s", sid, client.address, client.stop(sid))

    # -- Ray Jobs mode ---------------------------------------------------------
    def _run_ray_job(self, context: Any) -> dict:
        """Submit the step as a Ray Job, or find its earlier submission; then wait (here or deferred)."""
        from airflow_provider_dj.engine.runner.global_job import verify_global
        from airflow_provider_dj.engine.storage.context import JobContext
        from airflow_provider_dj.hooks.ray_jobs import global_spec

        done, message = verify_global(self.job_dir, self.op_index)
        if done:  # nothing to run: no dashboard is asked
            self.log.info("global op %d: %s; nothing to submit", self.op_index, message)
            return {"op_index": self.op_index, "skipped": True}
        client = RayHook(ray_conn_id=self.ray_conn_id).get_jobs_client()  # a dead dashboard: refused here
        job_id = JobContext(self.job_dir).job_id

        def spec_for(sid: str, attempt: int):
            return global_spec(
                job_dir=self.job_dir,
                job_id=job_id,
                op_index=self.op_index,
                submission_id=sid,
                attempt=attempt,
                namespace=client.namespace,
                try_number=try_number(context),
                run_id=run_id_of(context),
                step_key=task_key(context),
                event_defaults=event_defaults(context),
            )

        sub = client.submit_or_attach_global(spec_for, job_dir=self.job_dir, job_id=job_id, op_index=self.op_index)
        self._ray_job = (client, sub.submission_id)
        self.log.info(
            "%s",
            f"Global op {self.op_index}: Ray job {sub.submission_id} {sub.action} at {client.address} "
            f"(status {sub.status})",
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
                    op_index=self.op_index,
                    poll_interval=float(self.poll_interval),
                ),
                method_name="execute_complete",
            )
        return self._finish(client, sub.submission_id, self._wait_in_worker(client, sub.submission_id), context)

    def _wait_in_worker(self, client: Any, sid: str) -> str:
        from airflow_provider_dj.hooks.ray_jobs import ACTIVE

        last = None
        while True:
            status, progress = client.poll_global(sid, self.job_dir, self.op_index)
            if (status, progress) != last:
                self.log.info("Ray job %s: %s; %s", sid, status, progress)
                last = (status, progress)
            if status not in ACTIVE:
                return status
            time.sleep(float(self.poll_interval))

    def execute_complete(self, context: Any, event: dict | None = None) -> dict:
        """The trigger saw the Ray Job end: verify the keep masks, or fail with its log tail."""
        if not event or not event.get("submission_id"):
            raise AirflowFailException(f"{self.task_id}: the Ray job trigger returned no event")
        client = RayHook(ray_conn_id=self.ray_conn_id).get_jobs_client()
        sid = event["submission_id"]
        self._ray_job = (client, sid)
        if event.get("status") == "error":
            self.log.warning("the trigger could not follow Ray job %s: %s", sid, event["message"])
        return self._finish(client, sid, client.status(sid) or "UNKNOWN", context)

    def _finish(self, client: Any, sid: str, status: str, context: Any = None) -> dict:
        """The step's outcome from its Ray Job's status, the job's stop request, its driver's record and
        the keep masks.  A Ray Job that ended without success while the job's stop request is pending
        was stopped by it, whatever its driver recorded: the task ends stopped, without retry."""
        from airflow_provider_dj.engine.jobdir import ray_jobs, stop_control
        from airflow_provider_dj.engine.runner.global_job import verify_global
        from airflow_provider_dj.hooks.ray_jobs import ACTIVE, RayJobFailedError

        entry = ray_jobs.find_submission(ray_jobs.read_global_record(self.job_dir, self.op_index), sid) or {}
        if status == "SUCCEEDED" or entry.get("state") == "succeeded":
            done, message = verify_global(self.job_dir, self.op_index)
            if done:
                result = entry.get("results") or {"op_index": self.op_index}
                self.log.info("global op %d: %s", self.op_index, result)
                self.log.info("%s", f"Ray job {sid}: {message}")
                return result
            raise RayJobFailedError(
                f"Ray job {sid} at {client.address} reported {status} but {message}: clear this task to run the "
                f"global step again\n--- its log, last lines ---\n{client.logs_tail(sid)}"
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
        """Record the step's stop as the in-worker path does (its Ray job's record, this task's
        acknowledgement, the ``stopped`` summary, the runner lock released)."""
        from airflow_provider_dj.engine.jobdir.stop_control import StopRequested
        from airflow_provider_dj.engine.runner.global_job import settle_stopped_global
        from airflow_provider_dj.engine.runner.stop import record_stop
        from airflow_provider_dj.engine.storage.context import JobContext

        settle_stopped_global(self.job_dir, JobContext(self.job_dir).job_id, self.op_index, sid, request)
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
