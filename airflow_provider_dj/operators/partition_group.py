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

from airflow.sdk import BaseOperator

from airflow_provider_dj.engine.execution.ray_dispatch import DispatchHandle, run_partitions
from airflow_provider_dj.engine.jobdir import lock as job_lock
from airflow_provider_dj.engine.storage.context import JobContext
from airflow_provider_dj.hooks.ray import RayHook
from airflow_provider_dj.operators._common import event_defaults, fail_fast_on_guard, run_stoppable, try_number
from airflow_provider_dj.operators.local_run import ray_cpus

MAP_INDEX_TEMPLATE = "{{ task.execution_group['label'] }}"


class PartitionGroupOperator(BaseOperator):
    template_fields: Sequence[str] = ("job_dir",)
    ui_color = "#d9ecf9"

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
        self._dispatch: DispatchHandle | None = None

    def execute(self, context: Any) -> list[dict]:
        return run_stoppable(self, context, self.job_dir, lambda: self._run_group(context))

    def on_kill(self) -> None:
        """Cancel this task's Ray work (force: the workers die) and wait until it has ended."""
        handle = self._dispatch
        if handle is None:
            self.log.info("on_kill: no Ray work was started")
            return
        n = handle.cancel("Airflow killed the task (on_kill)")
        left = handle.wait_ended()
        self.log.warning(
            "on_kill: cancelled %d Ray task(s)/actor(s) of partitions %s; %d still running",
            n,
            self.execution_group.get("partition_ids"),
            left,
        )

    def _run_group(self, context: Any) -> list[dict]:
        group = self.execution_group
        if not group["partition_ids"]:  # the placeholder of a run with nothing to do (ResumeValidatorOperator)
            self.log.info("Segment %d: no partitions to run", self.segment_index)
            return []
        self.log.info(
            "Segment %d, execution group %s: partitions %s (%s)",
            self.segment_index,
            group["group_id"],
            group["partition_ids"],
            group["label"],
        )
        # Refuses if another live runner owns this job; refreshes our heartbeat.
        job_lock.heartbeat(self.job_dir, context["dag_run"].run_id)
        ray = RayHook(ray_conn_id=self.ray_conn_id, in_process_cpus=ray_cpus(self.local_run)).get_client()
        parts = JobContext(self.job_dir).partitioning_info["partitions"]
        rows = {p["partition_id"]: p["num_rows"] for p in parts}
        self._dispatch = DispatchHandle()
        results = fail_fast_on_guard(
            lambda: run_partitions(
                ray,
                self.job_dir,
                self.segment_index,
                list(group["partition_ids"]),
                try_number=try_number(context),
                event_defaults=event_defaults(context),
                num_cpus=self.cpus_per_partition,
                on_progress=lambda msg: self.log.info("%s", msg),
                rows_by_partition=rows,
                handle=self._dispatch,
                max_in_flight=group.get("max_in_flight"),  # resolved by validate (docs/gpu_planning.md)
                actor_resources=group.get("actor_resources"),  # per-op actor plan, for stateful ops' actor pools
            )
        )
        for r in results:
            if r["skipped"]:
                self.log.info("partition %s: already complete, no work done", r["partition_id"])
            else:
                self.log.info(
                    "partition %s: resumed after op %s, ran ops %s, %d rows out, %d failed samples",
                    r["partition_id"],
                    r["resumed_from_op"],
                    r["ops_run"],
                    r["rows_out"],
                    r["failed_rows"],
                )
        return results
