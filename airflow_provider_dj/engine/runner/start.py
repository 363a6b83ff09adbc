"""The job's first step (the ``validate`` task): the effective recipe, the job id, and a planned or proven job.

``start_job`` either plans a new job or proves an existing one may continue
(engine/job/setup.py), clears a stop request older than this run, records
``job_start`` and the planning decisions, and returns the execution groups
that the segment steps run.  Nothing here knows how it is orchestrated: the
Airflow task, the local executor and a Ray Job's driver all call it the same
way, with the caller's identity passed in as plain values.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any, Callable

from airflow_provider_dj.engine.config.notices import unused_setting_notices
from airflow_provider_dj.engine.config.overrides import normalize_overrides
from airflow_provider_dj.engine.config.recipe import load_recipe
from airflow_provider_dj.engine.job.input_plan import InputPlanner, plan_input
from airflow_provider_dj.engine.job.resume import InputProof
from airflow_provider_dj.engine.job.setup import PreparedJob, prepare_job
from airflow_provider_dj.engine.jobdir.events import EventLog
from airflow_provider_dj.engine.jobdir.identity import job_id_for_run, new_job_id, resume_command, validate_job_id
from airflow_provider_dj.engine.jobdir.stop_control import clear_stop_request_before
from airflow_provider_dj.engine.planning.execution_group import ExecutionGroup

if TYPE_CHECKING:
    from airflow_provider_dj.engine.config.schema import Recipe
    from airflow_provider_dj.engine.config.templates import TemplateRenderer

log = logging.getLogger(__name__)

Say = Callable[[str], None]


@dataclass(frozen=True)
class RunIdentity:
    """The orchestrator's run a job id is derived from (an Airflow DAG run), so that re-running
    the whole run finds the same job directory and resumes it."""

    dag_id: str
    run_id: str
    when: datetime


@dataclass
class StartedJob:
    """What the first step hands the rest of the job: the prepared job and its execution groups."""

    recipe: Any
    prepared: PreparedJob
    groups: list[ExecutionGroup] = field(default_factory=list)
    decisions: Any = None  #: engine.planning.decisions.RunDecisions when a new or resumed job was planned

    @property
    def job_id(self) -> str:
        return self.prepared.job_id

    @property
    def job_dir(self) -> str:
        return self.prepared.job_dir

    @property
    def job_complete(self) -> bool:
        return self.prepared.job_complete


def load_effective_recipe(
    recipe_path: str, overrides: dict[str, Any] | None = None, *, renderer: TemplateRenderer | None = None
) -> Recipe:
    """The recipe file with trigger-time overrides applied (nested or dotted keys), validated.

    ``renderer`` renders templated values (``{{ ds }}``); without one they stay as written.
    Raises ``RecipeError`` naming the file and key; nothing is read or written."""
    return load_recipe(recipe_path, normalize_overrides(dict(overrides or {})), renderer=renderer)


def choose_job_id(recipe: Recipe, run: RunIdentity | None = None) -> str:
    """``job_id`` or ``resume`` from the recipe; else derived from the orchestrator's run; else a new id."""
    given = recipe.job_id or recipe.resume
    if given:
        return validate_job_id(given, "job_id" if recipe.job_id else "resume")
    if run is not None:
        return job_id_for_run(run.dag_id, run.run_id, run.when)
    return new_job_id()


def report_recipe(recipe: Recipe, say: Say = log.info, warn: Say = log.warning) -> None:
    """Log what the recipe resolved to that a person should see before any work: rendered
    templates, settings with no effect (engine/config/notices.py), and a reuse setting that cannot apply."""
    from airflow_provider_dj.engine.execution.reuse import reuse_off_reason

    for key, value in (recipe.templates.get("values") or {}).items():
        say(f"Templated {key}: {value['template']!r} -> {value['rendered']!r}")
    for notice in unused_setting_notices(recipe):
        warn(notice)
    reason = reuse_off_reason(recipe)
    if reason:
        warn(f"intermediate_storage.reuse_across_jobs is ignored: {reason}")


