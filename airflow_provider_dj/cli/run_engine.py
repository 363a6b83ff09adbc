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

from airflow_provider_dj.core import fs as storage
from airflow_provider_dj.engine.jobdir.identity import resume_command

log = logging.getLogger("dj.run")


def run_on_engine(
    args: argparse.Namespace, recipe_path: str, recipe, overrides: dict, logical_date, job_id: str
) -> int:
    """Run the checked recipe to its export with ``run_job``; print what the DAG path prints.

    Output, the progress display, Ctrl-C and SIGTERM: cli/run_output.py."""
    from airflow_provider_dj.cli.run_output import RunOutput

    job_dir = storage.join(recipe.work_dir, job_id)  # s3:// work dirs too
    with RunOutput(args, job_dir=job_dir, job_id=job_id, title=f"{args.recipe}: job {job_id}") as out:
        _log_to_stdout()  # the log file on a terminal (fd 1 points at it), else stdout
        out.header(resume_command(args.recipe, job_id))
        out.start_display()
        return _run(args, recipe_path, recipe, overrides, logical_date, job_id, job_dir, out)


def _run(args, recipe_path: str, recipe, overrides: dict, logical_date, job_id: str, job_dir: str, out) -> int:
    from airflow_provider_dj.core.errors import RefusedError
    from airflow_provider_dj.engine.job.review import ReviewRejectedError
    from airflow_provider_dj.engine.runner.local import run_job
    from airflow_provider_dj.engine.runner.stop import JobStopped

    num_cpus = args.num_cpus or os.cpu_count() or 1
    t0 = time.perf_counter()
    try:
        result = run_job(
            recipe_path,
            overrides=overrides,
            workers=num_cpus,
            executor=args.executor,
            renderer=_renderer(recipe, overrides, logical_date),
            ray_client=_private_ray(num_cpus, recipe, out, args.executor) if args.executor != "local" else None,
            say=log.info,
            review=_review_prompt(args, out),
        )
    except JobStopped:
        wall = time.perf_counter() - t0
        return out.stopped(
            wall,
            legacy_lines=[
                f"\nJob {job_id} STOPPED on request after {wall:.1f}s; committed work is kept in {job_dir}",
                f"Resume with: {resume_command(args.recipe, job_id)}",
            ],
        )
    except ReviewRejectedError as exc:
        note = " (--no-input: nobody to ask)" if getattr(args, "no_input", False) else ""
        return out.failed([f"\nJob {job_id} stopped by its review gate{note}: {exc}"])
    except RefusedError as exc:
        reason = getattr(exc, "reason", None)
        return out.failed([f"error: refused before any work{f' ({reason})' if reason else ''}: {exc}"], code=2)
    except Exception as exc:  # noqa: BLE001 - reported with the resume command; the exit status says failed
        wall = time.perf_counter() - t0
        return out.failed(
            [
                f"\nJob {job_id} failed after {wall:.1f}s in {job_dir}: {type(exc).__name__}: {exc}",
                f"Resume with: {resume_command(args.recipe, job_id)}",
            ]
        )
    return out.completed(result.summary, result.run_id, time.perf_counter() - t0, label="Run")


def _review_prompt(args: argparse.Namespace, out):
    """The review gate's question (docs/review_gate.md): on the terminal, with the progress display
    stopped; None under ``--no-input`` (a crossed bound then fails the run, checkpoints kept)."""
    if getattr(args, "no_input", False):
        return None
    from airflow_provider_dj.engine.job.review import ask_on_terminal

    def ask(review) -> bool:
        out.stop_display()
        return ask_on_terminal(review)

    return ask


def _renderer(recipe, overrides: dict, logical_date):
    """The renderer of templated values: the preview's, which the CLI already checked renders them all
    (a template that needs the task's context goes through ``--airflow``, cli/main.py)."""
    if not recipe.templates:
        return None
    from airflow_provider_dj.cli.template_preview import preview_renderer

    return preview_renderer(logical_date, recipe.schedule, overrides)


def _private_ray(num_cpus: int, recipe, out, executor: str = "ray"):
    """The Ray client for this run: the cluster at ``RAY_ADDRESS`` when set (run_job's default), else
    this process's private Ray, started now in the background while the job is planned (so planning
    and Ray's start overlap) when there is work for it and Ray is sure to be used (``--executor ray``, a
    recipe that needs Ray, or a new job's input far past ``local_work_max_rows``), else at the first
    dispatch, if ``auto`` chooses Ray at all."""
    if os.environ.get("RAY_ADDRESS"):

        def connect_cluster():
            from airflow_provider_dj.engine.runner.local import local_ray

            ray = local_ray(num_cpus)
            out.reinstall_signals()  # ray.init in this thread replaced SIGTERM's handler
            return ray

        return connect_cluster
    from airflow_provider_dj.cli.run_report import wants_ray
    from airflow_provider_dj.engine.runner import executor_choice
    from airflow_provider_dj.hooks import ray_in_process

    sure = executor == "ray" or executor_choice.ray_needed_before_planning(recipe)
    if wants_ray(recipe) and (sure or executor_choice.ray_sure_before_planning(recipe)):
        ray_in_process.start_in_background(num_cpus)

    def connect():
        ray_in_process.ensure_started(num_cpus, {})
        out.reinstall_signals()  # a ray.init in this thread replaced SIGTERM's handler (cli/interrupts.py)
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
