"""Run a whole recipe in one process, without Airflow: the local executor and the engine's Python API.

``run_job`` calls exactly the steps the generated DAG's tasks call, in the
DAG's order: the GPU preflight, the first step (plan a new job or prove an
existing one), each segment for each execution group, the barrier check and
the global step after each segment that feeds a deduplicator, and the
export.  The job directory, checkpoints, resume, lineage, history and the
export are the same as a DAG run's; so a job started here can be resumed by
the DAG and the other way round (``resume=`` takes the printed token).

Partitions run in this process (``workers=1``), on a pool of local processes
(``workers=N``, the default: one per core), or as Ray tasks
(``executor="ray"``: the Ray this process is connected to, else a private
local one).
"""

from __future__ import annotations

import functools
import logging
import os
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterator

from airflow_provider_dj import settings
from airflow_provider_dj.core.errors import DJError
from airflow_provider_dj.engine.job.setup import PreparedJob
from airflow_provider_dj.engine.job.summary import read_job_summary
from airflow_provider_dj.engine.job.watch import check as barrier_check
from airflow_provider_dj.engine.jobdir import lock as job_lock
from airflow_provider_dj.engine.runner.dispatch import LocalDispatcher, RayDispatcher
from airflow_provider_dj.engine.runner.executor_choice import choose_after_planning, ray_needed_before_planning
from airflow_provider_dj.engine.runner.preflight import gpu_preflight_step
from airflow_provider_dj.engine.runner.start import StartedJob, choose_job_id, load_effective_recipe, start_job
from airflow_provider_dj.engine.runner.steps import finish_job, review_gate, run_global_step, run_group
from airflow_provider_dj.engine.runner.stop import JobStopped, record_job_failure, stopping
from airflow_provider_dj.engine.storage.context import JobContext

if TYPE_CHECKING:
    from airflow_provider_dj.engine.config.schema import Recipe
    from airflow_provider_dj.engine.runner.dispatch import Dispatcher

log = logging.getLogger(__name__)

EXECUTORS = ("local", "ray", "auto")


class BarrierNotReachedError(DJError, RuntimeError):
    """A segment ended without every partition's output and keys committed: the global step would be wrong."""


@dataclass(frozen=True)
class JobResult:
    """What a finished job exported, and where its job directory is."""

    job_id: str
    job_dir: str
    export_path: str
    rows: int
    checksum: str
    already_complete: bool
    summary: dict[str, Any]
    #: This invocation's identity in the job's lock and events (``local__<time>_<pid>``).
    run_id: str | None = ""

    @property
    def resume_token(self) -> str:
        return self.job_id


