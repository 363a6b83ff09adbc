"""Start a new job or re-attach to an existing one — the engine side of the `validate` task.

A new job: validate the effective recipe, check the input exists, plan
partitions (scan + hash), and write the effective config, the partitioning
info and the execution plan into the job directory, then take the runner
lock.

An existing job directory (a retried/cleared run, or an explicit resume):
never re-plan and never delete.  ``engine.job.resume.validate_resume`` proves
the job may be continued — or refuses with a specific reason, leaving the
job directory byte-for-byte untouched (invariant 7).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field, replace
from typing import Callable

from airflow_provider_dj import settings
from airflow_provider_dj.core import fs as storage
from airflow_provider_dj.engine.config.path_confinement import refuse_job_dir_outside_roots
from airflow_provider_dj.engine.input.media_digests import split_file_digests, write_file_digests
from airflow_provider_dj.engine.job.input_plan import InputPlanner, plan_input
from airflow_provider_dj.engine.job.resume import InputProof, ResumeRefusedError, validate_resume
from airflow_provider_dj.engine.jobdir import lock as job_lock
from airflow_provider_dj.engine.jobdir.events import EventLog, write_buffered
from airflow_provider_dj.engine.jobdir.faults import load_faults, maybe_fail
from airflow_provider_dj.engine.jobdir.identity import validate_job_id
from airflow_provider_dj.engine.jobdir.layout import (
    EFFECTIVE_CONFIG,
    EXECUTION_PLAN,
    JOB_SUMMARY,
    PARTITIONING_INFO,
    JobPaths,
    write_json,
)
from airflow_provider_dj.engine.planning.execution_group import ExecutionGroup
from airflow_provider_dj.engine.planning.execution_plan import plan_document
from airflow_provider_dj.engine.planning.plan import build_plan, execution_groups

log = logging.getLogger(__name__)

__all__ = ["PreparedJob", "ResumeRefusedError", "prepare_job"]


@dataclass
class PreparedJob:
    job_id: str
    job_dir: str
    groups: list[ExecutionGroup]
    resumed: bool
    num_partitions: int
    total_rows: int
    job_complete: bool = False
    accepted_changes: list[str] = field(default_factory=list)
    lock_note: str = ""
    #: The ``airflow_run_id`` the job's runner lock was taken for: the later steps must name the same one.
    runner_id: str | None = None

    def to_dict(self) -> dict:
        """Plain JSON values: the groups as the dicts planning writes."""
        return dict(self.__dict__, groups=[g.to_dict() for g in self.groups])


def prepare_job(
    recipe,
    *,
    job_id: str,
    group_size: int | Callable[[dict, str], int] = 1,
    max_groups: int | None = None,
    event_defaults: dict | None = None,
    airflow_run_id: str | None = None,
    log_step: Callable[[str], None] | None = None,
    run_pid: int | None = None,
    input_planner: InputPlanner = plan_input,
    input_proof: InputProof | None = None,
) -> PreparedJob:
    """``recipe`` is the effective engine.config.recipe.Recipe (overrides applied).

    ``group_size`` may be a callable (partitioning_info, job_dir) -> int: the
    ``auto`` size needs the partitions and the probe report (engine.gpu).
    ``max_groups``: no more execution groups than this (``engine.planning.groups.group_cap``).
    ``run_pid``: the pid that lives as long as the run (``dj-airflow run``'s own),
    recorded in the runner lock (engine/jobdir/lock.py).
    ``input_planner``: how a new job's input is checked and partitioned (engine/job/input_plan.py);
    ``input_proof``: how a resumed job's input is proven unchanged (``resume.validate_resume``).
    """
    validate_job_id(job_id)
    say = log_step or log.info
    paths = JobPaths(recipe.work_dir, job_id)
    refuse_job_dir_outside_roots(paths.job_dir, job_id)  # an existing work_dir/<job_id> may be a link
    info_path = paths.path(PARTITIONING_INFO)
    plan = build_plan(recipe)
    # Data-Juicer ops run through the adapter get their argument values checked
    # by Data-Juicer here, before any partition runs (no-op without such ops).
    from airflow_provider_dj.engine.config.adapted_ops import check_adapted_ops

    check_adapted_ops(recipe)
    owner = job_lock.owner_identity(airflow_run_id, run_pid=run_pid)
    args = (recipe, paths, plan, owner, job_id, (group_size, max_groups), event_defaults, say)
    if storage.exists(info_path) or (recipe.resume and storage.exists(paths.job_dir)):
        prepared = _prepare_resumed_job(*args, input_proof=input_proof)
    else:
        prepared = _prepare_new_job(*args, input_planner=input_planner)
    prepared.runner_id = airflow_run_id
    return prepared


def _prepare_resumed_job(
    recipe,
    paths: JobPaths,
    plan,
    owner: dict,
    job_id: str,
    sizing: tuple[int | Callable[[dict, str], int], int | None],
    event_defaults: dict | None,
    say: Callable[[str], None],
    *,
    input_proof: InputProof | None = None,
) -> PreparedJob:
    """A job directory exists: validate the resume, take the runner lock unless the job completed,
    and write the execution plan of the partitions still to compute."""
    # Everything before the lock is taken only reads the job directory.
    job_lock.check(paths.job_dir, owner)
    report = validate_resume(recipe, paths.job_dir, plan, log_step=say, input_proof=input_proof)
    info = report.info
    events = EventLog(paths.job_dir, job_id, defaults=event_defaults)
    write_buffered(events, report.events)
    lock_note = "" if report.job_complete else job_lock.acquire(paths.job_dir, owner)
    if lock_note:
        say(f"runner lock {lock_note}")
    if not report.job_complete:
        from airflow_provider_dj.engine.job.summary import mark_resumed

        if mark_resumed(paths.job_dir):
            say(f"{JOB_SUMMARY} of the previous (failed/stopped) run now says running")
    group_size, max_groups = sizing
    size = group_size(info, paths.job_dir) if callable(group_size) and not report.job_complete else group_size
    planned = [] if report.job_complete else execution_groups(info, size, report.completed, max_groups=max_groups)
    groups = [replace(g, completed={str(pid): report.completed[pid] for pid in g.partition_ids}) for g in planned]
    plan.groups = groups
    if not report.job_complete:
        write_json(paths.path(EXECUTION_PLAN), plan_document(plan, info, job_id=job_id))
        _record_limits(paths.job_dir, recipe, say)  # a resume may have raised max_failed_ratio or a review bound
        _register(job_id, paths.job_dir)
    return PreparedJob(
        job_id,
        paths.job_dir,
        groups,
        True,
        info["num_partitions"],
        info["total_rows"],
        report.job_complete,
        report.accepted_changes,
        lock_note,
    )


def _prepare_new_job(
    recipe,
    paths: JobPaths,
    plan,
    owner: dict,
    job_id: str,
    sizing: tuple[int | Callable[[dict, str], int], int | None],
    event_defaults: dict | None,
    say: Callable[[str], None],
    *,
    input_planner: InputPlanner,
) -> PreparedJob:
    """No job directory yet: refuse a resume (metadata_missing), else check the input, plan the
    partitions and write the job directory (partitioning_info.json last: it marks a planned job)."""
    from airflow_provider_dj.engine.config.recipe import check_input_exists
    from airflow_provider_dj.engine.planning.global_memory import check_global_steps_fit

    info_path = paths.path(PARTITIONING_INFO)
    if recipe.resume:
        raise ResumeRefusedError(
            "metadata_missing",
            f"resume={recipe.resume!r}: there is no job directory at {paths.job_dir}; check the token and work_dir",
        )
    check_input_exists(recipe)
    t0 = time.perf_counter()
    info = input_planner(recipe, say)  # the input checked, indexed and hashed; nothing written
    largest = max((p["end_row"] - p["start_row"] for p in info["partitions"]), default=0)
    # as is a global step no machine here could run (one shard of it, when it is sharded)
    check_global_steps_fit(plan, info["total_rows"], recipe=recipe, max_partition_rows=largest)
    maybe_fail(paths.job_dir, load_faults(paths.job_dir), None, None, point="plan")
    from airflow_provider_dj.engine.history.pin import current_pin, write_pin

    history_pin = current_pin(recipe)  # a history built with other op arguments is refused here, before work
    storage.makedirs(paths.job_dir)
    cfg = recipe.to_dict()
    cfg["job_id"] = job_id
    # Settings that change what the job writes (delta checkpoints): an added key, absent in older job dirs.
    cfg["settings"] = settings.on_disk()
    # The lock first: of two runs starting one job id at the same instant, the loser must be refused
    # before it writes anything, or its config (another export_path, say) could replace the winner's.
    lock_note = job_lock.acquire(paths.job_dir, owner)
    write_json(paths.path(EFFECTIVE_CONFIG), cfg)
    _record_limits(paths.job_dir, recipe, say)
    if history_pin is not None:  # before partitioning_info: a planned job always has its pin
        write_pin(paths.job_dir, history_pin)
        say(f"dedup_history: deduplicating against version {history_pin['version']} of {history_pin['path']}")
    # Each media file's digest apart from partitioning_info, which every task reads (engine/input/media_digests.py).
    write_file_digests(paths.job_dir, split_file_digests(info))
    write_json(info_path, info)  # last: its presence marks a planned job
    events = EventLog(paths.job_dir, job_id, defaults=event_defaults)
    events.emit(
        "plan_created",
        partitions=info["num_partitions"],
        input_rows=info["total_rows"],
        duration=round(time.perf_counter() - t0, 6),
        how=info["how_chosen"],
    )
    say(
        f"planned {info['num_partitions']} partitions over {info['total_rows']} rows ({info['how_chosen']}) "
        f"in {time.perf_counter() - t0:.2f}s"
    )
    group_size, max_groups = sizing
    size = group_size(info, paths.job_dir) if callable(group_size) else group_size
    groups = _new_job_groups(recipe, plan, info, paths.job_dir, (size, max_groups), say)
    plan.groups = groups
    write_json(paths.path(EXECUTION_PLAN), plan_document(plan, info, job_id=job_id))
    _register(job_id, paths.job_dir)
    return PreparedJob(
        job_id, paths.job_dir, groups, False, info["num_partitions"], info["total_rows"], lock_note=lock_note
    )


def _new_job_groups(
    recipe, plan, info: dict, job_dir: str, sizing: tuple[int, int | None], say
) -> list[ExecutionGroup]:
    """The execution groups of a new job: runs of partitions an earlier job's checkpoints cover whole
    (reuse across jobs) as one group each, the rest ``size`` partitions a group."""
    from airflow_provider_dj.engine.execution.reuse import partitions_reusable_whole

    if not info["partitions"]:
        return []
    size, max_groups = sizing
    whole = partitions_reusable_whole(recipe, plan, info, job_dir)
    groups = execution_groups(info, size, max_groups=max_groups, whole=whole)
    if whole:
        say(
            f"reuse: {len(whole)} of {info['num_partitions']} partitions have an earlier job's checkpoints; "
            f"{len(groups)} execution groups"
        )
    return groups


def _record_limits(job_dir: str, recipe, say: Callable[[str], None]) -> None:
    """Record this run's failure-rate guard and review bounds: the recipe of the latest validate, new job
    or resume, is what the partitions and the review gate check against."""
    from airflow_provider_dj.engine.execution.failure_guard import MIN_FAILED_ROWS, write_settings
    from airflow_provider_dj.engine.job.review import write_bounds

    write_bounds(job_dir, recipe)

    g = write_settings(job_dir, recipe)
    extra = f"; per op: {g.per_op}" if g.per_op else ""
    say(
        f"failure-rate guard: an op failing more than {g.job_ratio:g} of its input (and at least "
        f"{MIN_FAILED_ROWS} rows, or all of them) stops the job before export{extra}"
    )


def _register(job_id: str, job_dir: str) -> None:
    """Record the job in this machine's recent-jobs registry (for ``dj-airflow monitor``); never fails the job."""
    try:
        from airflow_provider_dj.engine.jobdir.registry import register_job

        register_job(job_id, job_dir, status="running")
    except Exception as exc:  # noqa: BLE001
        log.warning("could not update the recent-jobs registry: %s", exc)
