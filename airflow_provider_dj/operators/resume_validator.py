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

import time
from typing import Any, Sequence

from airflow.sdk import BaseOperator

from airflow_provider_dj.engine.config.overrides import normalize_overrides
from airflow_provider_dj.engine.config.recipe import RecipeError, load_recipe
from airflow_provider_dj.engine.history.index import HistoryIndexError
from airflow_provider_dj.engine.input.sources import InputError
from airflow_provider_dj.engine.job.setup import ResumeRefusedError, prepare_job
from airflow_provider_dj.engine.jobdir.events import EventLog
from airflow_provider_dj.engine.jobdir.identity import job_id_for_run, validate_job_id
from airflow_provider_dj.engine.jobdir.stop_control import clear_stop_request_before
from airflow_provider_dj.operators import local_run as local
from airflow_provider_dj.operators._common import event_defaults

try:
    from airflow.sdk.exceptions import AirflowFailException
except ImportError:  # pragma: no cover - older task SDKs
    from airflow.exceptions import AirflowFailException  # type: ignore[no-redef]


class InputRefused(AirflowFailException):
    """The input does not fit the recipe; the task fails at once, without retries."""


class RecipeRefused(AirflowFailException):
    """The effective recipe is invalid (a bad override, a template that does not render): a retry
    would render and validate the same text again, so the task fails at once."""


