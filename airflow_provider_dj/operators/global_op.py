"""GlobalOpOperator: the whole-dataset step of a deduplicator.

Runs after the barrier, over the keys every partition committed, and
commits one keep mask per partition.  A small step (its keys within
``[dj] global_shard_memory_mb``) runs in the task process itself; a larger
one is sharded (engine/execution/global_shards.py) and its tasks run on the
Ray the ``ray`` connection names (embedded, a cluster, or in Ray Jobs mode
the connection's GCS address), so this process holds no key.  Its result is
durable in the job directory: a retry or a clear redoes only what did not
commit.

:param job_dir: the job directory (templated).
:param op_index: the global op's index in the plan.
:param ray_conn_id: the Ray connection its sharded tasks run on.
:param local_run: set by ``dj-airflow run`` (operators/local_run.py).
"""

from __future__ import annotations

from typing import Any, Sequence

from airflow_provider_dj.engine.execution.global_shards import ray_task_runner
from airflow_provider_dj.engine.job.completed_export import is_job_complete
from airflow_provider_dj.engine.runner.steps import run_global_step
from airflow_provider_dj.hooks.ray import RayHook
from airflow_provider_dj.operators.base import DJBaseOperator, event_defaults
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
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.job_dir = job_dir
        self.op_index = op_index
        self.ray_conn_id = ray_conn_id
        self.local_run = local_run

    def _ray_tasks(self, fn: Any, args_list: list[tuple]) -> list[Any]:
        """Run a sharded step's tasks on Ray, connecting only when the step is sharded."""
        RayHook(ray_conn_id=self.ray_conn_id, in_process_cpus=ray_cpus(self.local_run)).get_client()
        return ray_task_runner(fn, args_list)

    def execute(self, context: Any) -> dict:
        if is_job_complete(self.job_dir):
            self.log.info("job already completed: nothing to do")
            return {"op_index": self.op_index, "skipped": True}
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
