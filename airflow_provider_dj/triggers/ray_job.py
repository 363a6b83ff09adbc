"""RayJobTrigger: the deferred half of ``PartitionGroupOperator``, ``GlobalOpOperator`` and ``ExportOperator``
in Ray Jobs mode.

Runs in the triggerer and follows one Ray Job (a partition group's driver on the cluster, with
``op_index`` set a global op's step, with ``step="export"`` the export, with ``step="plan"`` a new job's
planning) through the dashboard's HTTP
API, and its progress through the job directory (the partitions whose segment output, or keep mask,
is committed; whether the export is), in a worker thread (``asyncio.to_thread``) so blocking HTTP and
file reads never stall the triggerer's event loop.  It yields exactly one event, when the Ray Job ends:
``{"status": <Ray's final status | "UNKNOWN" | "error">, "submission_id", "progress", "message"}``.
The operator's ``execute_complete`` verifies the checkpoints and succeeds, or fails with the Ray
Job's log tail.  The trigger holds no state the task needs: a restarted triggerer runs it again
from its serialized arguments and finds the same Ray Job by its id.  A user's kill of the deferred
task (mark failed, clear) reaches ``on_kill``, which stops the Ray Job.  Importable without the
provider's operators, as the triggerer requires.
"""

from __future__ import annotations

import asyncio
from typing import Any, AsyncIterator

from airflow.triggers.base import BaseTrigger, TriggerEvent

CLASSPATH = "airflow_provider_dj.triggers.ray_job.RayJobTrigger"


class RayJobTrigger(BaseTrigger):
    """Follow one step's Ray Job from the triggerer until it ends (Ray Jobs mode).

    :param dashboard_address: the Ray dashboard the job was submitted to.
    :param submission_id: the Ray Job's submission id.
    :param job_dir: the job directory, where the step's progress is read.
    :param segment_index: a partition group's segment (with ``partition_ids``).
    :param partition_ids: a partition group's partitions.
    :param poll_interval: seconds between looks at the Ray Job.
    :param max_poll_errors: dashboard errors in a row before the trigger gives up and says why.
    :param op_index: a global step's op (its progress: keep masks committed).
    :param step: ``"export"`` for the export's Ray Job, ``"plan"`` for a new job's planning (whose
        ``job_dir`` does not exist yet: its progress is Ray's status alone).
    """

    def __init__(
        self,
        *,
        dashboard_address: str,
        submission_id: str,
        job_dir: str,
        segment_index: int | None = None,
        partition_ids: list[int] | None = None,
        poll_interval: float = 5.0,
        max_poll_errors: int = 5,
        op_index: int | None = None,
        step: str | None = None,
    ) -> None:
        super().__init__()
        self.dashboard_address = dashboard_address
        self.submission_id = submission_id
        self.job_dir = job_dir
        self.segment_index = segment_index
        self.partition_ids = list(partition_ids or [])
        self.op_index = op_index  # a global op's step: progress is its committed keep masks
        self.step = step  # "export": the job's export step; progress is whether it is committed
        self.poll_interval = poll_interval
        self.max_poll_errors = max_poll_errors  # consecutive failed looks before the task is told

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return CLASSPATH, {
            "dashboard_address": self.dashboard_address,
            "submission_id": self.submission_id,
            "job_dir": self.job_dir,
            "segment_index": self.segment_index,
            "partition_ids": self.partition_ids,
            "poll_interval": self.poll_interval,
            "max_poll_errors": self.max_poll_errors,
            "op_index": self.op_index,
            "step": self.step,
        }

    def _poll(self, client) -> tuple[str, str]:
        if self.step == "plan":
            return client.poll_plan(self.submission_id)
        if self.step == "export":
            return client.poll_export(self.submission_id, self.job_dir)
        if self.op_index is not None:
            return client.poll_global(self.submission_id, self.job_dir, self.op_index)
        return client.poll(self.submission_id, self.job_dir, self.segment_index, self.partition_ids)

    async def run(self) -> AsyncIterator[TriggerEvent]:
        from airflow_provider_dj.hooks.ray_jobs import ACTIVE, RayJobsClient

        event: dict[str, Any] = {"submission_id": self.submission_id, "progress": ""}
        client, last, errors = None, None, 0
        while True:
            try:
                if client is None:
                    client = await asyncio.to_thread(RayJobsClient, self.dashboard_address)
                status, progress = await asyncio.to_thread(self._poll, client)
                errors = 0
            except Exception as exc:  # noqa: BLE001 - a dashboard that blinks (a head restarting) is asked again
                errors += 1
                if errors >= self.max_poll_errors:  # one event either way: the task decides (a retry reattaches)
                    yield TriggerEvent({**event, "status": "error", "message": f"{type(exc).__name__}: {exc}"})
                    return
                self.log.warning("Ray job %s: poll %d failed (%s); asking again", self.submission_id, errors, exc)
                client = None
                await asyncio.sleep(self.poll_interval)
                continue
            if (status, progress) != last:
                self.log.info("Ray job %s: %s; %s", self.submission_id, status, progress)
                last = (status, progress)
            if status not in ACTIVE:
                yield TriggerEvent({**event, "status": status, "progress": progress, "message": ""})
                return
            await asyncio.sleep(self.poll_interval)

    async def on_kill(self) -> None:
        """A user marked the deferred task failed (or succeeded) or cleared it: stop its Ray Job, as the
        operator's ``on_kill`` does for a task waiting in the worker.  Airflow calls this only on a user's
        action, never when a triggerer restarts or hands the trigger to another one."""
        from airflow_provider_dj.hooks.ray_jobs import RayJobsClient

        def stop() -> bool:
            return RayJobsClient(self.dashboard_address).stop(self.submission_id)

        stopped = await asyncio.to_thread(stop)
        self.log.warning("on_kill: stopping Ray job %s at %s: %s", self.submission_id, self.dashboard_address, stopped)
