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

A job directory already planned (a resume, a cleared task after planning) plans nothing: the resume
proves it from the job directory, and the part of that proof that reads the input (the files and rows as
recorded, every partition's content hash: ``engine/job/resume.prove_input``) runs where planning would:
on this worker's threads, as Ray tasks on a cluster, or as a Ray Job (the same driver, one submission per
try of the task, since the input may have changed between tries).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from airflow_provider_dj.core import fs as storage
from airflow_provider_dj.engine.input.task_map import ray_task_runner, run_in_process
from airflow_provider_dj.engine.job.input_plan import InputPlanner, plan_input
from airflow_provider_dj.engine.job.resume import InputProof, ResumeRefusedError, prove_input
from airflow_provider_dj.engine.jobdir.layout import PARTITIONING_INFO, JobPaths
from airflow_provider_dj.hooks.ray import RayHook
from airflow_provider_dj.operators.base import AirflowFailException, try_number

if TYPE_CHECKING:
    from airflow.sdk import Context


class InputRefused(AirflowFailException):
    """The input does not fit the recipe; the task fails at once, without retries."""


class InputPlanningMixin:
    """The validate task's choice of ``InputPlanner`` and ``InputProof`` (module docstring).  The operator
    has ``ray_conn_id``, ``deferrable``, ``poll_interval`` and ``log``."""

    def _where_input_is_read(
        self, recipe: Any, job_id: str, context: Context
    ) -> tuple[InputPlanner, InputProof | None]:
        """The planner of a new job and the input proof of a resumed one; in Ray Jobs mode one of them
        runs here as a Ray Job (deferring the task, or waiting for it)."""
        paths = JobPaths(recipe.work_dir, job_id)
        planned = storage.exists(paths.path(PARTITIONING_INFO))
        mode = RayHook(ray_conn_id=self.ray_conn_id).resolve()["mode"]
        if mode == "cluster":
            return (
                lambda r, say: plan_input(r, say, self._planning_tasks),
                lambda info, dataset, job_dir: prove_input(info, dataset, self._planning_tasks, job_dir=job_dir),
            )
        if mode != "jobs" or (recipe.resume and not planned):
            return plan_input, None  # a resume of a missing job directory is refused by prepare_job
        recipe_dict = recipe.to_dict()
        proof_try = try_number(context) if planned else None
        client, sid, status = self._input_ray_job(recipe_dict, job_id, paths.job_dir, proof_try)
        return self._from_input_ray_job(client, sid, status, recipe_dict, job_id)

    def _from_input_ray_job(
        self, client: Any, sid: str, status: str, recipe_dict: dict, job_id: str
    ) -> tuple[InputPlanner, InputProof | None]:
        if "-proof-" in sid:
            return plan_input, self._proved_by(client, sid, status, recipe_dict, job_id)
        return self._planned_by(client, sid, status, recipe_dict, job_id), None

    def _planning_tasks(self, fn: Any, args_list: list[tuple]) -> list[Any]:
        if len(args_list) <= 1:
            return run_in_process(fn, args_list)
        RayHook(ray_conn_id=self.ray_conn_id).get_client()
        self.log.info("planning: %d tasks on the Ray cluster", len(args_list))
        return ray_task_runner(fn, args_list)

    def _input_ray_job(self, recipe_dict: dict, job_id: str, job_dir: str, proof_try: int | None) -> tuple:
        """Submit (or find) the planning's, or with ``proof_try`` the input proof's, Ray Job; defer, or
        wait here; return (client, submission id, Ray's final status)."""
        from airflow_provider_dj.hooks.ray_jobs import ACTIVE, plan_spec

        client = RayHook(ray_conn_id=self.ray_conn_id).get_jobs_client()  # a dead dashboard: refused here
        sub = client.submit_or_attach_plan(
            lambda sid, attempt: plan_spec(
                recipe=recipe_dict,
                job_id=job_id,
                submission_id=sid,
                attempt=attempt,
                namespace=client.namespace,
                verify_job_dir=job_dir if proof_try is not None else "",
            ),
            job_dir=job_dir,
            job_id=job_id,
            recipe=recipe_dict,
            proof_try=proof_try,
        )
        what = "input proof" if proof_try is not None else "planning"
        self.log.info("%s", f"{what}: Ray job {sub.submission_id} {sub.action} at {client.address} ({sub.status})")
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
        return client, sub.submission_id, status

    def _planned_by(self, client: Any, sid: str, status: str, recipe_dict: dict, job_id: str) -> InputPlanner:
        """The plan Ray job ``sid`` wrote, as an ``InputPlanner``; its refusal as this task's failure
        without retries; any other end as a failure a retry submits again."""
        doc = self._result_of(client, sid, status, recipe_dict, job_id, proof=False)
        if "refused" in doc:
            raise InputRefused(f"{doc['error_type']}: {doc['refused']}")
        info, took = doc["partitioning_info"], doc.get("planned_s")

        def planned(recipe: Any, say: Any) -> dict:
            say(f"input planned on the cluster by Ray job {sid} in {took}s")
            return info

        return planned

    def _proved_by(self, client: Any, sid: str, status: str, recipe_dict: dict, job_id: str) -> InputProof:
        """The input proof Ray job ``sid`` made, as an ``InputProof`` (its refusal raised as the resume's)."""
        doc = self._result_of(client, sid, status, recipe_dict, job_id, proof=True)

        def proved(info: dict, dataset_path: str, job_dir: str) -> int:
            if "refused" in doc:
                raise ResumeRefusedError(doc["reason"], doc["refused"])
            self.log.info("input proven unchanged on the cluster by Ray job %s in %ss", sid, doc.get("proved_s"))
            return int(doc["hashed_bytes"])

        return proved

    @staticmethod
    def _result_of(client: Any, sid: str, status: str, recipe_dict: dict, job_id: str, *, proof: bool) -> dict:
        from airflow_provider_dj.engine.runner.plan_job import read_planned
        from airflow_provider_dj.hooks.ray_jobs import RayJobFailedError

        doc = read_planned(recipe_dict["work_dir"], job_id, sid, recipe_dict, proof=proof)
        if doc is not None:
            return doc
        refusal = client.refusal(sid)
        if refusal:
            raise AirflowFailException(refusal)
        raise RayJobFailedError(
            f"Ray job {sid} at {client.address} ended {status} without its result\n"
            f"--- its log, last lines ---\n{client.logs_tail(sid)}"
        )
