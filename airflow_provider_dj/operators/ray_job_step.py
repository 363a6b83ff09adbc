"""Ray Jobs mode for a step operator: submit or reattach, wait (deferred or in the worker), then decide.

``PartitionGroupOperator``, ``GlobalOpOperator`` and ``ExportOperator`` each run one step of a job as a
Ray Job whose driver lives on the cluster (docs/deployment.md, "Ray Jobs mode").  What differs between
them is a :class:`RayJobStep`: how its Ray Job is submitted and polled, what proves it done, what its
success returns, how a stop is settled.  What they share lives here, once: the submission under a
deterministic id, the wait in the triggerer or the worker, and the outcome decided from the Ray Job's
status, the job's stop request, the driver's record and the step's committed outputs.  A Ray Job that
ended without success while the job's stop request is pending was stopped by it, whatever its driver
recorded: the task ends stopped, without a retry.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

from airflow_provider_dj.hooks.ray import RayHook
from airflow_provider_dj.operators.base import (
    AirflowFailException,
    JobStoppedError,
    event_defaults,
    run_id_of,
    task_key,
    try_number,
)

if TYPE_CHECKING:
    from airflow.sdk import Context


@dataclass
class RayJobStep:
    """One step's Ray Job, as the operator that runs it describes it.

    :param label: how the log names the step ("Export", "Global op 1", "Segment 0, execution group 3").
    :param again: what clearing the task does, for a failure's message ("export again").
    :param submit: ``(client, spec_for) -> submission``: submits or reattaches under the step's id.
    :param spec: ``(client, submission_id, attempt) -> spec``: what the driver is given.
    :param poll: ``(client, submission_id) -> (status, progress)`` while waiting in the worker.
    :param trigger: the step's ``RayJobTrigger`` arguments besides the dashboard, id and interval.
    :param record_entry: ``submission_id -> entry``: the driver's record of that submission ({} if none).
    :param verify: ``() -> (done, message)``: whether the step's outputs are all committed.
    :param succeeded: ``(entry, submission_id, message) -> result``: the task's result once verified.
    :param settle_stopped: ``(submission_id, request, event_defaults) -> partitions cut short or None``.
    """

    label: str
    again: str
    submit: Callable[[Any, Callable[[str, int], Any]], Any]
    spec: Callable[[Any, str, int], Any]
    poll: Callable[[Any, str], tuple[str, str]]
    record_entry: Callable[[str], dict]
    verify: Callable[[], tuple[bool, str]]
    succeeded: Callable[[dict, str, str], Any]
    settle_stopped: Callable[[str, dict, dict], list | None]
    trigger: dict = field(default_factory=dict)


class RayJobStepMixin:
    """The shared Ray Jobs mode of a step operator; the operator provides ``_ray_job_step(context)`` and
    has ``job_dir``, ``ray_conn_id``, ``deferrable`` and ``poll_interval``."""

    _ray_job: tuple[Any, str] | None = None  # (client, submission id) once submitted or found

    def _ray_job_step(self, context: Context) -> RayJobStep:  # pragma: no cover - every operator defines it
        raise NotImplementedError

    def _submit_and_wait(self, context: Context) -> Any:
        """Submit the step as a Ray Job, or find its earlier submission; then wait (here or deferred)."""
        step = self._ray_job_step(context)
        client = RayHook(ray_conn_id=self.ray_conn_id).get_jobs_client()  # a dead dashboard: refused here
        sub = step.submit(client, lambda sid, attempt: step.spec(client, sid, attempt))
        self._ray_job = (client, sub.submission_id)
        self.log.info(
            "%s", f"{step.label}: Ray job {sub.submission_id} {sub.action} at {client.address} (status {sub.status})"
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
                    poll_interval=float(self.poll_interval),
                    **step.trigger,
                ),
                method_name="execute_complete",
            )
        return self._finish(client, sub.submission_id, self._wait_in_worker(step, client, sub.submission_id), context)

    def _wait_in_worker(self, step: RayJobStep, client: Any, sid: str) -> str:
        from airflow_provider_dj.hooks.ray_jobs import ACTIVE

        last = None
        while True:
            status, progress = step.poll(client, sid)
            if (status, progress) != last:
                self.log.info("Ray job %s: %s; %s", sid, status, progress)
                last = (status, progress)
            if status not in ACTIVE:
                return status
            time.sleep(float(self.poll_interval))

    def execute_complete(self, context: Context, event: dict | None = None) -> Any:
        """The trigger saw the Ray Job end: verify the step's outputs, or fail with its log tail."""
        if not event or not event.get("submission_id"):
            raise AirflowFailException(f"{self.task_id}: the Ray job trigger returned no event")
        client = RayHook(ray_conn_id=self.ray_conn_id).get_jobs_client()
        sid = event["submission_id"]
        self._ray_job = (client, sid)
        if event.get("status") == "error":
            self.log.warning("the trigger could not follow Ray job %s: %s", sid, event["message"])
        return self._finish(client, sid, client.status(sid) or "UNKNOWN", context)

    def _finish(self, client: Any, sid: str, status: str, context: Context | None = None) -> Any:
        """The step's outcome from its Ray Job's status, the job's stop request, its driver's record and
        its committed outputs (see the module docstring)."""
        from airflow_provider_dj.engine.jobdir import stop_control
        from airflow_provider_dj.hooks.ray_jobs import ACTIVE, RayJobFailedError

        step = self._ray_job_step(context or {})
        entry = step.record_entry(sid) or {}
        if status == "SUCCEEDED" or entry.get("state") == "succeeded":
            done, message = step.verify()
            if done:
                return step.succeeded(entry, sid, message)
            raise RayJobFailedError(
                f"Ray job {sid} at {client.address} reported {status} but {message}: clear this task to "
                f"{step.again}\n--- its log, last lines ---\n{client.logs_tail(sid)}"
            )
        refusal = None if entry else client.refusal(sid)
        if refusal:  # refused before any work: a retry would be refused again
            raise AirflowFailException(refusal)
        request = stop_control.read_stop_request(self.job_dir)
        if request is not None and status not in ACTIVE:  # a retry would only stop at once: stopped now
            raise self._stopped(step, sid, request, context or {})
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

    def _stopped(self, step: RayJobStep, sid: str, request: dict, context: Context) -> JobStoppedError:
        """Record the step's stop as the in-worker path does (its Ray job's record, the partitions it cut
        short, this task's acknowledgement, the ``stopped`` summary, the runner lock released)."""
        from airflow_provider_dj.engine.jobdir.stop_control import StopRequested
        from airflow_provider_dj.engine.runner.stop import record_stop

        defaults = event_defaults(context)
        cut = step.settle_stopped(sid, request, defaults)
        done = record_stop(
            self.job_dir,
            StopRequested(self.job_dir, request, partition_ids=cut),
            task_key(context),
            try_number(context),
            run_id_of(context),
            defaults,
            lambda m: self.log.warning("%s", m),
        )
        return JobStoppedError(f"Ray job {sid} stopped: {done}")

    def _stop_ray_job(self) -> bool:
        """``on_kill`` in Ray Jobs mode: stop the step's Ray Job (its driver records the stop); False when
        none was submitted or found."""
        if self._ray_job is None:
            return False
        client, sid = self._ray_job
        self.log.warning("on_kill: stopping Ray job %s at %s: %s", sid, client.address, client.stop(sid))
        return True

    def _spec_context(self, context: Context) -> dict:
        """The spec fields every step's driver gets from the task's context."""
        return {
            "try_number": try_number(context),
            "run_id": run_id_of(context),
            "step_key": task_key(context),
            "event_defaults": event_defaults(context),
        }
