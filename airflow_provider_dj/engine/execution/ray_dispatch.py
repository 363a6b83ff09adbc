"""Run a group of partitions of one segment as Ray tasks.

One Ray task per partition over whole Arrow partitions: per-block
scheduling of Ray Data costs more than the work itself at this grain
(docs/benchmarks.md), while a plain task per partition costs milliseconds.  Every partition of a group runs to
its end even if a sibling fails, so the next try has the most checkpoints
to resume from; then the first error is raised.

Stops and kills (docs/stop_and_kill.md): a graceful stop is returned by
each task as data and raised here as StopRequested once all have ended; a
forced stop, an Airflow kill (``DispatchHandle.cancel`` from ``on_kill``)
or any exception escaping the wait cancels the tasks with
``ray.cancel(force=True)``, which kills their worker processes.  A forced
stop still ends as StopRequested (the partitions it ended get their
``partition_stopped`` event here); only a kill raises DispatchKilledError.

Actor pools (engine/execution/actor_pool.py): a segment holding a ``stateful`` op (a
model to load) runs the group's partitions on a pool of Ray actors that
keep the op alive across partitions, so start-up is paid once per actor,
not per partition.  Same results, errors and stops as plain tasks; the
actors are killed (``ray.kill``) when the group ends and by every cancel.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sized

from airflow_provider_dj.core.errors import DJError
from airflow_provider_dj.engine.execution.segment_result import SegmentOutcome, SegmentResult, SegmentStopped

if TYPE_CHECKING:
    from airflow_provider_dj.engine.execution.actor_pool import GroupActorPool

log = logging.getLogger(__name__)


def segment_task(
    job_dir: str,
    segment_index: int,
    partition_id: int,
    try_number: int | None,
    defaults: dict[str, Any],
    modules: tuple[str, ...] = (),
) -> SegmentOutcome:
    """One partition of one segment, as every dispatcher runs it (a Ray task, a pool process, this
    process): ``run_segment``'s result, or a ``SegmentStopped`` for a graceful stop.

    Its name is the Ray task's (a worker's process title is ``ray::segment_task`` while it runs one)."""
    import logging as _logging

    _logging.basicConfig(level=_logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from airflow_provider_dj.engine.execution.actor_pool import import_op_modules

    import_op_modules(modules)  # ops registered outside this package (a plugin's, a test's)
    from airflow_provider_dj.engine.execution.segment_runner import run_segment
    from airflow_provider_dj.engine.jobdir.stop_control import StopRequested

    try:
        return run_segment(job_dir, segment_index, partition_id, try_number=try_number, event_defaults=defaults)
    except StopRequested as exc:
        # A graceful stop is an outcome, not an error: report it as data.
        return SegmentStopped(partition_id, segment_index, exc.request)


class DispatchHandle:
    """The Ray object refs of one dispatch, so another thread can cancel them.

    The operator keeps one per execution: Airflow calls ``on_kill`` (mark
    failed, clear, execution_timeout, SIGTERM) from the task process, and
    ``cancel`` there kills the Ray workers (``force=True``) so nothing keeps
    writing into the job directory after the task is gone.
    """

    def __init__(self) -> None:
        self.refs: list[Any] = []
        self.actors: list[Any] = []  # an actor pool's actors: cancel kills them (ray.kill)
        self.ray: Any = None
        self.killed: str | None = None  # why, once cancel() ran
        self._lock = threading.RLock()  # on_kill may run in a signal handler on the waiting thread

    def track(self, ray: Any, refs: list[Any]) -> None:
        with self._lock:
            self.ray = ray
            self.refs = list(refs)
            killed = self.killed
        if killed:  # killed before the refs existed (a kill racing the submit)
            self.cancel(killed)

    def track_actors(self, ray: Any, actors: list[Any]) -> None:
        with self._lock:
            self.ray = ray
            self.actors = list(actors)
            killed = self.killed
        if killed:
            self.cancel(killed)

    def cancel(self, reason: str, *, force: bool = True, kill: bool = True) -> int:
        """Cancel every tracked task and kill every tracked actor; returns how many calls were made.
        ``kill=False`` (the job's forced stop request): the dispatch is not marked killed, so its wait
        ends as a stop (``StopRequested``), not as Airflow's kill (``DispatchKilledError``)."""
        with self._lock:
            if kill:
                self.killed = self.killed or reason
            refs, ray, actors = list(self.refs), self.ray, list(self.actors)
        n = 0
        for actor in actors:  # actor tasks cannot be force-cancelled: the actor process itself goes
            try:
                ray.kill(actor, no_restart=True)
                n += 1
            except Exception as exc:  # noqa: BLE001 - already dead
                log.debug("kill of %s: %s", actor, exc)
        if actors:
            log.warning("killed %d actor(s) of the group's pool (%s)", len(actors), reason)
        for ref in _still_running(ray, refs):
            try:
                ray.cancel(ref, force=force, recursive=True)
                n += 1
            except Exception as exc:  # noqa: BLE001 - finished tasks cannot be cancelled; that is fine
                log.debug("cancel of %s: %s", ref, exc)
        if refs:
            log.warning("cancelled %d Ray task(s) (%s, force=%s)", n, reason, force)
        return n

    def wait_ended(self, timeout: float = 15.0) -> int:
        """Block until every tracked task has ended (cancelled or finished), at most
        ``timeout`` seconds; returns how many are still running.  A force cancel
        is asynchronous: this is what makes 'no writes after the kill' true."""
        with self._lock:
            refs, ray = list(self.refs), self.ray
        if not refs:
            return 0
        try:
            _, still = ray.wait(refs, num_returns=len(refs), timeout=timeout)
        except Exception as exc:  # noqa: BLE001 - Ray shut down: nothing left to wait for
            log.debug("wait after cancel: %s", exc)
            return 0
        if still:
            log.warning("%d cancelled Ray task(s) still running after %.0fs", len(still), timeout)
        return len(still)


#: After a forced stop cancelled the in-flight tasks, the longest wait for them to end.
FORCED_STOP_WAIT_S = 15.0


class DispatchKilledError(DJError, RuntimeError):
    """The task was killed (on_kill) while its partitions ran; their Ray work was cancelled."""


def run_partitions(
    ray: Any,
    job_dir: str,
    segment_index: int,
    partition_ids: list[int],
    *,
    try_number: int | None = None,
    event_defaults: dict[str, Any] | None = None,
    num_cpus: float = 1,
    on_progress: Callable[[str], None] | None = None,
    rows_by_partition: dict[int, int] | None = None,
    handle: DispatchHandle | None = None,
    poll_s: float = 1.0,
    max_in_flight: int | None = None,
    actor_resources: dict[str, Any] | None = None,
) -> list[SegmentResult]:
    """Run the partitions as Ray tasks and wait for all of them.

    While waiting, every ``poll_s`` it reads the job's stop request: a
    ``force`` request cancels the in-flight tasks at once (their committed
    checkpoints stay; what they held in memory is lost).  A graceful request
    needs nothing here — each task stops itself at its next committed
    boundary.  Any exception that escapes the wait (an Airflow
    execution_timeout, a KeyboardInterrupt) cancels the tasks too, so none
    is left running without an owner.  Raises StopRequested when any
    partition stopped, after all of them have ended.

    ``max_in_flight`` (the run-time layer of partition.max_concurrent_partitions,
    docs/gpu_planning.md): at most that many of the group's partitions run as
    Ray tasks at once; the next is submitted as one ends.  None = all at once.

    A segment with a ``stateful`` op runs on an actor pool instead
    (engine/execution/actor_pool.py): ``max_in_flight`` then bounds the actors, and
    ``actor_resources`` (the validate task's per-op plan) sizes them.
    """
    dispatch = _GroupDispatch(
        ray,
        job_dir,
        segment_index,
        partition_ids,
        handle=handle or DispatchHandle(),
        try_number=try_number,
        event_defaults=event_defaults,
        num_cpus=num_cpus,
    )
    dispatch.open_pool(max_in_flight=max_in_flight, actor_resources=actor_resources, say=on_progress or log.info)
    dispatch.wait_all(poll_s=poll_s, say=on_progress or log.info, rows_by_partition=rows_by_partition)
    return dispatch.results_or_raise()


class _GroupDispatch:
    """One group's partitions on Ray: the queue not yet submitted, the tasks in flight and how each
    ended (result, stop or error).  ``run_partitions`` is its one user."""

    def __init__(
        self,
        ray: Any,
        job_dir: str,
        segment_index: int,
        partition_ids: list[int],
        *,
        handle: DispatchHandle,
        try_number: int | None,
        event_defaults: dict[str, Any] | None,
        num_cpus: float,
    ) -> None:
        from airflow_provider_dj.engine.execution.actor_pool import op_modules
        from airflow_provider_dj.engine.storage.context import JobContext

        self.ray, self.job_dir, self.segment_index, self.partition_ids = ray, job_dir, segment_index, partition_ids
        self.handle, self.try_number, self.event_defaults, self.num_cpus = handle, try_number, event_defaults, num_cpus
        self.plan = JobContext(job_dir).plan
        self.modules = tuple(op_modules(self.plan))
        self.remote = ray.remote(num_cpus=num_cpus, max_retries=0)(segment_task)
        self.queue = list(partition_ids)
        self.limit = len(self.queue)
        self.refs: dict[str, Any] = {}
        self.pool: GroupActorPool | None = None
        self.results: dict[int, SegmentResult] = {}
        self.stopped: dict[int, dict[str, Any]] = {}
        self.errors: list[tuple[int, BaseException]] = []
        self.forced: dict[str, Any] | None = None
        self.forced_at = 0.0  # time.monotonic() of the forced stop's cancel
        self.cut_short: list[int] = []  # partitions the forced stop ended: killed in flight, or never submitted
        from airflow_provider_dj.engine.execution.watchdog import watchdog_for

        self.watchdog = watchdog_for(job_dir, segment_index, try_number=try_number, event_defaults=event_defaults)

    def open_pool(
        self, *, max_in_flight: int | None, actor_resources: dict[str, Any] | None, say: Callable[[str], None]
    ) -> None:
        """Set how many partitions run at once; for a segment with a stateful op, check the cluster
        fits and start the group's actor pool (its actors are then the bound)."""
        from airflow_provider_dj.engine.execution.actor_pool import (
            GroupActorPool,
            check_cluster_fits,
            cluster_totals,
            resolve_pool,
        )

        self.limit = max(1, int(max_in_flight)) if max_in_flight else len(self.queue)
        spec = resolve_pool(
            self.plan,
            self.plan.segments[self.segment_index],
            len(self.queue),
            max_in_flight=max_in_flight,
            cpus_per_partition=self.num_cpus,
            actor_resources=actor_resources,
            cluster=cluster_totals(self.ray),
        )
        if spec is None:
            return
        check_cluster_fits(self.ray, spec, self.segment_index)
        say(
            f"segment {self.segment_index}: actor pool, {spec.reason}; "
            f"each actor num_cpus={spec.num_cpus:g} num_gpus={spec.num_gpus:g}"
        )
        self.pool = GroupActorPool(
            self.ray,
            spec,
            self.job_dir,
            self.segment_index,
            dict(self.event_defaults or {}),
            list(self.modules),
            self.handle,
        )
        self.limit = spec.actors

    def submit(self, n: int) -> list[Any]:
        """Submit the next ``n`` queued partitions (to the pool or as tasks); return their refs, tracked."""
        queue, defaults = self.queue, self.event_defaults
        for pid in queue[:n]:
            self.watchdog.submitted(pid)
        if self.pool is not None:
            new = [self.pool.submit(pid, self.try_number, dict(defaults or {})) for pid in queue[:n]]
        else:
            new = [
                self.remote.remote(
                    self.job_dir, self.segment_index, pid, self.try_number, dict(defaults or {}), self.modules
                )
                for pid in queue[:n]
            ]
        self.refs.update(zip(new, queue[:n]))
        del queue[:n]
        self.handle.track(self.ray, list(self.refs))
        return new

    def collect(self, done: list[Any]) -> None:
        """Record how each ended task went: its result, its stop, or its error (a task that failed
        after a forced stop or a kill counts as stopped)."""
        for ref in done:
            pid = self.refs[ref]
            try:
                out = self.ray.get(ref)
                if self.pool is not None:
                    self.pool.release(ref)
            except Exception as exc:  # noqa: BLE001 - re-raised below after siblings finish
                if self.pool is not None:
                    self.pool.release(ref, exc)
                if self.forced is not None or self.handle.killed:
                    self.stopped[pid] = self.forced or {"requested_by": self.handle.killed}
                    self.cut_short.append(pid)
                else:
                    self.errors.append((pid, exc))
                continue
            if isinstance(out, SegmentStopped):
                self.stopped[pid] = out.request
            else:
                self.results[pid] = out

    def cancel_stalled(self, pending: list[Any]) -> list[Any]:
        """Cancel the partitions in flight that the watchdog finds stalled; each goes back to the front
        of the queue while it has retries left, else it ends with its StalledPartitionError.  Returns
        the refs still in flight."""
        by_pid = {self.refs[ref]: ref for ref in pending}
        stalled = self.watchdog.stalled(list(by_pid))
        for pid in stalled:
            ref = by_pid.pop(pid)
            if self.pool is not None:
                self.pool.discard(ref)  # the actor is killed; a new one starts for the next partition
            else:
                try:
                    self.ray.cancel(ref, force=True, recursive=True)
                except Exception as exc:  # noqa: BLE001 - it ended on its own meanwhile
                    log.debug("cancel of a stalled partition: %s", exc)
            try:
                self.ray.wait([ref], timeout=15)
            except Exception as exc:  # noqa: BLE001 - Ray shut down: nothing left to wait for
                log.debug("wait after a stall: %s", exc)
            del self.refs[ref]
            error = self.watchdog.cancelled(pid)
            if error is None:
                self.queue.insert(0, pid)
            else:
                self.errors.append((pid, error))
        if stalled:
            self.handle.track(self.ray, list(self.refs))
        return list(by_pid.values())

    def check_forced_stop(self) -> None:
        """Cancel the in-flight tasks when the job's stop request is a forced one."""
        from airflow_provider_dj.engine.jobdir.stop_control import read_stop_request

        request = read_stop_request(self.job_dir)
        if request is not None and request.get("force"):
            self.forced, self.forced_at = request, time.monotonic()
            self.handle.cancel(f"forced stop requested by {request.get('requested_by')}", kill=False)

    def forced_wait_over(self, pending: list[Any]) -> bool:
        """After a forced stop's cancel, whether to stop waiting for ``pending``: a force-cancelled task
        ends within moments, but one that does not is given up on after ``FORCED_STOP_WAIT_S`` seconds
        (and counted as stopped), so the stop always ends the dispatch."""
        if self.forced is None or time.monotonic() - self.forced_at < FORCED_STOP_WAIT_S:
            return False
        log.warning(
            "%d cancelled Ray task(s) still running %.0fs after the forced stop", len(pending), FORCED_STOP_WAIT_S
        )
        for ref in pending:
            self.stopped[self.refs[ref]] = self.forced
            self.cut_short.append(self.refs[ref])
        return True

    def report_forced_stop(self) -> None:
        """``partition_stopped`` for each partition the forced stop ended, which cannot say so itself."""
        if self.forced is None or not self.cut_short:
            return
        from airflow_provider_dj.engine.jobdir.stop_report import report_stopped_partitions

        try:
            report_stopped_partitions(
                self.job_dir,
                self.segment_index,
                sorted(set(self.cut_short)),
                self.forced,
                note="ended by a forced stop",
                event_defaults=self.event_defaults,
            )
        except Exception as exc:  # noqa: BLE001 - the report must not turn the stop into a failure
            log.warning("could not report the partitions the forced stop ended: %s", exc)

    def wait_all(self, *, poll_s: float, say: Callable[[str], None], rows_by_partition: dict[int, int] | None) -> None:
        """Submit and wait until every partition has ended, saying progress as tasks end (else every
        30 s).  Raises DispatchKilledError on a kill; whatever escapes cancels the tasks still running.
        The pool is shut down on the way out in every case."""
        pending = self.submit(self.limit)
        t0 = last_line = time.perf_counter()
        ok = False
        try:
            while pending:
                done, pending = self.ray.wait(pending, num_returns=1, timeout=poll_s)
                self.collect(done)
                if self.handle.killed and self.forced is None:
                    raise DispatchKilledError(
                        f"segment {self.segment_index}: partitions {self.partition_ids} killed "
                        f"({self.handle.killed}); their Ray tasks were cancelled"
                    )
                if pending and self.forced is None:
                    pending = self.cancel_stalled(list(pending))
                if self.queue and self.forced is None and len(pending) < self.limit:
                    pending = list(pending) + self.submit(self.limit - len(pending))
                if pending and self.forced is None:
                    self.check_forced_stop()
                elif pending and self.forced_wait_over(list(pending)):
                    pending = []
                now = time.perf_counter()
                if done or now - last_line >= 30:
                    last_line = now
                    say(
                        progress_line(
                            self.segment_index,
                            self.partition_ids,
                            self.results,
                            self.errors,
                            rows_by_partition,
                            now - t0,
                        )
                    )
            for pid in self.queue:  # never submitted: a forced stop came first
                self.stopped[pid] = self.forced or {"requested_by": "forced stop"}
                self.cut_short.append(pid)
            self.report_forced_stop()
            ok = True
        finally:
            if not ok and pending and not self.handle.killed:
                self.handle.cancel("the waiting task ended early")
                self.handle.wait_ended()
            if self.pool is not None:
                self.pool.shutdown()  # the group's lifetime ends here: its models and GPU shares are released

    def results_or_raise(self) -> list[SegmentResult]:
        """The partitions' results in their order; PartitionFailedError for the first failure, else
        StopRequested (carrying the completed results) when any partition stopped."""
        from airflow_provider_dj.engine.jobdir.stop_control import StopRequested

        results, partition_ids = self.results, self.partition_ids
        if self.errors:
            pid, exc = self.errors[0]
            cause = getattr(exc, "cause", None) or exc
            failure = PartitionFailedError(f"partition {pid} failed in segment {self.segment_index}: {cause}")
            failure.cause = cause  # the op's own exception (a failure-rate guard trip is not worth a retry)
            raise failure from exc
        if self.stopped:
            request = self.forced or next(iter(self.stopped.values()))
            exc = StopRequested(self.job_dir, request, partition_ids=sorted(self.stopped))
            exc.completed = [results[pid] for pid in partition_ids if pid in results]
            raise exc
        return [results[pid] for pid in partition_ids]


class PartitionFailedError(DJError, RuntimeError):
    """A partition of the group failed; ``cause`` is the exception its op raised."""

    cause: BaseException | None = None


def progress_line(
    segment_index: int,
    partition_ids: list[int],
    results: Mapping[int, SegmentResult],
    errors: Sized,
    rows_by_partition: Mapping[int, int] | None,
    elapsed: float,
) -> str:
    """'segment 0: 3/4 partitions (750/1,000 rows) done, 0 failed, 2.1s, 357 rows/s, ETA 0.7s'."""
    line = f"segment {segment_index}: {len(results)}/{len(partition_ids)} partitions"
    if rows_by_partition:
        total = sum(rows_by_partition.get(p, 0) for p in partition_ids)
        done = sum(rows_by_partition.get(p, 0) for p in results)
        line += f" ({done:,}/{total:,} rows)"
        if done and elapsed > 0:
            rate = done / elapsed
            line += f" done, {len(errors)} failed, {elapsed:.1f}s, {rate:,.0f} rows/s, ETA {(total - done) / rate:.1f}s"
            return line
    return line + f" done, {len(errors)} failed, {elapsed:.1f}s"


def _still_running(ray: Any, refs: list[Any]) -> list[Any]:
    """The refs whose tasks have not finished.  A finished task has nothing to cancel, and Ray's force
    cancel of a task whose reply is on its way can fail a check inside Ray's core worker, which ends
    the whole driver process: only the unfinished ones are cancelled."""
    if not refs:
        return []
    try:
        _ready, not_ready = ray.wait(refs, num_returns=len(refs), timeout=0, fetch_local=False)
    except Exception as exc:  # noqa: BLE001 - Ray shutting down: cancel what we know of
        log.debug("ready check before cancel: %s", exc)
        return list(refs)
    return list(not_ready)
