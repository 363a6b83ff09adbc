"""What ``dj-airflow run`` prints about a finished job, and the job-dir facts it reads to say it.

Shared by both ways the command runs a job (the engine's local executor and ``--airflow``'s
``dag.test()``): the same summary lines and refusal messages whichever ran it.
"""

from __future__ import annotations

import json
import os

from airflow_provider_dj import settings
from airflow_provider_dj.engine.jobdir.layout import JOB_SUMMARY, PARTITIONING_INFO


def print_completed(summary: dict, job_id: str, job_dir: str, run_id: str, wall: float, *, label: str) -> None:
    """Print a completed job's summary: input, each op's row accounting, the export and reuse.

    ``label`` names what ran it (``DAG run`` or ``Run``), followed by its run id."""
    print(f"\n{label} {run_id}: success in {wall:.1f}s")
    print(f"  job:    {job_id} ({job_dir})")
    print(f"  input:  {summary['input']['total_rows']} rows in {summary['input']['partitions']} partitions")
    for op in summary["ops"]:
        print(
            f"  op {op['op_index']} {op.get('op_name', ''):<34} in {op['rows_in']:>9}  out {op['rows_out']:>9}"
            f"  filtered {op['filtered']:>7}  dup {op['duplicates']:>7}  failed {op['failed']:>5}"
        )
    print(f"  export: {summary['export']['rows']} rows -> {summary['export']['path']}")
    from airflow_provider_dj.engine.execution.reuse import reuse_line

    line = reuse_line(summary.get("reuse"))  # nightly reuse across jobs (docs/nightly.md)
    if line:
        print(f"  reuse:  {line}")


def held_by_another_runner(work_dir: str, job_id: str, airflow_run_id: str | None = None) -> str | None:
    """The refusal message if another live runner holds the job's lock (host, pid, run id), else None."""
    from airflow_provider_dj.core import fs as storage
    from airflow_provider_dj.engine.jobdir import lock as job_lock

    me = job_lock.owner_identity(airflow_run_id)
    try:
        job_lock.check(storage.join(work_dir, job_id), me)
    except job_lock.JobLockedError as exc:
        return str(exc)
    except OSError:
        return None  # an unreadable work dir is the run's own error to report
    return None


def summary_status(path: str) -> str | None:
    from airflow_provider_dj.core import fs as storage

    try:
        return json.loads(storage.read_bytes(path)).get("status")
    except (OSError, ValueError):
        return None


def wants_ray(recipe) -> bool:
    """Whether to start the in-process Ray at launch: not for a configured cluster, an empty
    local input file, or a resumed job that already completed (those never need it)."""
    if os.environ.get("RAY_ADDRESS") or os.environ.get("AIRFLOW_CONN_RAY_DEFAULT"):
        return False
    if not settings.get("ray_early_start"):
        return False
    if recipe.resume:
        return summary_status(os.path.join(recipe.work_dir, recipe.resume, JOB_SUMMARY)) != "completed"
    path = recipe.dataset_path
    return not (os.path.isfile(path) and os.path.getsize(path) == 0)


def committed_segments(job_dir: str) -> tuple[int, int, int, int] | None:
    """(segment index, partitions committed, partitions, segments) of the job's first segment that not every
    partition committed (its output and the keys the next global step needs); None when every segment
    is committed, or the job is not planned.  Read from commit markers, as the DAG's barrier reads them."""
    from airflow_provider_dj.core import fs as storage
    from airflow_provider_dj.engine.storage.checkpoints import CheckpointStore
    from airflow_provider_dj.engine.storage.context import JobContext
    from airflow_provider_dj.engine.storage.global_op_state import keys_store

    if not storage.exists(storage.join(job_dir, *PARTITIONING_INFO.split("/"))):
        return None
    ctx = JobContext(job_dir)
    plan, parts = ctx.plan, ctx.partitioning_info["partitions"]
    store, keys = CheckpointStore(job_dir, ctx.storage_format), keys_store(job_dir)

    def committed(st, i: int, part: dict) -> bool:
        op = plan.ops[i]
        return st.is_committed(i, op.name, part["partition_id"], part["content_hash"], op.fingerprint)

    for seg in plan.segments:
        done = sum(
            1
            for p in parts
            if (seg.end - 1 < 0 or committed(store, seg.end - 1, p))
            and (seg.keys_for_global is None or committed(keys, seg.keys_for_global, p))
        )
        if done < len(parts):
            return seg.index, done, len(parts), len(plan.segments)
    return None


def stopped_line(job_dir: str, recipe_file: str | None, job_id: str) -> str:
    """The one line a stopped run ends with: what was kept, where, and the command that resumes it."""
    from airflow_provider_dj.core import fs as storage
    from airflow_provider_dj.engine.jobdir.identity import resume_command

    if not storage.exists(storage.join(job_dir, *PARTITIONING_INFO.split("/"))):
        return (
            f"Stopped before job {job_id} was planned: nothing to keep. "
            f"Start it again with: dj-airflow run {recipe_file or '<recipe>'}"
        )
    try:
        where = committed_segments(job_dir)
    except (OSError, ValueError, KeyError) as exc:  # a job dir half-written by a kill: say what is known
        where, what = None, f"committed checkpoints (could not count them: {exc})"
    else:
        what = "every segment committed (the rest runs on resume)"
    if where is not None:
        k, done, total, _ = where
        what = f"{done} of {total} partitions of segment {k} committed"
        if k > 0:
            what += " (segment 0 complete)" if k == 1 else f" (segments 0-{k - 1} complete)"
    return f"Stopped: {what}, kept in {job_dir}. Resume with: {resume_command(recipe_file, job_id)}"


def report_dag_run(out, args, recipe, job_id: str, note: str, *, state: str, run_id: str, wall: float) -> int:
    """How a ``--airflow`` run's DAG run ended, on ``out`` (cli/run_output.py); the exit status: 0
    completed, 3 stopped on request (130/143 when Ctrl-C or SIGTERM asked), 2 refused (another run won
    the job's lock), 1 failed."""
    from airflow_provider_dj.core import fs as storage
    from airflow_provider_dj.engine.jobdir.identity import resume_command

    job_dir = out.job_dir
    if note:  # the task rendered work_dir: it registered where the job is
        from airflow_provider_dj.engine.jobdir.registry import lookup_job

        job_dir = lookup_job(job_id) or job_dir
        out.job_dir = job_dir
    summary_path = storage.join(job_dir, JOB_SUMMARY)
    if state.endswith("success") and storage.exists(summary_path):
        return out.completed(json.loads(storage.read_bytes(summary_path)), run_id, wall, label="DAG run")
    if summary_status(summary_path) == "stopped":  # a requested stop, not a crash (docs/stop_and_kill.md)
        return out.stopped(
            wall,
            legacy_lines=[
                f"\nDAG run {run_id}: job {job_id} STOPPED on request after {wall:.1f}s; committed "
                f"work is kept in {job_dir}",
                f"Resume with: {resume_command(args.recipe, job_id)}",
            ],
        )
    refused = held_by_another_runner(recipe.work_dir, job_id, run_id)
    if refused:  # two runs of one job started at the same moment: the other one won the lock
        return out.failed([f"\nDAG run {run_id}: refused after {wall:.1f}s: {refused}"], code=2)
    return out.failed(
        [
            f"\nDAG run {run_id}: {state} after {wall:.1f}s; job {job_id} in {job_dir}",
            f"Resume with: {resume_command(args.recipe, job_id)}",
        ]
    )
