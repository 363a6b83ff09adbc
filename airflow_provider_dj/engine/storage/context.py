"""``JobContext``: one job's durable state, read lazily from its directory, as any task sees it.

Everything a task needs is in the job directory, so any task on any node can reconstruct the job
from ``(work_dir, job_id)`` alone: XComs are lost on a UI clear, the job directory is not.
"""

from __future__ import annotations

from functools import cached_property

import pyarrow as pa

from airflow_provider_dj.core import fs as storage
from airflow_provider_dj.engine.config.recipe import recipe_from_dict
from airflow_provider_dj.engine.jobdir.doc_cache import read_partitioning_info
from airflow_provider_dj.engine.jobdir.layout import EFFECTIVE_CONFIG, read_json
from airflow_provider_dj.engine.planning.plan import build_plan
from airflow_provider_dj.engine.storage.checkpoints import CheckpointStore, StorageFormat


class JobContext:
    """Lazy view of one job's durable state, as any task sees it."""

    def __init__(self, job_dir: str) -> None:
        self.job_dir = job_dir

    def path(self, rel: str) -> str:
        return storage.join(self.job_dir, *rel.split("/"))

    @cached_property
    def effective_config(self) -> dict:
        return read_json(self.path(EFFECTIVE_CONFIG))

    @cached_property
    def recipe(self):
        return recipe_from_dict(self.effective_config)

    @cached_property
    def job_id(self) -> str:
        return self.effective_config.get("job_id") or storage.basename(self.job_dir)

    @cached_property
    def partitioning_info(self) -> dict:
        """Read-only: parsed once per process and version of the file and shared by every caller
        (``engine/jobdir/doc_cache.py``); ``copy.deepcopy`` it for a mutable copy."""
        return read_partitioning_info(self.job_dir)

    @cached_property
    def plan(self):
        return build_plan(self.recipe)

    @cached_property
    def storage_format(self):
        st = self.recipe.intermediate_storage
        return StorageFormat(st.format, st.compression)

    def partition(self, partition_id: int) -> dict:
        parts = self.partitioning_info["partitions"]
        if not 0 <= partition_id < len(parts):
            raise IndexError(f"partition {partition_id} does not exist (job has {len(parts)})")
        return parts[partition_id]


def read_checkpoint(job_dir: str, op_index: int, partition_id: int) -> pa.Table | None:
    """The table after op ``op_index`` for one partition, whole or rebuilt from deltas, exactly as a
    resume would load it; None when that checkpoint is absent or invalid.  For people and tools that
    inspect intermediate data: a delta checkpoint's own file holds only keep flags and patches."""
    ctx = JobContext(job_dir)
    op = ctx.plan.ops[op_index]
    part = ctx.partition(partition_id)
    cp = CheckpointStore(job_dir, ctx.storage_format).load_valid(
        op_index, op.name, partition_id, part["content_hash"], op.fingerprint
    )
    return None if cp is None else cp.table
