"""The driver of one Ray Job: a new job's input planned, or a resumed job's input proven, on the cluster.

``python -m airflow_provider_dj.engine.runner.plan_job --spec '<json>'`` is the entrypoint a submitter
(hooks/ray_jobs.py, for the validate task in Ray Jobs mode) gives Ray's Job Submission API.  It makes
the call the validate task makes in its own process, ``plan_input``: the input checked against the
recipe, every file indexed and every partition hashed, here as Ray tasks of this driver on the cluster
(connected with ``address="auto"``), so the Airflow worker reads none of the input's bytes and planning
time falls with the cluster's cores.  The result is written, atomically, to
``layout.planned_input_file(work_dir, job_id)`` with the submission id and a digest of the recipe it
planned; the validate task reads it back, checks both, and writes the job directory from it as it would
from its own plan (the job directory does not exist before: its lock and its files stay the validate
task's).

With ``verify_job_dir`` set, the same driver runs a resume's input proof instead (steps 4 and 5 of
``engine/job/resume.validate_resume``: the files and rows as recorded, every partition's content hash as
recorded) against that job directory's saved partitioning, its tasks on the cluster, and writes
``{"hashed_bytes": n}`` or the refusal (``{"refused": message, "reason": ...}``) to
``layout.input_proof_file``; the validate task goes on with the rest of the resume's proof.

Settings that decide what planning accepts (``PLAN_SETTINGS``: the deployment's allowed roots, the
partition memory limit, the index cache) travel in the spec as the submitter has them set, so the plan is
checked as the Airflow task would check it, whatever the cluster's environment says.

Exit status: 0 planned; 2 refused (a provider version other than the submitter's, or input the recipe
cannot run: the file records the refusal, the message names the file, row or setting); 1 failed.

No Airflow import anywhere below this module: the cluster's image needs this package, not Airflow.
"""

from __future__ import annotations

import hashlib
import json
import logging
import sys
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, ClassVar

from airflow_provider_dj import settings
from airflow_provider_dj.core import fs as storage
from airflow_provider_dj.engine.jobdir.layout import input_proof_file, planned_input_file, read_json, write_json
from airflow_provider_dj.engine.runner.group_job import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_REFUSED,
    REFUSED_PREFIX,
    DriverSpec,
    GroupJobRefusedError,
    apply_submitter_settings,
    check_version,
    driver_main,
)

if TYPE_CHECKING:
    from airflow_provider_dj.engine.config.schema import Recipe

log = logging.getLogger("dj.plan_job")

MODULE = "airflow_provider_dj.engine.runner.plan_job"
#: The ``[dj]`` settings planning is checked with: the submitter's values, where set, are this driver's.
PLAN_SETTINGS = ("allowed_roots", "partition_memory_limit_gb", "input_index_cache", "planning_chunk_mb")


@dataclass(frozen=True)
class PlanJobSpec(DriverSpec):
    """Everything the planning driver needs, passed by the submitter as one JSON argument."""

    DRIVER_MODULE: ClassVar[str] = MODULE

    recipe: dict[str, Any]  # the effective recipe, Recipe.to_dict()
    job_id: str
    submission_id: str
    attempt: int
    provider_version: str
    submitter_host: str = ""
    namespace: str | None = None
    #: :data:`PLAN_SETTINGS` as the submitter has them set (raw strings; unset ones are absent).
    settings: dict[str, Any] = field(default_factory=dict)
    #: Set for a resume's input proof: the job directory whose saved partitioning the input must match.
    verify_job_dir: str = ""
    dashboard_address: str = ""
    submitted_at: float | None = None

    @property
    def metadata(self) -> dict[str, Any]:
        """What the submission carries in Ray's job list."""
        return {"dj_job_id": self.job_id, "dj_step": "verify_input" if self.verify_job_dir else "plan"}


def recipe_digest(recipe_dict: dict[str, Any]) -> str:
    """What ties a plan to the recipe it was made for: a digest of the effective recipe's JSON."""
    return hashlib.sha256(json.dumps(recipe_dict, sort_keys=True, default=str).encode()).hexdigest()[:32]


def plan_settings() -> dict[str, Any]:
    """This process's :data:`PLAN_SETTINGS` that are set (raw strings): what a submitter puts in the spec."""
    return {k: v for k in PLAN_SETTINGS if (v := settings.raw(k)) is not None}