def group_cap_for(recipe: Recipe, max_mapped_tasks: int | None) -> int | None:
    """The most execution groups a segment of this recipe may have (``engine.planning.groups.group_cap``):
    ``None`` where nothing maps them; the readable cap does not bind a recipe's explicit integer."""
    from airflow_provider_dj import settings
    from airflow_provider_dj.engine.planning.groups import group_cap

    size = recipe.partition.extra.get("execution_group_size", "auto")
    explicit = isinstance(size, int) and not isinstance(size, bool)
    return group_cap(max_mapped_tasks, settings.get("max_groups_per_segment"), explicit=explicit)


def _group_size_resolver(
    recipe: Recipe,
    decided: dict[str, Any],
    *,
    default_group_size: int,
    max_active_groups: int | None,
    sequential_tasks: bool,
    cpu_default: int | None,
    max_groups: int | None,
    max_mapped_tasks: int | None,
) -> Callable[[dict[str, Any], str], int]:
    """What prepare_job calls once the partitioning is known: planning decisions -> group size."""
    from airflow_provider_dj.engine.gpu.profiles import load_report
    from airflow_provider_dj.engine.planning.decisions import decide_run

    def resolve(info: dict[str, Any], job_dir: str) -> int:
        decisions = decide_run(
            recipe,
            info,
            load_report(job_dir),
            default_group_size=default_group_size,
            airflow_max_active=max_active_groups,
            sequential_tasks=sequential_tasks,
            cpu_default=cpu_default,
            max_groups=max_groups,
            max_mapped_tasks=max_mapped_tasks,
        )
        decided["decisions"] = decisions
        return decisions.group.planned_size

    return resolve


def start_job(
    recipe: Recipe,
    *,
    job_id: str,
    started_at: float | None = None,
    default_group_size: int = 1,
    max_active_groups: int | None = None,
    sequential_tasks: bool = False,
    cpu_default: int | None = None,
    max_mapped_tasks: int | None = None,
    event_defaults: dict[str, Any] | None = None,
    run_id: str | None = None,
    run_pid: int | None = None,
    say: Say = log.info,
    warn: Say = log.warning,
    input_planner: InputPlanner = plan_input,
    input_proof: InputProof | None = None,
) -> StartedJob:
    """Plan a new job or prove an existing one, then record the start; returns the execution groups.

    ``started_at``: when this run began; a stop request older than that is done with and cleared.
    ``default_group_size`` applies when ``partition.execution_group_size`` is auto without GPU figures;
    ``max_active_groups`` is how many groups the orchestrator runs at once; ``sequential_tasks`` says
    groups run one after another (then ``cpu_default`` CPUs serve one group).  ``max_mapped_tasks``:
    Airflow's ``[core] max_map_length`` where Airflow maps the groups (no segment gets more groups, nor,
    for a size the planner chose, more than ``[dj] max_groups_per_segment``); ``None`` where nothing maps
    them (the local executor), so no cap.  ``run_id`` and
    ``run_pid`` identify the runner in the job's lock.  ``input_planner``: how a new job's input is
    checked and partitioned (engine/job/input_plan.py); ``input_proof``: how a resumed job's input is
    proven unchanged (engine/job/resume.py).  Raises ``ResumeRefusedError``,
    ``HistoryIndexError`` or ``InputError`` before anything is written."""
    started_at = time.time() if started_at is None else started_at
    report_recipe(recipe, say, warn)
    say(
        f"Resume token: {job_id}. Re-trigger with resume={job_id} (or {resume_command(recipe.source_file, job_id)})"
        " to resume this job."
    )
    decided: dict[str, Any] = {}
    max_groups = group_cap_for(recipe, max_mapped_tasks)
    prepared = prepare_job(
        recipe,
        job_id=job_id,
        group_size=_group_size_resolver(
            recipe,
            decided,
            default_group_size=default_group_size,
            max_active_groups=max_active_groups,
            sequential_tasks=sequential_tasks,
            cpu_default=cpu_default,
            max_groups=max_groups,
            max_mapped_tasks=max_mapped_tasks,
        ),
        max_groups=max_groups,
        event_defaults=event_defaults,
        airflow_run_id=run_id,
        log_step=say,
        run_pid=run_pid,
        input_planner=input_planner,
        input_proof=input_proof,
    )
    started = StartedJob(recipe, prepared, list(prepared.groups), decisions=decided.get("decisions"))
    _clear_older_stop(prepared, started_at, event_defaults, say)
    if prepared.job_complete:
        say(f"Job {job_id} already completed: nothing to do; the export will be re-verified.")
        return started
    events = EventLog(prepared.job_dir, job_id, defaults=event_defaults)
    events.emit(
        "job_start",
        status="resumed" if prepared.resumed else "new",
        partitions=prepared.num_partitions,
        input_rows=prepared.total_rows,
    )
    say(
        f"Job {job_id} in {prepared.job_dir}: {'resuming' if prepared.resumed else 'new job'}, "
        f"{prepared.num_partitions} partitions, {prepared.total_rows} rows, {len(prepared.groups)} execution groups"
    )
    _apply_decisions(started, events, say, warn)
    if prepared.resumed:
        final = sum(1 for g in prepared.groups for c in (g.completed or {}).values() if c["final"])
        say(f"{final}/{prepared.num_partitions} partitions already final; the rest resume from their last checkpoint")
    return started


