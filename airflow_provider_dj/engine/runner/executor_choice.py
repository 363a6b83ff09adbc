"""Where ``run_job(executor="auto")`` runs partitions: Ray only where it pays.

Why: starting Ray costs seconds of CPU (its GCS, raylet, dashboard agent, workers), which a job of a
few thousand rows, or a nightly job whose partitions are nearly all reused from last night, never
earns back.  So after planning, when the work left is known, a job whose partitions to compute hold
at most ``[dj] local_work_max_rows`` rows runs them on a local process pool (one partition: in this
process) and never starts Ray; a larger one starts Ray as before.  Both write the same job
directory, checkpoints and export (the local executor and Ray run the same segment code).

A recipe that needs Ray starts it whatever the rows, and its need is known before planning (so its
start overlaps planning): an op that uses CUDA (GPU placement), a stateful op (one model load per
Ray actor, not per partition), or a cluster named by ``RAY_ADDRESS``.

Ray is also started before planning when it is sure to be needed (``ray_sure_before_planning``): a new
job (not a resume), with nothing an earlier job could lend it (reuse off, or no reuse index yet),
whose input, estimated from its bytes and a 1 MiB sample, holds several times the limit.  Otherwise
a large job starts Ray once planning has counted its rows.

"Partitions to compute" are those not committed (a resumed job) and not covered by an earlier job's
checkpoints (nightly reuse; ``engine.execution.reuse.partitions_reusable_whole``, an index look-up):
what the job would actually process.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from airflow_provider_dj import settings
from airflow_provider_dj.ops.registry import get_op_class

if TYPE_CHECKING:
    from airflow_provider_dj.engine.config.schema import Recipe
    from airflow_provider_dj.engine.runner.start import StartedJob

__all__ = ["ExecutorChoice", "choose_after_planning", "ray_needed_before_planning", "ray_sure_before_planning"]

#: Bytes read from the first uncompressed JSONL file to estimate the input's rows before planning.
_SAMPLE_BYTES = 1 << 20
#: Ray is started before planning only when the estimate is this many times the limit: an estimate
#: from a sample can be off, and a Ray started for nothing costs a small job more than a late start.
_SURE_FACTOR = 4


@dataclass(frozen=True)
class ExecutorChoice:
    """``executor`` ("local" or "ray"), the local processes when local, and the line the run logs."""

    executor: str
    workers: int
    line: str


def ray_needed_before_planning(recipe: Recipe) -> str | None:
    """Why this recipe needs Ray whatever its rows, or None."""
    if os.environ.get("RAY_ADDRESS"):
        return "a Ray cluster is configured (RAY_ADDRESS)"
    for spec in recipe.process:
        cls = get_op_class(spec.name)
        if cls.uses_cuda:
            return f"{spec.name} uses a GPU"
        if getattr(cls, "stateful", False):
            return f"{spec.name} keeps a model per Ray actor"
    if settings.get("local_work_max_rows") <= 0:
        return "local_work_max_rows is 0"
    return None


def _committed_partitions(job_dir: str, info: dict[str, Any], segments: int) -> set[int]:
    """Partitions whose every segment is committed (a resumed job's finished ones), by the commit markers
    a Ray Job's submitter checks (``group_job.uncommitted_partitions``)."""
    from airflow_provider_dj.engine.runner.group_job import uncommitted_partitions

    ids = [p["partition_id"] for p in info["partitions"]]
    left: set[int] = set()
    for seg in range(segments):
        left.update(uncommitted_partitions(job_dir, seg, ids))
    return set(ids) - left


def choose_after_planning(started: StartedJob, workers: int) -> ExecutorChoice:
    """Local or Ray for a planned job, from the rows of the partitions left to compute."""
    from airflow_provider_dj.engine.execution.reuse import partitions_reusable_whole
    from airflow_provider_dj.engine.storage.context import JobContext

    limit = settings.get("local_work_max_rows")
    if started.job_complete:
        return ExecutorChoice("local", 1, "the job is complete: nothing to compute, no Ray")
    ctx = JobContext(started.job_dir)
    info = ctx.partitioning_info
    skip = _committed_partitions(started.job_dir, info, len(ctx.plan.segments))
    if started.recipe is not None:
        skip |= set(partitions_reusable_whole(started.recipe, ctx.plan, info, started.job_dir))
    left = [p for p in info["partitions"] if p["partition_id"] not in skip]
    rows = sum(int(p["num_rows"]) for p in left)
    what = f"{len(left)} of {len(info['partitions'])} partitions to compute ({rows:,} rows)"
    if rows > limit:
        return ExecutorChoice("ray", workers, f"{what}: Ray (more than local_work_max_rows = {limit:,})")
    local = max(1, min(workers, len(left)))
    where = "in this process" if local == 1 else f"a local pool of {local} processes"
    return ExecutorChoice("local", local, f"{what}: {where}, no Ray (local_work_max_rows = {limit:,})")


def _estimated_rows(dataset_path: str) -> int | None:
    """The input's rows estimated from its files' bytes and the first 1 MiB of the first one; None when
    that cannot be cheap (a URL, compressed or Parquet input, an empty sample)."""
    from airflow_provider_dj.core import fs as storage
    from airflow_provider_dj.engine.input.sources import list_input_files

    if storage.is_url(dataset_path):
        return None
    try:
        files = list_input_files(dataset_path)
    except Exception:  # noqa: BLE001 - a bad input is planning's to report, with its own message
        return None
    if not files or any(f.format != "jsonl" or f.compression for f in files):
        return None
    with open(files[0].path, "rb") as fh:
        sample = fh.read(_SAMPLE_BYTES)
    lines = sample.count(b"\n")
    if not lines:
        return None
    return int(sum(f.size for f in files) * lines / len(sample))


def ray_sure_before_planning(recipe: Recipe) -> bool:
    """Whether a new job's input is so far past ``local_work_max_rows`` that Ray will be chosen whatever
    planning finds, so its start may overlap planning (module docstring)."""
    from airflow_provider_dj.core import fs as storage
    from airflow_provider_dj.engine.execution.reuse import reuse_enabled
    from airflow_provider_dj.engine.jobdir.layout import reuse_index_dir

    if recipe.resume:
        return False
    if reuse_enabled(recipe) and storage.exists(reuse_index_dir(recipe.work_dir)):
        return False  # an earlier job may cover most partitions: planning decides
    rows = _estimated_rows(recipe.dataset_path)
    return rows is not None and rows > _SURE_FACTOR * settings.get("local_work_max_rows")
