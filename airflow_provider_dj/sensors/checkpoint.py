"""CheckpointSensor: the barrier before a global op.

It succeeds when every partition has committed the state the global step
needs (its segment output and its dedup keys), read from the job directory
itself rather than from task states — a task marked success by hand without
its work done cannot slip past it.  Works in ``poke`` and ``reschedule``
mode (``mode=`` as for any Airflow sensor).
"""

from __future__ import annotations

from typing import Any, Sequence

from airflow.sdk.bases.sensor import BaseSensorOperator

from airflow_provider_dj.engine.checkpoints import CheckpointStore
from airflow_provider_dj.engine.export import is_job_complete
from airflow_provider_dj.engine.job import JobContext
from airflow_provider_dj.engine.segment_runner import keys_store


def committed_partitions(job_dir: str, segment_index: int) -> tuple[list[int], list[int]]:
    """(committed, missing) partition ids for a segment's output."""
    ctx = JobContext(job_dir)
    plan = ctx.plan
    seg = plan.segments[segment_index]
    store = CheckpointStore(job_dir, ctx.storage_format)
    ks = keys_store(job_dir)
    target = seg.end - 1
    done, missing = [], []
    for p in ctx.partitioning_info["partitions"]:
        pid, h = p["partition_id"], p["content_hash"]
        ok = target < 0 or store.is_committed(target, plan.ops[target].name, pid, h, plan.ops[target].fingerprint)
        if ok and seg.keys_for_global is not None:
            g = seg.keys_for_global
            ok = ks.is_committed(g, plan.ops[g].name, pid, h, plan.ops[g].fingerprint)
        (done if ok else missing).append(pid)
    return done, missing


class CheckpointSensor(BaseSensorOperator):
    template_fields: Sequence[str] = ("job_dir",)
    ui_color = "#fbe5c8"

    def __init__(self, *, job_dir: str, segment_index: int, **kwargs: Any) -> None:
        kwargs.setdefault("poke_interval", 5)
        kwargs.setdefault("timeout", 60 * 60)
        super().__init__(**kwargs)
        self.job_dir = job_dir
        self.segment_index = segment_index

    def poke(self, context: Any) -> bool:
        if is_job_complete(self.job_dir):
            self.log.info("job already completed: nothing to wait for")
            return True
        done, missing = committed_partitions(self.job_dir, self.segment_index)
        total = len(done) + len(missing)
        self.log.info("segment %d: %d/%d partitions committed%s", self.segment_index, len(done), total,
                      f"; waiting for {missing[:20]}" if missing else "")
        return not missing