def _clear_older_stop(
    prepared: PreparedJob, started_at: float, event_defaults: dict[str, Any] | None, say: Say
) -> None:
    """Resuming a stopped job: a stop requested before this run started is done with (it did stop the
    job); one requested since belongs to this run and is kept.  After prepare_job, so a refused resume
    changes nothing."""
    cleared = clear_stop_request_before(prepared.job_dir, started_at)
    if cleared is None:
        return
    say(
        f"Job {prepared.job_id} was stopped (request by {cleared.get('requested_by')} at "
        f"{cleared.get('requested_at')}): stop request cleared, resuming from its committed checkpoints"
    )
    EventLog(prepared.job_dir, prepared.job_id, defaults=event_defaults).emit(
        "stop_cleared", status="resumed", note=f"stop of {cleared.get('requested_at')} cleared by validate"
    )


def _apply_decisions(started: StartedJob, events: EventLog, say: Say, warn: Say = log.warning) -> None:
    """Carry the planning decisions to every group (in-flight limit, actor sizes) and record them."""
    decisions = started.decisions
    if decisions is None:
        return
    if decisions.group.bounded_by and decisions.group.source == "recipe":
        warn(
            f"partition.execution_group_size: {decisions.group.reason}. Set it to at least "
            f"{decisions.group.size} (or raise {decisions.group.bounded_by.split('=')[0]}) to silence this."
        )
    from airflow_provider_dj.engine.execution.actor_pool import stage_resources
    from airflow_provider_dj.engine.planning.concurrency import in_flight_per_group

    groups = started.groups
    if groups and len(groups) < decisions.concurrent_groups:
        # Fewer groups than planned (runs of reused partitions packed into one): the in-flight total
        # is split over the groups there are.
        decisions.concurrent_groups = len(groups)
        decisions.max_in_flight = in_flight_per_group(decisions.concurrency.value, len(groups))
    resources = stage_resources(started.job_dir, decisions.actor_plan)
    # actor_resources sizes the actor pool of a group whose segment holds a stateful op
    started.groups = [
        replace(g, max_in_flight=decisions.max_in_flight, actor_resources=resources or g.actor_resources)
        for g in groups
    ]
    say(
        f"Planning: {decisions.group.size} partition(s) per execution group ({decisions.group.reason}); at most "
        f"{decisions.concurrency.value} partition(s) in flight ({decisions.concurrency.reason}), "
        f"{decisions.max_in_flight} per group"
    )
    if decisions.actor_plan is not None:
        say(f"Actor plan: {decisions.actor_plan.to_dict()}")
    events.emit("execution_planning", **decisions.to_dict())