def read_planned(
    work_dir: str, job_id: str, submission_id: str, recipe_dict: dict[str, Any], *, proof: bool = False
) -> dict[str, Any] | None:
    """The plan a Ray Job wrote for this submission and this recipe: ``{"partitioning_info": ...}`` or
    ``{"refused": message, "error_type": name}`` (``proof``: the input proof, ``{"hashed_bytes": n}`` or
    ``{"refused": message, "reason": ...}``); None when there is none (or another submission's, or one
    made for another recipe: never trusted)."""
    path = (input_proof_file if proof else planned_input_file)(work_dir, job_id)
    if not storage.exists(path):
        return None
    doc: dict[str, Any] = read_json(path)
    if doc.get("submission_id") != submission_id or doc.get("recipe_digest") != recipe_digest(recipe_dict):
        return None
    return doc


def remove_planned(work_dir: str, job_id: str) -> None:
    """Remove the plan's and the proof's files once the job directory holds what they said."""
    for path in (planned_input_file(work_dir, job_id), input_proof_file(work_dir, job_id)):
        if storage.exists(path):
            storage.remove(path)


def run_plan_job(spec: PlanJobSpec) -> int:
    """Check the version, plan the input on this cluster, write the result; the exit status."""
    from airflow_provider_dj.engine.config.recipe import recipe_from_dict
    from airflow_provider_dj.engine.input.task_map import ray_task_runner
    from airflow_provider_dj.engine.job.input_plan import PLAN_REFUSALS, plan_input

    try:
        check_version(spec)
    except GroupJobRefusedError as exc:
        print(f"{REFUSED_PREFIX}{exc}", file=sys.stderr, flush=True)
        return EXIT_REFUSED
    apply_submitter_settings(spec.settings, PLAN_SETTINGS)
    recipe = recipe_from_dict(spec.recipe)
    out = planned_input_file(recipe.work_dir, spec.job_id)
    head = {"submission_id": spec.submission_id, "recipe_digest": recipe_digest(spec.recipe), "job_id": spec.job_id}

    def run_tasks(fn: Callable[..., Any], args_list: list[tuple[Any, ...]]) -> list[Any]:
        import ray

        if not ray.is_initialized():
            kwargs: dict[str, Any] = {"namespace": spec.namespace} if spec.namespace else {}
            ray.init(address="auto", ignore_reinit_error=True, log_to_driver=True, **kwargs)
        return ray_task_runner(fn, args_list)

    if spec.verify_job_dir:
        return _prove_input(spec, recipe, head, run_tasks)
    t0 = time.perf_counter()
    try:
        info = plan_input(recipe, log.info, run_tasks)
    except PLAN_REFUSALS as exc:
        write_json(out, {**head, "refused": str(exc), "error_type": type(exc).__name__})
        print(f"{REFUSED_PREFIX}{exc}", file=sys.stderr, flush=True)
        return EXIT_REFUSED
    except Exception:
        log.exception("planning failed")
        return EXIT_FAILED
    write_json(out, {**head, "planned_s": round(time.perf_counter() - t0, 3), "partitioning_info": info})
    log.info(
        "planned %d partitions over %d rows in %.2fs: %s",
        info["num_partitions"],
        info["total_rows"],
        time.perf_counter() - t0,
        out,
    )
    return EXIT_OK


def _prove_input(spec: PlanJobSpec, recipe: Recipe, head: dict[str, Any], run_tasks: Callable[..., list[Any]]) -> int:
    """A resume's steps 4 and 5 against ``spec.verify_job_dir``'s saved partitioning; the exit status."""
    from airflow_provider_dj.engine.job.resume import ResumeRefusedError, load_saved_partitioning, prove_input

    out = input_proof_file(recipe.work_dir, spec.job_id)
    t0 = time.perf_counter()
    try:
        info, _ = load_saved_partitioning(spec.verify_job_dir)
        nbytes = prove_input(info, recipe.dataset_path, run_tasks, job_dir=spec.verify_job_dir)
    except ResumeRefusedError as exc:
        write_json(out, {**head, "refused": str(exc), "reason": exc.reason})
        print(f"{REFUSED_PREFIX}{exc}", file=sys.stderr, flush=True)
        return EXIT_REFUSED
    except Exception:
        log.exception("proving the input failed")
        return EXIT_FAILED
    secs = round(time.perf_counter() - t0, 3)
    write_json(out, {**head, "hashed_bytes": nbytes, "proved_s": secs})
    log.info("input proven unchanged: %d partitions, %d bytes hashed in %.2fs", len(info["partitions"]), nbytes, secs)
    return EXIT_OK


def main(argv: list[str] | None = None) -> int:
    return driver_main(argv, module=MODULE, doc=__doc__, spec_cls=PlanJobSpec, run=run_plan_job)


if __name__ == "__main__":
    sys.exit(main())