def run_job(
    recipe: str,
    *,
    overrides: dict[str, Any] | None = None,
    work_dir: str | None = None,
    job_id: str | None = None,
    resume: str | None = None,
    workers: int | None = None,
    executor: str = "local",
    renderer: Any = None,
    ray_client: Callable[[], Any] | None = None,
    say: Callable[[str], None] = log.info,
    review: Callable[[Any], bool] | None = None,
) -> JobResult:
    """Run the recipe file ``recipe`` to its export; returns what was exported.

    ``overrides`` are trigger-time values (nested or dotted keys, as ``dag_run.conf``); ``work_dir``,
    ``job_id`` and ``resume`` are shorthands for those keys.  ``resume`` continues a job from its
    committed checkpoints, and never clears them.  ``workers``: local processes for partitions
    (1: this process; default: one per core); with ``executor="ray"``, CPUs of a private Ray.
    ``executor="auto"`` decides after planning: the local pool when the partitions left to compute hold
    at most ``[dj] local_work_max_rows`` rows, else Ray; a recipe that needs Ray (GPU or stateful ops,
    ``RAY_ADDRESS``) gets Ray at once (engine/runner/executor_choice.py).
    ``renderer`` renders templated values (``{{ ds }}``; see ``airflow_provider_dj.dag_builder.templating``).
    ``ray_client`` (with ``executor="ray"``): returns the connected ``ray`` module, called when the first
    partition is dispatched (so a job with nothing to run never starts Ray); default: the Ray this process
    is connected to, else the cluster at ``RAY_ADDRESS``, else a private local one.
    ``review``: the recipe's review gate (``review:``, docs/review_gate.md): called with the
    ``engine.job.review.Review`` when a bound is crossed, it returns True to export; without it a
    crossed bound fails the job (``ReviewRejectedError``, checkpoints kept).

    Raises ``RecipeError`` / ``InputError`` / ``ResumeRefusedError`` before any work, ``JobStopped``
    when a stop was requested (``dj-airflow stop``), ``PartitionFailedError`` when a partition failed
    (the job's summary then says ``failed``, and ``resume=`` continues it)."""
    if executor not in EXECUTORS:
        raise ValueError(f"executor={executor!r}: use one of {', '.join(EXECUTORS)}")
    started_at = time.time()
    conf = dict(overrides or {})
    conf.update({k: v for k, v in (("work_dir", work_dir), ("job_id", job_id), ("resume", resume)) if v is not None})
    workers = max(1, int(workers or os.cpu_count() or 1))
    effective = load_effective_recipe(recipe, conf, renderer=renderer)
    _refuse_unrendered(effective)
    chosen = choose_job_id(effective)
    # This invocation's identity in the job's lock: another run of the same job (a resume after a crash,
    # a second process started by mistake) is another owner, refused while this one lives.
    run_id = f"local__{time.strftime('%Y-%m-%dT%H:%M:%S', time.gmtime(started_at))}_{os.getpid()}"
    if executor == "auto":
        why = ray_needed_before_planning(effective)
        executor = "ray" if why else "auto"  # else decided once the work left is known (executor_choice.py)
        if why:
            say(f"executor: Ray, whatever the rows: {why}")
    if executor == "ray" and ray_client is None:
        ray_client = functools.partial(local_ray, workers)  # called at most at the first dispatch
    # None while ``auto`` waits for the plan
    dispatcher = None if executor == "auto" else _dispatcher(executor, workers, ray_client)
    try:
        gpu_preflight_step(
            recipe,
            conf,
            renderer=lambda: renderer,
            job_id=chosen,
            executor="local" if executor == "auto" else executor,
            ray_client=ray_client,
            say=say,
        )
        started = start_job(
            effective,
            job_id=chosen,
            event_defaults=_step("validate"),
            started_at=started_at,
            # As `dj-airflow run --num-cpus N` plans: groups of N partitions, one group at a time.
            default_group_size=settings.get("default_group_size") or workers,
            sequential_tasks=True,
            cpu_default=workers,
            run_id=run_id,
            run_pid=os.getpid(),
            say=say,
        )
        if dispatcher is None:
            choice = choose_after_planning(started, workers)
            say(f"executor: {choice.line}")
            client = ray_client or functools.partial(local_ray, workers)
            dispatcher = _dispatcher(choice.executor, choice.workers, client)
        return _run_started(started, dispatcher, run_id, say, review)
    finally:
        if dispatcher is not None:
            dispatcher.close()


def _dispatcher(executor: str, workers: int, ray_client: Callable[[], Any] | None) -> Dispatcher:
    """The dispatcher of a decided executor (``local`` or ``ray``)."""
    if executor == "ray":
        return RayDispatcher(ray_client or functools.partial(local_ray, workers))
    return LocalDispatcher(workers)


def run_prepared_job(
    prepared: PreparedJob,
    *,
    workers: int = 1,
    executor: str = "local",
    ray_client: Callable[[], Any] | None = None,
    say: Callable[[str], None] = log.info,
) -> JobResult:
    """Every step after the first (each segment on each group, the barrier and global steps, the export)
    for a job that ``engine.job.setup.prepare_job`` planned or proved; what ``run_job`` runs after its
    first step.  For callers that plan a job themselves (tests of one step's effect, tools that inspect
    a plan before running it); the steps run as the runner ``prepare_job`` took the job's lock for.

    ``workers``: local processes for partitions (1: this process).  Raises as ``run_job`` does."""
    if executor not in EXECUTORS:
        raise ValueError(f"executor={executor!r}: use one of {', '.join(EXECUTORS)}")
    workers = max(1, workers)
    started = StartedJob(recipe=None, prepared=prepared, groups=list(prepared.groups))
    if executor == "auto":
        choice = choose_after_planning(started, workers)
        say(f"executor: {choice.line}")
        executor, workers = choice.executor, choice.workers
    if executor == "ray" and ray_client is None:
        ray_client = functools.partial(local_ray, workers)
    dispatcher = _dispatcher(executor, workers, ray_client)
    try:
        return _run_started(started, dispatcher, prepared.runner_id, say)
    finally:
        dispatcher.close()


