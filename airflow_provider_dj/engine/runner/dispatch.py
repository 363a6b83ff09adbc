"""Where a group's partitions run: Ray tasks, a local process pool, or this process.

Every dispatcher runs the same partition task (``run_segment`` for one
partition of one segment) and reports the same way: each partition of the
group runs to its end even if a sibling fails, then the first error is
raised as ``PartitionFailedError``; a graceful stop comes back as data and
is raised as ``StopRequested`` once all have ended; a forced stop or a kill
cancels what still runs.  So checkpoints, events and exports are the same
whichever dispatcher ran them.  ``Dispatcher`` is that contract, as the
runner's steps (engine/runner/steps.py) call it.
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from typing import TYPE_CHECKING, Any, Callable, Protocol

from airflow_provider_dj.engine.execution.ray_dispatch import (
    DispatchHandle,
    PartitionFailedError,
    progress_line,
    run_partitions,
    segment_task,
)
from airflow_provider_dj.engine.execution.segment_result import SegmentOutcome, SegmentResult, SegmentStopped
from airflow_provider_dj.engine.planning.execution_group import ExecutionGroup

if TYPE_CHECKING:
    from airflow_provider_dj.engine.execution.watchdog import Watchdog

log = logging.getLogger(__name__)

Progress = Callable[[str], None]
#: One partition task's arguments: job dir, segment, partition, try number, event defaults, op modules.
TaskArgs = tuple[str, int, int, "int | None", dict[str, Any], tuple[str, ...]]
#: How a partition ended here: its result, its stop, or the exception it raised.
Ended = SegmentOutcome | Exception


class Dispatcher(Protocol):
    """Runs one segment for the partitions of one execution group, and reports as the module says.

    ``run`` returns one ``SegmentResult`` per partition, in the group's order; ``cancel`` ends the
    group's work from another thread (Airflow's ``on_kill``) and returns (calls made, still running
    after the wait); ``close`` releases what the dispatcher holds across groups (a process pool)."""

    def run(
        self,
        job_dir: str,
        segment_index: int,
        group: ExecutionGroup,
        *,
        try_number: int | None,
        event_defaults: dict[str, Any] | None,
        on_progress: Progress,
        rows_by_partition: dict[int, int],
    ) -> list[SegmentResult]: ...

    def cancel(self, reason: str) -> tuple[int, int]: ...

    def close(self) -> None: ...


class RayDispatcher:
    """Partitions as Ray tasks (or a segment's actor pool) on the cluster ``connect()`` returns.

    ``connect`` is called at the first group, after the runner lock's heartbeat: a runner refused
    by the lock never starts or joins a cluster."""

    def __init__(self, connect: Callable[[], Any], *, num_cpus: float = 1) -> None:
        self._connect = connect
        self.num_cpus = num_cpus
        self.handle: DispatchHandle | None = None

    def run(
        self,
        job_dir: str,
        segment_index: int,
        group: ExecutionGroup,
        *,
        try_number: int | None,
        event_defaults: dict[str, Any] | None,
        on_progress: Progress,
        rows_by_partition: dict[int, int],
    ) -> list[SegmentResult]:
        ray = self._connect()
        self.handle = DispatchHandle()
        return run_partitions(
            ray,
            job_dir,
            segment_index,
            list(group.partition_ids),
            try_number=try_number,
            event_defaults=event_defaults,
            num_cpus=self.num_cpus,
            on_progress=on_progress,
            rows_by_partition=rows_by_partition,
            handle=self.handle,
            max_in_flight=group.max_in_flight,  # resolved by the first step (docs/gpu_planning.md)
            actor_resources=group.actor_resources,  # per-op actor plan, for stateful ops' actor pools
        )

    def cancel(self, reason: str) -> tuple[int, int]:
        """Cancel the running group's Ray work; (calls made, still running after the wait)."""
        handle = self.handle
        if handle is None:
            return 0, 0
        n = handle.cancel(reason)
        return n, handle.wait_ended()

    def close(self) -> None:
        """Nothing to release: the cluster belongs to whoever started it."""


class LocalDispatcher:
    """Partitions in this process (``workers`` <= 1) or on a pool of ``workers`` local processes.

    The pool's processes are started fresh (spawn), not forked, so a caller's threads and open
    connections never leak into a worker; it lives until :meth:`close`, across the job's segments."""

    def __init__(self, workers: int = 1, *, poll_s: float = 0.5) -> None:
        self.workers = max(1, int(workers))
        self.poll_s = poll_s
        self._pool: ProcessPoolExecutor | None = None

    def run(
        self,
        job_dir: str,
        segment_index: int,
        group: ExecutionGroup,
        *,
        try_number: int | None,
        event_defaults: dict[str, Any] | None,
        on_progress: Progress,
        rows_by_partition: dict[int, int],
    ) -> list[SegmentResult]:
        from airflow_provider_dj.engine.execution.actor_pool import op_modules
        from airflow_provider_dj.engine.execution.watchdog import watchdog_for
        from airflow_provider_dj.engine.storage.context import JobContext

        partition_ids = list(group.partition_ids)
        modules = tuple(op_modules(JobContext(job_dir).plan))
        args: list[TaskArgs] = [
            (job_dir, segment_index, pid, try_number, dict(event_defaults or {}), modules) for pid in partition_ids
        ]
        watchdog = watchdog_for(job_dir, segment_index, try_number=try_number, event_defaults=event_defaults)
        t0 = time.perf_counter()
        # A hung call cannot be ended from inside its own process: with the watchdog on, even one
        # worker is a process of the pool.
        if (self.workers == 1 or len(partition_ids) == 1) and not watchdog.policy.enabled:
            outcomes: dict[int, Ended] = {}
            for a in args:
                try:  # the task called here, not through a wrapper: a short call path to the op
                    outcomes[a[2]] = segment_task(*a)
                except Exception as exc:  # noqa: BLE001 - every sibling runs to its end; the first error is raised after
                    outcomes[a[2]] = exc
                on_progress(_line(segment_index, partition_ids, outcomes, rows_by_partition, t0))
        else:
            run = _PoolRun(self, job_dir, segment_index, partition_ids, args, watchdog)
            outcomes = run.wait_all(on_progress, rows_by_partition, t0)
        return _results(job_dir, segment_index, partition_ids, outcomes)

    def _pool_now(self) -> ProcessPoolExecutor:
        if self._pool is None:
            import multiprocessing

            self._pool = ProcessPoolExecutor(
                max_workers=self.workers,
                mp_context=multiprocessing.get_context("spawn"),
                initializer=_ignore_terminal_interrupt,
            )
        return self._pool

    def _kill(self, reason: str) -> None:
        """End the pool's worker processes now: what they held in memory is lost, their commits stay."""
        pool, self._pool = self._pool, None
        if pool is None:
            return
        procs = list(getattr(pool, "_processes", {}).values())
        for proc in procs:
            proc.kill()
        pool.shutdown(wait=True, cancel_futures=True)
        log.warning("killed %d local worker process(es) (%s)", len(procs), reason)

    def cancel(self, reason: str) -> tuple[int, int]:
        n = len(getattr(self._pool, "_processes", {}) or {})
        self._kill(reason)
        return n, 0

    def close(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)


class _PoolRun:
    """One group's partitions on the dispatcher's pool: submit every one, wait for all.  A forced stop
    request kills the pool's workers; so does a stalled partition (a pool cannot end one worker), and
    then the partitions that were in flight beside it run again from their checkpoints."""

    def __init__(
        self,
        dispatcher: LocalDispatcher,
        job_dir: str,
        segment_index: int,
        partition_ids: list[int],
        args: list[TaskArgs],
        watchdog: Watchdog,
    ) -> None:
        self.dispatcher, self.job_dir, self.segment_index = dispatcher, job_dir, segment_index
        self.partition_ids, self.watchdog = partition_ids, watchdog
        self.args = {a[2]: a for a in args}
        self.futures: dict[Future[SegmentOutcome], int] = {}
        self.outcomes: dict[int, Ended] = {}

    def submit(self, pid: int) -> None:
        self.watchdog.submitted(pid)
        self.futures[self.dispatcher._pool_now().submit(segment_task, *self.args[pid])] = pid

    def wait_all(self, on_progress: Progress, rows_by_partition: dict[int, int], t0: float) -> dict[int, Ended]:
        for pid in self.args:
            self.submit(pid)
        try:
            return self._wait(on_progress, rows_by_partition, t0)
        except KeyboardInterrupt:  # a library caller's Ctrl-C: the workers ignore it (see _pool_now)
            self.dispatcher._kill("KeyboardInterrupt")
            raise

    def _wait(self, on_progress: Progress, rows_by_partition: dict[int, int], t0: float) -> dict[int, Ended]:
        from airflow_provider_dj.engine.jobdir.stop_control import read_stop_request

        while self.futures:
            done, _ = wait(set(self.futures), timeout=self.dispatcher.poll_s, return_when=FIRST_COMPLETED)
            for fut in done:
                self.outcomes[self.futures.pop(fut)] = _ended(fut)
            if done:
                on_progress(_line(self.segment_index, self.partition_ids, self.outcomes, rows_by_partition, t0))
            if self.futures:
                self.restart_stalled()
            request = read_stop_request(self.job_dir) if self.futures else None
            if request is not None and request.get("force"):
                self.dispatcher._kill(f"forced stop requested by {request.get('requested_by')}")
                for pid in self.futures.values():
                    self.outcomes[pid] = SegmentStopped(pid, self.segment_index, request)
                self.futures.clear()
        return self.outcomes

    def restart_stalled(self) -> None:
        stalled = self.watchdog.stalled(list(self.futures.values()))
        if not stalled:
            return
        in_flight = list(self.futures.values())
        self.dispatcher._kill(f"partition(s) {stalled} stalled")
        self.futures.clear()
        for pid in in_flight:
            error = self.watchdog.cancelled(pid) if pid in stalled else None
            if error is not None:
                self.outcomes[pid] = error
            else:
                self.submit(pid)


def _ignore_terminal_interrupt() -> None:
    """A pool worker ignores SIGINT.  A terminal's Ctrl-C goes to its whole foreground process group,
    workers included; the driver decides what it means (``dj-airflow run``: a graceful stop first, so
    the workers finish their op and commit) and ends the workers itself when it must, instead of
    each dying mid-op with a KeyboardInterrupt."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _ended(fut: Future[SegmentOutcome]) -> Ended:
    """A pool task's outcome, or the exception it raised."""
    try:
        return fut.result()
    except Exception as exc:  # noqa: BLE001 - every sibling runs to its end; the first error is raised after
        return exc


def _line(
    segment_index: int,
    partition_ids: list[int],
    outcomes: dict[int, Ended],
    rows_by_partition: dict[int, int],
    t0: float,
) -> str:
    results = {pid: o for pid, o in outcomes.items() if isinstance(o, SegmentResult)}
    errors = [(pid, o) for pid, o in outcomes.items() if isinstance(o, Exception)]
    return progress_line(segment_index, partition_ids, results, errors, rows_by_partition, time.perf_counter() - t0)


def _results(
    job_dir: str, segment_index: int, partition_ids: list[int], outcomes: dict[int, Ended]
) -> list[SegmentResult]:
    """The group's results in partition order, or the first error / the stop, as Ray dispatch raises them."""
    from airflow_provider_dj.engine.jobdir.stop_control import StopRequested

    for pid in partition_ids:
        exc = outcomes[pid]
        if isinstance(exc, Exception):
            failure = PartitionFailedError(f"partition {pid} failed in segment {segment_index}: {exc}")
            failure.cause = exc
            raise failure from exc
    stopped = [o for pid in partition_ids if isinstance(o := outcomes[pid], SegmentStopped)]
    results = [o for pid in partition_ids if isinstance(o := outcomes[pid], SegmentResult)]
    if stopped:
        stop = StopRequested(job_dir, stopped[0].request, partition_ids=sorted(o.partition_id for o in stopped))
        stop.completed = results
        raise stop
    return results
