"""RayJobTrigger: the deferred half of ``PartitionGroupOperator`` in Ray Jobs mode.

Runs in the triggerer and follows one Ray Job (a partition group's driver on the cluster) through
the dashboard's HTTP API, and the group's progress through the job directory (the partitions whose
segment output is committed), in a worker thread (``asyncio.to_thread``) so blocking HTTP and file
reads never stall the triggerer's event loop.  It yields exactly one event, when the Ray Job ends:
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
    def __init__(
        self,
        *,
        dashboard_address: str,
        submission_id: str,
        job_dir: str,
        segment_index: int,
        partition_ids: list[int],
        poll_interval: float = 5.0,
    ) -> None:
        super().__init__()
        self.dashboard_address = dashboard_address
        self.submission_id = submission_id
        self.job_dir = job_dir
        self.segment_index = segment_index
        self.partition_ids = list(partition_ids)
        self.poll_interval = poll_interval

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return CLASSPATH, {
            "dashboard_address": self.dashboard_address,
            "submission_id": self.submission_id,
            "job_dir": self.job_dir,
            "segment_index": self.segment_index,
            "partition_ids": self.partition_ids,
            "poll_interval": self.poll_interval,
        }

    def _poll(self, client) -> tuple[str, str]:
        return client.poll(self.submission_id, self.job_dir, self.segment_index, self.partition_ids)

    async def run(self) -> AsyncIterator[TriggerEvent]:
        from airflow_provider_dj.hooks.ray_jobs import ACTIVE, RayJobsClient

        event: dict[str, Any] = {"submission_id": self.submission_id, "progress": ""}
        try:
            client = await asyncio.to_thread(RayJobsClient, self.dashboard_address)
            last = None
            while True:
                status, progress = await asyncio.to_thread(self._poll, client)
                if (status, progress) != last:
                    self.log.info("Ray job %s: %s; %s", self.submission_id, status, progress)
                    last = (status, progress)
                if status not in ACTIVE:
                    yield TriggerEvent({**event, "status": status, "progress": progress, "message": ""})
                    return
                await asyncio.sleep(self.poll_interval)
        except Exception as exc:  # noqa: BLE001 - one event either way: the task decides (retry reattaches)
            yield TriggerEvent({**event, "status": "error", "message": f"{type(exc).__name__}: {exc}"})

    async def on_kill(self) -> None:
        """A user marked the deferred task failed (or succeeded) or cleared it: stop its Ray Job, as the
        operator's ``on_kill`` does for a task waiting in the worker.  Airflow calls this only on a user's
        action, never when a triggerer restarts or hands the trigger to another one."""
        from airflow_provider_dj.hooks.ray_jobs import RayJobsClient

        def stop() -> bool:
            return RayJobsClient(self.dashboard_address).stop(self.submission_id)

        stopped = await asyncio.to_thread(stop)
        self.log.warning("on_kill: stopping Ray job %s at %s: %s", self.submission_id, self.dashboard_address, stopped)