def _run_started(
    started: StartedJob,
    dispatcher: Dispatcher,
    run_id: str | None,
    say: Callable[[str], None],
    review: Callable[[Any], bool] | None = None,
) -> JobResult:
    """Every step after the first, under the stop protocol; a failure is recorded in the job directory.

    Each segment's groups run as the DAG's mapped instances do: a failing group does not keep its siblings
    from committing their partitions (so a resume has the most to start from); the segment's first
    failure is raised once they have all run, and a stop ends the job at once.  The steps are called here,
    in ``with`` blocks, not handed to wrappers: from here to an op's ``process_table`` is a short path
    (tests/unit/engine/test_call_depth.py)."""
    job_dir = started.job_dir
    key = run_id or "local"  # the steps' stop keys, as the DAG's task instances name theirs
    where = "the first step"
    try:
        if not started.job_complete:
            plan = JobContext(job_dir).plan
            for seg in plan.segments:
                where = seg.task_id()
                failures: list[Exception] = []
                for group in started.groups:
                    with (
                        _kept_apart(failures),
                        stopping(
                            job_dir,
                            step_key=f"{key}.{where}.{group.group_id}",
                            run_id=run_id,
                            event_defaults=_step(where),
                            say=say,
                        ),
                    ):
                        run_group(
                            job_dir, seg.index, group, dispatcher, event_defaults=_step(where), run_id=run_id, say=say
                        )
                if failures:
                    raise failures[0]
                if seg.keys_for_global is not None:
                    where = plan.global_task_id(seg.keys_for_global)
                    _require_barrier(job_dir, seg.index)
                    with stopping(
                        job_dir, step_key=f"{key}.{where}", run_id=run_id, event_defaults=_step(where), say=say
                    ):
                        step = run_global_step(job_dir, seg.keys_for_global, event_defaults=_step(where))
                    say(f"global op {seg.keys_for_global}: {step.to_dict()}")
            where = "review"
            review_gate(job_dir, review, event_defaults=_step(where), say=say)
        where = "export"
        with stopping(job_dir, step_key=f"{key}.export", run_id=run_id, event_defaults=_step(where), say=say):
            result = finish_job(job_dir, event_defaults=_step(where), run_id=run_id, say=say)
    except BaseException as exc:
        record_job_failure(job_dir, where, exc, event_defaults=_step(where))
        _release_quietly(job_dir, run_id)
        raise
    summary = read_job_summary(job_dir) or {}
    return JobResult(
        job_id=result.job_id,
        job_dir=job_dir,
        export_path=result.export_path,
        rows=result.rows,
        checksum=result.checksum,
        already_complete=result.already_complete,
        summary=summary,
        run_id=run_id,
    )


def _step(step: str) -> dict[str, Any]:
    """Event fields naming the step that wrote an event, by the DAG task that runs the same step."""
    return {"step": step}


@contextmanager
def _kept_apart(failures: list[Exception]) -> Iterator[None]:
    """A group's failure kept in ``failures`` (raised once its siblings have run); a stop goes on at once."""
    try:
        yield
    except JobStopped:
        raise
    except Exception as exc:  # noqa: BLE001 - raised by the caller, once the other groups have run
        failures.append(exc)


def _require_barrier(job_dir: str, segment_index: int) -> None:
    """The DAG's barrier, as one look: every partition committed the segment's output and keys."""
    status = barrier_check(job_dir, segment_index=segment_index)
    if not status.done:
        raise BarrierNotReachedError(f"{status.message}: the global step needs every partition's keys")


def local_ray(workers: int) -> Any:
    """The Ray this process is connected to, else the cluster at RAY_ADDRESS, else a private local one."""
    import ray

    if not ray.is_initialized():
        if os.environ.get("RAY_ADDRESS"):
            ray.init(address=os.environ["RAY_ADDRESS"], ignore_reinit_error=True)
        else:
            # "local": a cluster of our own, never one that `ray start` left in /tmp/ray (which a bare
            # ray.init() would join, even when it is long dead).
            ray.init(address="local", num_cpus=workers, include_dashboard=False, ignore_reinit_error=True)
    return ray


def _refuse_unrendered(recipe: Recipe) -> None:
    """A templated recipe with no renderer would read and write the literal ``{{ ... }}`` paths."""
    from airflow_provider_dj.engine.config.recipe import RecipeError

    values = (recipe.templates or {}).get("values") or {}
    if values and not any(v.get("rendered") is not None for v in values.values()):
        keys = ", ".join(sorted(values))
        raise RecipeError(
            recipe.source_file,
            keys,
            "templated values need a renderer: pass run_job(..., renderer=...) (see docs/python_api.md) "
            "or run it with `dj-airflow run RECIPE --logical-date YYYY-MM-DD`",
        )


def _release_quietly(job_dir: str, run_id: str | None) -> None:
    try:
        job_lock.release(job_dir, run_id)
    except Exception as exc:  # noqa: BLE001 - a lock left behind goes stale; the original error matters more
        log.warning("could not release the runner lock of %s: %s", job_dir, exc)
