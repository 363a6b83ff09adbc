"""``dj-airflow run`` on the engine's local executor: the DAG's steps in this process, no Airflow.

The default way the command runs a job.  The steps are the functions the generated DAG's tasks call,
in the DAG's order (``engine.runner.run_job``), so the job directory, checkpoints, events, lineage,
history and export are a DAG run's, byte for byte, and a job started here resumes under the
scheduler and the other way round.  What is left out is Airflow's own bookkeeping (a metadata DB,
task instances, the execution API), which a CLI run would keep in a throwaway DB anyway; it costs
seconds of start-up per run (docs/benchmarks.md).  ``--airflow`` runs the generated DAG through
``dag.test()`` instead (cli/main.py).

Exit status as for ``--airflow``: 0 exported, 3 stopped on request, 2 refused before any work,
1 failed (the printed command resumes it).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time

from airflow_provider_dj.cli.run_report import print_completed
from airflow_provider_dj.core import fs as storage
from airflow_provider_dj.engine.jobdir.identity import resume_command

log = logging.getLogger("dj.run")


def run_on_engine(
    args: argparse.Namespace, recipe_path: str, recipe, overrides: dict, logical_date, job_id: str
) -> int:
    """Run the checked recipe to its export with ``run_job``; print what the DAG path prints."""
    from airflow_provider_dj.engine.runner.local import refusal_errors, run_job
    from airflow_provider_dj.engine.runner.stop import JobStopped

    _log_to_stdout()
    num_cpus = args.num_cpus or os.cpu_count() or 1
    job_dir = storage.join(recipe.work_dir, job_id)  # s3:// work dirs too
    print(
        f"Resume token: {job_id}. Re-trigger with resume={job_id} "
        f"(or {resume_command(args.recipe, job_id)}) to resume this job.",
        flush=True,
    )
    t0 = time.perf_counter()
    try:
        result = run_job(
            recipe_path,
            overrides=overrides,
            workers=num_cpus,
            executor=args.executor,
            renderer=_renderer(recipe, overrides, logical_date),
            ray_client=_private_ray(num_cpus, recipe) if args.executor == "ray" else None,
            say=log.info,
        )
    except JobStopped:
        wall = time.perf_counter() - t0
        print(
            f"\nJob {job_id} STOPPED on request after {wall:.1f}s; committed work is kept in {job_dir}", file=sys.stderr
        )
        print(f"Resume with: {resume_command(args.recipe, job_id)}", file=sys.stderr)
        return 3
    except refusal_errors() as exc:
        reason = getattr(exc, "reason", None)
        print(f"error: refused before any work{f' ({reason})' if reason else ''}: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # noqa: BLE001 - reported with the resume command; the exit status says failed
        wall = time.perf_counter() - t0
        print(f"\nJob {job_id} failed after {wall:.1f}s in {job_dir}: {type(exc).__name__}: {exc}", file=sys.stderr)
        print(f"Resume with: {resume_command(args.recipe, job_id)}", file=sys.stderr)
        return 1
    print_completed(result.summary, result.job_id, result.job_dir, result.run_id, time.perf_counter() - t0, label="Run")
    return 0


def _renderer(recipe, overrides: dict, logical_date):
    """The renderer of templated values: the preview's, which the CLI already checked renders them all
    (a template that needs the task's context goes through ``--airflow``, cli/main.py)."""
    if not recipe.templates:
        return None
    from airflow_provider_dj.cli.template_preview import preview_renderer

    return preview_renderer(logical_date, recipe.schedule, overrides)


def _private_ray(num_cpus: int, recipe):
    """The Ray client for this run: the cluster at ``RAY_ADDRESS`` when set (run_job's default), else
    this process's private Ray, started now in the background while the job is planned (so planning
    and Ray's start overlap) when there is work for it, else at the first dispatch."""
    if os.environ.get("RAY_ADDRESS"):
        return None
    from airflow_provider_dj.cli.run_report import wants_ray
    from airflow_provider_dj.hooks import ray_in_process

    if wants_ray(recipe):
        ray_in_process.start_in_background(num_cpus)

    def connect():
        ray_in_process.ensure_started(num_cpus, {})
        import ray

        return ray

    return connect


def _log_to_stdout() -> None:
    """The engine's progress lines on stdout, as the DAG path's task logs are."""
    root = logging.getLogger()
    if not root.handlers:
        logging.basicConfig(
            level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stdout
        )
