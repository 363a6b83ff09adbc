"""Where the validate task plans a new job's input: this worker's threads, Ray tasks, or a Ray Job.

``ResumeValidatorOperator`` hands ``start_job`` an ``InputPlanner`` (engine/job/input_plan.py) chosen
from its ``ray`` connection:

* embedded Ray, or none: the planning tasks (a chunk of a file to index, a partition to hash) on this
  worker's threads;
* a Ray cluster (a GCS address): the same tasks as Ray tasks on it, connecting only when there is more
  than one;
* Ray Jobs mode (a dashboard): the whole planning as a Ray Job on the cluster
  (engine/runner/plan_job.py, its tasks on the cluster), submitted under a deterministic id per job and
  effective recipe; the task defers (or waits in the worker, ``deferrable=False``), and a retry or a
  cleared task attaches to the running submission or trusts the plan a succeeded one wrote.  The worker
  then writes the job directory from that plan, reading none of the input's bytes.

A job directory already planned (a resume, a cleared task after planning) plans nothing: its plan is
proven from the job directory as always.
"""

from __future__ import annotations

import time
from typing import Any

from airflow_provider_dj.core import fs as storage
from airflow_provider_dj.engine.input.task_map import ray_task_runner, run_in_process
from airflow_provider_dj.engine.job.input_plan import InputPlanner, plan_input
from airflow_provider_dj.engine.jobdir.layout import PARTITIONING_INFO, JobPaths
from airflow_provider_dj.hooks.ray import RayHook
from airflow_provider_dj.operators.base import AirflowFailException


class InputRefused(AirflowFailException):
    """The input does not fit the recipe; the task fails at once, without retries."""


class InputPlanningMixin:
    """The validate task's choice of ``InputPlanner`` (module docstring).  The operator has
    ``ray_conn_id``, ``deferrable``, ``poll_interval`` and ``log``."""

    def _input_planner(self, recipe: Any, job_id: str) -> InputPlanner:
        paths = JobPaths(recipe.work_dir, job_id)
        if recipe.resume or storage.exists(paths.path(PARTITIONING_INFO)):
            return plan_input  # nothing to plan: prepare_job proves the planned job instead
        mode = RayHook(ray_conn_id=self.ray_conn_id).resolve()["mode"]
        if mode == "jobs":
            return self._plan_as_ray_job(recipe, job_id, paths.job_dir)
        if mode == "cluster":
            return lambda r, say: plan_input(r, say, self._planning_tasks)
        return plan_input

    def _planning_tasks(self, fn: Any, args_list: list[tuple]) -> list[Any]:
        if len(args_list) <= 1:
            return run_in_process(fn, args_list)
        RayHook(ray_conn_id=self.ray_conn_id).get_client()
        self.log.info("planning: %d tasks on the Ray cluster", len(args_list))
        return ray_task_runner(fn, args_list)

    def _plan_as_ray_job(self, recipe: Any, job_id: str, job_dir: str) -> InputPlanner:
        """Submit (or find) the planning's Ray Job; defer, or wait here; then the plan it wrote."""
        from airflow_provider_dj.hooks.ray_jobs import ACTIVE, plan_spec

        client = RayHook(ray_conn_id=self.ray_conn_id).get_jobs_client()  # a dead dashboard: refused here
        recipe_dict = recipe.to_dict()
        sub = client.submit_or_attach_plan(
            lambda sid, attempt: plan_spec(
                recipe=recipe_dict, job_id=job_id, submission_id=sid, attempt=attempt, namespace=client.namespace
            ),
            job_dir=job_dir,
            job_id=job_id,
            recipe=recipe_dict,
        )
        self.log.info(
            "%s", f"planning: Ray job {sub.submission_id} {sub.action} at {client.address} (status {sub.status})"
        )
        status = sub.status
        if sub.action != "succeeded":
            if self.deferrable:
                from airflow_provider_dj.triggers.ray_job import RayJobTrigger

                self.defer(
                    trigger=RayJobTrigger(
                        dashboard_address=client.address,
                        submission_id=sub.submission_id,
                        job_dir=job_dir,
                        poll_interval=float(self.poll_interval),
                        step="plan",
                    ),
                    method_name="execute_complete",
                )
            while (status := client.status(sub.submission_id) or "UNKNOWN") in ACTIVE:
                time.sleep(float(self.poll_interval))
        return self._planned_by(client, sub.submission_id, status, recipe_dict, job_id)

    def _planned_by(self, client: Any, sid: str, status: str, recipe_dict: dict, job_id: str) -> InputPlanner:
        """The plan Ray job ``sid`` wrote, as an ``InputPlanner``; its refusal as this task's failure
        without retries; any other end as a failure a retry submits again."""
        from airflow_provider_dj.engine.runner.plan_job import read_planned
        from airflow_provider_dj.hooks.ray_jobs import RayJobFailedError

        doc = read_planned(recipe_dict["work_dir"], job_id, sid, recipe_dict)
        if doc is not None and "refused" in doc:
            raise InputRefused(f"{doc['error_type']}: {doc['refused']}")
        if doc is not None and "partitioning_info" in doc:
            info, took = doc["partitioning_info"], doc.get("planned_s")

            def planned(recipe: Any, say: Any) -> dict:
                say(f"input planned on the cluster by Ray job {sid} in {took}s")
                return info

            return planned
        refusal = client.refusal(sid)
        if refusal:
            raise AirflowFailException(refusal)
        raise RayJobFailedError(
            f"planning: Ray job {sid} at {client.address} ended {status} without a plan\n"
            f"--- its log, last lines ---\n{client.logs_tail(sid)}"
        )
