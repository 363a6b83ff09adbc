"""ResumeValidatorOperator (task ``validate``): start or re-attach to the run's job.

It turns the recipe plus ``dag_run.conf`` overrides into the effective
recipe (validated before any work, templates rendered with this task's
context), and hands it to the engine's first step
(``engine.runner.start.start_job``), which plans a new job or verifies an
existing one before anything downstream trusts its checkpoints.  Its return
value, the execution groups, is what the partition tasks are mapped over.

Job id: ``job_id``/``resume`` from conf if given; otherwise derived from
the DAG id and run id, so clearing the whole DAG run (or this task) finds
the same job directory and resumes instead of starting over.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Sequence

from airflow.configuration import conf

from airflow_provider_dj.engine.config.recipe import RecipeError
from airflow_provider_dj.engine.history.index import HistoryIndexError
from airflow_provider_dj.engine.input.partition_memory import PartitionTooLargeError
from airflow_provider_dj.engine.input.sources import InputError
from airflow_provider_dj.engine.job.setup import ResumeRefusedError
from airflow_provider_dj.engine.planning.execution_group import ExecutionGroup
from airflow_provider_dj.engine.planning.global_memory import GlobalStepTooLargeError
from airflow_provider_dj.engine.runner.start import RunIdentity, choose_job_id, load_effective_recipe, start_job
from airflow_provider_dj.hooks.ray import RayHook
from airflow_provider_dj.operators import local_run as local
from airflow_provider_dj.operators.base import AirflowFailException, DJBaseOperator, event_defaults
from airflow_provider_dj.operators.input_planning import InputPlanningMixin, InputRefused

if TYPE_CHECKING:
    from airflow.sdk import Context


class RecipeRefused(AirflowFailException):
    """The effective recipe is invalid (a bad override, a template that does not render): a retry
    would render and validate the same text again, so the task fails at once."""


def max_map_length() -> int:
    """Airflow's ``[core] max_map_length``: the API server refuses to map a downstream task over a
    longer list (the push of this task's groups fails), so the planner keeps every segment within it.
    Read from this worker's Airflow configuration, which must match the API server's."""
    from airflow.configuration import conf

    return conf.getint("core", "max_map_length", fallback=1024)


def run_identity(context: Context) -> RunIdentity:
    """The DAG run a job id is derived from when the recipe names none."""
    dag_run = context["dag_run"]
    when = getattr(dag_run, "logical_date", None) or getattr(dag_run, "run_after", None)
    return RunIdentity(dag_run.dag_id, dag_run.run_id, when)


class ResumeValidatorOperator(InputPlanningMixin, DJBaseOperator):
    """Apply the run's overrides, then plan a new job or validate the one to resume (module docstring).

    :param recipe_path: the recipe file (templated).
    :param group_size: partitions per mapped task, unless ``partition.execution_group_size`` says otherwise.
    :param max_active_groups: the run-time cap on partitions in flight (``max_concurrent_partitions``).
    :param local_run: set only by ``dj-airflow run``: its in-process Ray's CPUs and CPU-only concurrency
        (operators/local_run.py); None under a scheduler.
    :param ray_conn_id: the ``ray`` connection: where it names a Ray cluster, a new job's input is
        indexed and hashed by Ray tasks on it (planning time falls with the cluster's cores); in Ray Jobs
        mode by a Ray Job on the cluster (operators/input_planning.py); else by this worker's threads.
    :param deferrable: Ray Jobs mode: wait for the planning's Ray Job in the triggerer (True) or the
        worker (False); default: Airflow's ``[operators] default_deferrable``, as Airflow's own
        operators (the generated DAGs pass ``[dj] ray_jobs_deferrable`` or the recipe's choice).
    :param poll_interval: Ray Jobs mode: seconds between looks at the planning's Ray Job.
    """

    template_fields: Sequence[str] = ("recipe_path",)
    ui_color = "#fdf2d0"
    lineage_step = "validate"

    def __init__(
        self,
        *,
        recipe_path: str,
        group_size: int = 1,
        max_active_groups: int | None = None,
        local_run: dict | None = None,
        ray_conn_id: str | None = RayHook.default_conn_name,
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        poll_interval: float = 5.0,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.recipe_path = recipe_path
        self.ray_conn_id = ray_conn_id
        self.deferrable = bool(deferrable)
        self.poll_interval = poll_interval
        # local_run: what `dj-airflow run` decided (operators/local_run.py); None under a scheduler.
        self.local_run = local_run
        # group_size: the size when partition.execution_group_size is auto but
        # there are no GPU probe figures (CPU-only pipelines).  A recipe integer
        # wins; auto with a probe report is resolved by the engine (engine.planning.decisions).
        # max_active_groups: the mapped task's parse-time max_active_tis_per_dagrun,
        # so the run-time limit per group splits the run's total between groups.
        self.group_size = group_size
        self.max_active_groups = max_active_groups

    def _effective_recipe(self, context: Context):
        from airflow_provider_dj.dag_builder.templating import task_renderer

        conf = dict(getattr(context.get("dag_run"), "conf", None) or {})
        try:
            # Templated values are rendered here, with this task's context (docs/nightly.md).
            return load_effective_recipe(self.recipe_path, conf, renderer=task_renderer(self, context))
        except RecipeError as exc:
            self.log.error("Recipe refused before any work; nothing was planned or written:\n%s", exc)
            raise RecipeRefused(str(exc)) from exc

    def execute(self, context: Context) -> list[dict]:
        started_at = time.time()
        recipe = self._effective_recipe(context)
        job_id = choose_job_id(recipe, run_identity(context))
        planner, proof = self._where_input_is_read(recipe, job_id, context)
        return self._start(context, recipe, job_id, started_at, planner, proof)

    def execute_complete(self, context: Context, event: dict | None = None) -> list[dict]:
        """Ray Jobs mode: the planning's (or the input proof's) Ray Job ended, the trigger's event says
        which: start the job from what it wrote."""
        if not event or not event.get("submission_id"):
            raise AirflowFailException(f"{self.task_id}: the Ray job trigger returned no event")
        started_at = time.time()
        recipe = self._effective_recipe(context)
        job_id = choose_job_id(recipe, run_identity(context))
        client = RayHook(ray_conn_id=self.ray_conn_id).get_jobs_client()
        sid = event["submission_id"]
        status = client.status(sid) or "UNKNOWN"
        planner, proof = self._from_input_ray_job(client, sid, status, recipe.to_dict(), job_id)
        return self._start(context, recipe, job_id, started_at, planner, proof)

    def _start(
        self, context: Context, recipe: Any, job_id: str, started_at: float, planner: Any, proof: Any
    ) -> list[dict]:
        """``start_job`` with ``planner`` for a new job's input and ``proof`` for a resumed one's; the
        refusals as failures without retries."""
        try:
            started = start_job(
                recipe,
                job_id=job_id,
                started_at=started_at,
                default_group_size=self.group_size,
                max_active_groups=self.max_active_groups,
                sequential_tasks=self.local_run is not None,
                cpu_default=local.max_concurrent_partitions(self.local_run),
                max_mapped_tasks=max_map_length(),
                event_defaults=event_defaults(context),
                run_id=context["dag_run"].run_id,
                run_pid=local.owner_pid(self.local_run),
                say=lambda m: self.log.info("%s", m),
                warn=lambda m: self.log.warning("%s", m),
                input_planner=planner,
                input_proof=proof,
            )
        except ResumeRefusedError as exc:
            self.log.error("Resume refused (%s); the job directory was not modified:\n%s", exc.reason, exc)
            raise
        except HistoryIndexError as exc:
            # The history refuses this job (another op arguments' keys, an export file it already holds):
            # a retry would be refused the same way (engine/history/pin.py).
            self.log.error("dedup_history refused the job before any work; nothing was planned or written:\n%s", exc)
            raise RecipeRefused(str(exc)) from exc
        except (PartitionTooLargeError, GlobalStepTooLargeError) as exc:
            # A partition or a global step no worker could hold: every retry would plan the same.
            self.log.error("Plan refused before any work (memory); nothing was written:\n%s", exc)
            raise RecipeRefused(str(exc)) from exc
        except InputError as exc:
            # The input does not fit the recipe (a field it reads in no row, bytes that are not UTF-8, a line
            # that is not a JSON object): retrying cannot help, so fail without retries (engine/input/schema.py).
            self.log.error("Input refused before any work; nothing was planned or written:\n%s", exc)
            raise InputRefused(str(exc)) from exc
        from airflow_provider_dj.engine.runner.plan_job import remove_planned

        remove_planned(recipe.work_dir, job_id)  # a plan a Ray Job wrote is in the job directory now
        self.lineage_job_dir = started.job_dir  # what its OpenLineage events report (operators/openlineage.py)
        ti = context["ti"]
        ti.xcom_push(key="job_dir", value=started.job_dir)
        ti.xcom_push(key="job_id", value=started.job_id)
        ti.xcom_push(key="job_complete", value=started.job_complete)
        return self._mapped_groups(started.groups, self.local_run)

    @staticmethod
    def _mapped_groups(groups: list[ExecutionGroup], local_run: dict | None) -> list[dict]:
        """What the partition tasks are mapped over: the groups as XCom's plain dicts.

        Under ``dj-airflow run`` (``dag.test()``) a mapped task that expands to
        nothing costs a one-second sleep in the runner's loop, twice per empty
        run.  There, no groups become one placeholder group with no partitions,
        which its task finishes at once.  Under a scheduler an empty list stays
        empty: the mapped tasks show as skipped.
        """
        if not groups and local_run is not None:
            groups = [ExecutionGroup.placeholder()]
        return [g.to_dict() for g in groups]
