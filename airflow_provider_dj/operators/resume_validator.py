"""ResumeValidatorOperator (task ``validate``): start or re-attach to the run's job.

It turns the recipe plus ``dag_run.conf`` overrides into the effective
recipe (validated before any work), decides the job id, and either plans a
new job or verifies an existing one before anything downstream trusts its
checkpoints.  Its return value — the execution groups — is what the
partition tasks are mapped over.

Job id: ``job_id``/``resume`` from conf if given; otherwise derived from
the DAG id and run id, so clearing the whole DAG run (or this task) finds
the same job directory and resumes instead of starting over.
"""

from __future__ import annotations

from typing import Any, Sequence

from airflow.sdk import BaseOperator

from airflow_provider_dj.engine.events import EventLog
from airflow_provider_dj.engine.job import job_id_for_run, validate_job_id
from airflow_provider_dj.engine.job_setup import ResumeRefusedError, prepare_job
from airflow_provider_dj.engine.overrides import normalize_overrides
from airflow_provider_dj.engine.recipe import load_recipe
from airflow_provider_dj.operators._common import event_defaults


class ResumeValidatorOperator(BaseOperator):
    template_fields: Sequence[str] = ("recipe_path",)
    ui_color = "#fdf2d0"

    def __init__(self, *, recipe_path: str, group_size: int = 1, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.recipe_path = recipe_path
        self.group_size = group_size

    def _job_id(self, recipe, context: Any) -> str:
        if recipe.job_id or recipe.resume:
            return validate_job_id(recipe.job_id or recipe.resume, "job_id" if recipe.job_id else "resume")
        dag_run = context["dag_run"]
        when = getattr(dag_run, "logical_date", None) or getattr(dag_run, "run_after", None)
        return job_id_for_run(dag_run.dag_id, dag_run.run_id, when)

    def execute(self, context: Any) -> list[dict]:
        conf = dict(getattr(context.get("dag_run"), "conf", None) or {})
        overrides = normalize_overrides(conf)
        recipe = load_recipe(self.recipe_path, overrides)
        if recipe.ignored_keys:
            self.log.warning("Recipe keys accepted for Data-Juicer compatibility but not used: %s",
                             ", ".join(recipe.ignored_keys))
        job_id = self._job_id(recipe, context)
        self.log.info("Resume token: %s. Re-trigger with resume=%s (or dj-airflow run %s --resume %s) to resume this job.",
                      job_id, job_id, self.recipe_path, job_id)
        defaults = event_defaults(context)
        try:
            prepared = prepare_job(recipe, job_id=job_id, group_size=self.group_size, event_defaults=defaults,
                                   airflow_run_id=context["dag_run"].run_id,
                                   log_step=lambda msg: self.log.info("%s", msg))
        except ResumeRefusedError as exc:
            self.log.error("Resume refused (%s); the job directory was not modified:\n%s", exc.reason, exc)
            raise
        ti = context["ti"]
        ti.xcom_push(key="job_dir", value=prepared.job_dir)
        ti.xcom_push(key="job_id", value=job_id)
        ti.xcom_push(key="job_complete", value=prepared.job_complete)
        if prepared.job_complete:
            self.log.info("Job %s already completed: nothing to do; the export will be re-verified.", job_id)
            return []
        EventLog(prepared.job_dir, job_id, defaults=defaults).emit(
            "job_start", status="resumed" if prepared.resumed else "new", partitions=prepared.num_partitions,
            input_rows=prepared.total_rows)
        self.log.info("Job %s in %s: %s, %d partitions, %d rows, %d execution groups", job_id, prepared.job_dir,
                      "resuming" if prepared.resumed else "new job", prepared.num_partitions, prepared.total_rows,
                      len(prepared.groups))
        if prepared.resumed:
            final = sum(1 for g in prepared.groups for c in g["completed"].values() if c["final"])
            self.log.info("%d/%d partitions already final; the rest resume from their last checkpoint", final,
                          prepared.num_partitions)
        return prepared.groups
