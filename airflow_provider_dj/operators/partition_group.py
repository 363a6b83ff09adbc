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
"""

from __future__ import annotations

from typing import Any, Sequence

from airflow_provider_dj.engine.runner.dispatch import RayDispatcher
from airflow_provider_dj.engine.runner.steps import run_group
from airflow_provider_dj.hooks.ray import RayHook
from airflow_provider_dj.operators.base import (
    DJBaseOperator,
    event_defaults,
    fail_fast_on_guard,
    run_id_of,
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
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.job_dir = job_dir
        self.segment_index = segment_index
        self.execution_group = execution_group
        self.ray_conn_id = ray_conn_id
        self.local_run = local_run  # what `dj-airflow run` decided (operators/local_run.py)
        self.cpus_per_partition = cpus_per_partition
        self._dispatcher: RayDispatcher | None = None

    def execute(self, context: Any) -> list[dict]:
        return self.run_stoppable(context, self.job_dir, lambda: self._run_group(context))

    def on_kill(self) -> None:
        """Cancel this task's Ray work (force: the workers die) and wait until it has ended."""
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
