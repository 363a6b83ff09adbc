"""PartitionGroupOperator: one mapped task instance per execution group.

Each instance runs one segment of the pipeline for its partitions on Ray.
All durable state is in the job directory keyed by partition id — not in
XCom, which a UI clear deletes, and not by map_index — so every try, retry
or clear resumes from the partitions' latest valid checkpoints and runs
only what is missing.  The grid shows each instance by its partitions and
row range (``map_index_template``), so a failed partition is obvious and
can be cleared alone.
"""

from __future__ import annotations

from typing import Any, Sequence

from airflow.sdk import BaseOperator

from airflow_provider_dj.engine import job_lock
from airflow_provider_dj.engine.job import JobContext
from airflow_provider_dj.engine.ray_dispatch import run_partitions
from airflow_provider_dj.hooks.ray import RayHook
from airflow_provider_dj.operators._common import event_defaults, try_number

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
        cpus_per_partition: float = 1,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.job_dir = job_dir
        self.segment_index = segment_index
        self.execution_group = execution_group
        self.ray_conn_id = ray_conn_id
        self.cpus_per_partition = cpus_per_partition

    def execute(self, context: Any) -> list[dict]:
        group = self.execution_group
        self.log.info("Segment %d, execution group %s: partitions %s (%s)", self.segment_index, group["group_id"],
                      group["partition_ids"], group["label"])
        # Refuses if another live runner owns this job; refreshes our heartbeat.
        job_lock.heartbeat(self.job_dir, context["dag_run"].run_id)
        ray = RayHook(ray_conn_id=self.ray_conn_id).get_client()
        parts = JobContext(self.job_dir).partitioning_info["partitions"]
        rows = {p["partition_id"]: p["num_rows"] for p in parts}
        results = run_partitions(
            ray,
            self.job_dir,
            self.segment_index,
            list(group["partition_ids"]),
            try_number=try_number(context),
            event_defaults=event_defaults(context),
            num_cpus=self.cpus_per_partition,
            on_progress=lambda msg: self.log.info("%s", msg),
            rows_by_partition=rows,
        )
        for r in results:
            if r["skipped"]:
                self.log.info("partition %s: already complete, no work done", r["partition_id"])
            else:
                self.log.info("partition %s: resumed after op %s, ran ops %s, %d rows out, %d failed samples",
                              r["partition_id"], r["resumed_from_op"], r["ops_run"], r["rows_out"], r["failed_rows"])
        return results
