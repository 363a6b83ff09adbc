"""What ``dj-airflow run`` prints about a finished job, and the job-dir facts it reads to say it.

Shared by both ways the command runs a job (the engine's local executor and ``--airflow``'s
``dag.test()``): the same summary lines and refusal messages whichever ran it.
"""

from __future__ import annotations

import json
import os

from airflow_provider_dj import settings
from airflow_provider_dj.engine.jobdir.layout import JOB_SUMMARY


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
