"""GlobalOpOperator: the whole-dataset step of a deduplicator.

Runs after the barrier, over the keys every partition committed, and
commits one keep mask per partition.  It reads only fixed-size keys, so it
runs in the task process itself; its result is durable in the job
directory, so re-running it (retry or clear) is idempotent.
"""

from __future__ import annotations

from typing import Any, Sequence

from airflow_provider_dj.engine.job.completed_export import is_job_complete
from airflow_provider_dj.engine.runner.steps import run_global_step
from airflow_provider_dj.operators.base import DJBaseOperator, event_defaults


class GlobalOpOperator(DJBaseOperator):
    template_fields: Sequence[str] = ("job_dir",)
    ui_color = "#f6d9e8"
    lineage_step = "global"

    def __init__(self, *, job_dir: str, op_index: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.job_dir = job_dir
        self.op_index = op_index

    def execute(self, context: Any) -> dict:
        if is_job_complete(self.job_dir):
            self.log.info("job already completed: nothing to do")
            return {"op_index": self.op_index, "skipped": True}
        # A pending stop ends this task before the whole-dataset step (docs/stop_and_kill.md).
        result = self.run_stoppable(
            context,
            self.job_dir,
            lambda: run_global_step(self.job_dir, self.op_index, event_defaults=event_defaults(context)),
        )
        self.log.info("global op %d: %s", self.op_index, result)
        return result