class ResumeValidatorOperator(BaseOperator):
    template_fields: Sequence[str] = ("recipe_path",)
    ui_color = "#fdf2d0"

    def __init__(
        self,
        *,
        recipe_path: str,
        group_size: int = 1,
        max_active_groups: int | None = None,
        local_run: dict | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.recipe_path = recipe_path
        # local_run: what `dj-airflow run` decided (operators/local_run.py); None under a scheduler.
        self.local_run = local_run
        # group_size: the size when partition.execution_group_size is auto but
        # there are no GPU probe figures (CPU-only pipelines).  A recipe integer
        # wins; auto with a probe report is resolved here (engine.planning.decisions).
        # max_active_groups: the mapped task's parse-time max_active_tis_per_dagrun,
        # so the run-time limit per group splits the run's total between groups.
        self.group_size = group_size
        self.max_active_groups = max_active_groups

    def _group_size_resolver(self, recipe, decided: dict):
        """What prepare_job calls once the partitioning is known: planning decisions -> group size."""
        from airflow_provider_dj.engine.gpu.profiles import load_report
        from airflow_provider_dj.engine.planning.decisions import decide_run

        def resolve(info: dict, job_dir: str) -> int:
            decisions = decide_run(
                recipe,
                info,
                load_report(job_dir),
                default_group_size=self.group_size,
                airflow_max_active=self.max_active_groups,
                sequential_tasks=self.local_run is not None,
                cpu_default=local.max_concurrent_partitions(self.local_run),
            )
            decided["decisions"] = decisions
            return decisions.group.size

        return resolve

    def _job_id(self, recipe, context: Any) -> str:
        if recipe.job_id or recipe.resume:
            return validate_job_id(recipe.job_id or recipe.resume, "job_id" if recipe.job_id else "resume")
        dag_run = context["dag_run"]
        when = getattr(dag_run, "logical_date", None) or getattr(dag_run, "run_after", None)
        return job_id_for_run(dag_run.dag_id, dag_run.run_id, when)

    def execute(self, context: Any) -> list[dict]:
        started_at = time.time()
        conf = dict(getattr(context.get("dag_run"), "conf", None) or {})
        from airflow_provider_dj.templating import task_renderer

        try:
            overrides = normalize_overrides(conf)
            # Templated values are rendered here, with this task's context (docs/nightly.md).
            recipe = load_recipe(self.recipe_path, overrides, renderer=task_renderer(self, context))
        except RecipeError as exc:
            self.log.error("Recipe refused before any work; nothing was planned or written:\n%s", exc)
            raise RecipeRefused(str(exc)) from exc
        for key, value in (recipe.templates.get("values") or {}).items():
            self.log.info("Templated %s: %r -> %r", key, value["template"], value["rendered"])
        if recipe.ignored_keys:
            self.log.warning(
                "Recipe keys accepted for Data-Juicer compatibility but not used: %s", ", ".join(recipe.ignored_keys)
            )
        from airflow_provider_dj.engine.execution.reuse import reuse_off_reason

        if reuse_off_reason(recipe):
            self.log.warning("intermediate_storage.reuse_across_jobs is ignored: %s", reuse_off_reason(recipe))
        job_id = self._job_id(recipe, context)
        self.log.info(
            "Resume token: %s. Re-trigger with resume=%s (or dj-airflow run %s --resume %s) to resume this job.",
            job_id,
            job_id,
            self.recipe_path,
            job_id,
        )
        defaults = event_defaults(context)
        try:
            decided: dict = {}
            prepared = prepare_job(
                recipe,
                job_id=job_id,
                group_size=self._group_size_resolver(recipe, decided),
                event_defaults=defaults,
                airflow_run_id=context["dag_run"].run_id,
                log_step=lambda msg: self.log.info("%s", msg),
                run_pid=local.owner_pid(self.local_run),
            )
        except ResumeRefusedError as exc:
            self.log.error("Resume refused (%s); the job directory was not modified:\n%s", exc.reason, exc)
            raise
        except HistoryIndexError as exc:
            # The history refuses this job (another op arguments' keys, an export file it already holds):
            # a retry would be refused the same way (engine/history/pin.py).
            self.log.error("dedup_history refused the job before any work; nothing was planned or written:\n%s", exc)
            raise RecipeRefused(str(exc)) from exc
        except InputError as exc:
            # The input does not fit the recipe (a field it reads in no row, bytes that are not UTF-8, a line
            # that is not a JSON object): retrying cannot help, so fail without retries (engine/input/schema.py).
            self.log.error("Input refused before any work; nothing was planned or written:\n%s", exc)
            raise InputRefused(str(exc)) from exc
        # Resuming a stopped job: a stop requested before this run started is
        # done with (it did stop the job); one requested since belongs to this
        # run and is kept.  After prepare_job, so a refused resume changes nothing.
        cleared = clear_stop_request_before(prepared.job_dir, started_at)
        if cleared is not None:
            self.log.info(
                "Job %s was stopped (request by %s at %s): stop request cleared, resuming from its "
                "committed checkpoints",
                job_id,
                cleared.get("requested_by"),
                cleared.get("requested_at"),
            )
            EventLog(prepared.job_dir, job_id, defaults=defaults).emit(
                "stop_cleared", status="resumed", note=f"stop of {cleared.get('requested_at')} cleared by validate"
            )
        ti = context["ti"]
        ti.xcom_push(key="job_dir", value=prepared.job_dir)
        ti.xcom_push(key="job_id", value=job_id)
        ti.xcom_push(key="job_complete", value=prepared.job_complete)
        if prepared.job_complete:
            self.log.info("Job %s already completed: nothing to do; the export will be re-verified.", job_id)
            return self._mapped_groups([], self.local_run)
        EventLog(prepared.job_dir, job_id, defaults=defaults).emit(
            "job_start",
            status="resumed" if prepared.resumed else "new",
            partitions=prepared.num_partitions,
            input_rows=prepared.total_rows,
        )
        self.log.info(
            "Job %s in %s: %s, %d partitions, %d rows, %d execution groups",
            job_id,
            prepared.job_dir,
            "resuming" if prepared.resumed else "new job",
            prepared.num_partitions,
            prepared.total_rows,
            len(prepared.groups),
        )
        decisions = decided.get("decisions")
        if decisions is not None:
            from airflow_provider_dj.engine.execution.actor_pool import stage_resources

            resources = stage_resources(prepared.job_dir, decisions.actor_plan)
            for g in prepared.groups:
                g["max_in_flight"] = decisions.max_in_flight
                if resources:  # sizes the actor pool of a group whose segment holds a stateful op
                    g["actor_resources"] = resources
            self.log.info(
                "Planning: %d partition(s) per execution group (%s); at most %d partition(s) in flight "
                "(%s), %d per group",
                decisions.group.size,
                decisions.group.reason,
                decisions.concurrency.value,
                decisions.concurrency.reason,
                decisions.max_in_flight,
            )
            if decisions.actor_plan is not None:
                self.log.info("Actor plan: %s", decisions.actor_plan.to_dict())
            EventLog(prepared.job_dir, job_id, defaults=defaults).emit("execution_planning", **decisions.to_dict())
        if prepared.resumed:
            final = sum(1 for g in prepared.groups for c in g["completed"].values() if c["final"])
            self.log.info(
                "%d/%d partitions already final; the rest resume from their last checkpoint",
                final,
                prepared.num_partitions,
            )
        return self._mapped_groups(prepared.groups, self.local_run)

    @staticmethod
    def _mapped_groups(groups: list[dict], local_run: dict | None) -> list[dict]:
        """What the partition tasks are mapped over.

        Under ``dj-airflow run`` (``dag.test()``) a mapped task that expands to
        nothing costs a one-second sleep in the runner's loop, twice per empty
        run (measured: docs/benchmarks.md).  There, no groups become one
        placeholder group with no partitions, which its task finishes at once.
        Under a scheduler an empty list stays empty: the mapped tasks show as
        skipped.
        """
        if groups or local_run is None:
            return groups
        return [{"group_id": 0, "partition_ids": [], "start_row": 0, "end_row": 0, "label": "no partitions to run"}]
