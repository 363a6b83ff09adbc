"""CheckpointTrigger: the deferrable half of ``CheckpointSensor``.

Runs in the triggerer and polls the job directory with the same check the
sensor's ``poke`` uses (``engine.job.watch.check``), in a worker thread
(``asyncio.to_thread``) so blocking filesystem or object-store reads never
stall the triggerer's event loop.  It yields exactly one event: success,
or failure with the message naming the failed partitions — the sensor's
``execute_complete`` turns that into the same outcome poke mode has.
Importable without the rest of the provider's Airflow operators, as the
triggerer requires.
"""

from __future__ import annotations

import asyncio
from typing import Any, AsyncIterator

from airflow.triggers.base import BaseTrigger, TriggerEvent

CLASSPATH = "airflow_provider_dj.triggers.checkpoint.CheckpointTrigger"


class CheckpointTrigger(BaseTrigger):
    """Wait in the triggerer until the job directory holds what a ``CheckpointSensor`` waits for.

    :param job_dir: the job directory.
    :param after_op: an op's name or index: its output committed for every partition.
    :param segment_index: the generated DAG's barrier: a segment's output and its dedup keys.
    :param wait_for: ``"export"``: the job completed.
    :param partitions: only these partitions (default: all).
    :param poke_interval: seconds between looks at the job directory.
    """

    def __init__(
        self,
        *,
        job_dir: str,
        after_op: int | str | None = None,
        segment_index: int | None = None,
        wait_for: str | None = None,
        partitions: list[int] | None = None,
        poke_interval: float = 5.0,
    ) -> None:
        super().__init__()
        self.job_dir = job_dir
        self.after_op = after_op
        self.segment_index = segment_index
        self.wait_for = wait_for
        self.partitions = list(partitions) if partitions is not None else None
        self.poke_interval = poke_interval

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return CLASSPATH, {
            "job_dir": self.job_dir,
            "after_op": self.after_op,
            "segment_index": self.segment_index,
            "wait_for": self.wait_for,
            "partitions": self.partitions,
            "poke_interval": self.poke_interval,
        }

    def _check(self) -> dict:
        from airflow_provider_dj.engine.job.watch import JobFailedError, WaitTargetError, check

        try:
            st = check(
                self.job_dir,
                after_op=self.after_op,
                segment_index=self.segment_index,
                wait_for=self.wait_for,
                partitions=self.partitions,
            )
        except JobFailedError as exc:
            return {"status": "failed", "message": str(exc), "partitions": exc.partitions}
        except WaitTargetError as exc:
            return {"status": "error", "message": str(exc)}
        return {"status": "success" if st.done else "waiting", **st.to_dict()}

    async def run(self) -> AsyncIterator[TriggerEvent]:
        polls = 0
        while True:
            result = await asyncio.to_thread(self._check)
            polls += 1
            if result["status"] != "waiting":
                result["polls"] = polls
                yield TriggerEvent(result)
                return
            self.log.info("%s", result["message"])
            await asyncio.sleep(self.poke_interval)
