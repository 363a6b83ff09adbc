"""Where a group's partitions run: Ray tasks, a local process pool, or this process.

Every dispatcher runs the same partition task (``run_segment`` for one
partition of one segment) and reports the same way: each partition of the
group runs to its end even if a sibling fails, then the first error is
raised as ``PartitionFailedError``; a graceful stop comes back as data and
is raised as ``StopRequested`` once all have ended; a forced stop or a kill
cancels what still runs.  So checkpoints, events and exports are the same
whichever dispatcher ran them.
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from typing import Any, Callable

from airflow_provider_dj.engine.execution.ray_dispatch import (
    DispatchHandle,
    PartitionFailedError,
    progress_line,
    run_partitions,
    segment_task,
)

log = logging.getLogger(__name__)

Progress = Callable[[str], None]


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
        partition_ids: list[int],
        *,
        try_number: int | None,
        event_defaults: dict | None,
        on_progress: Progress,
        rows_by_partition: dict[int, int],
        max_in_flight: int | None,
        actor_resources: dict | None,
    ) -> list[dict]:
        ray = self._connect()
        self.handle = DispatchHandle()
        return run_partitions(
            ray,
            job_dir,
            segment_index,
            partition_ids,
            try_number=try_number,
            event_defaults=event_defaults,
            num_cpus=self.num_cpus,
            on_progress=on_progress,
            rows_by_partition=rows_by_partition,
            handle=self.handle,
            max_in_flight=max_in_flight,
            actor_resources=actor_resources,
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
        partition_ids: list[int],
        *,
        try_number: int | None,
        event_defaults: dict | None,
        on_progress: Progress,
        rows_by_partition: dict[int, int],
        max_in_flight: int | None = None,
        actor_resources: dict | None = None,
    ) -> list[dict]:
        from airflow_provider_dj.engine.execution.actor_pool import op_modules
        from airflow_provider_dj.engine.execution.watchdog import watchdog_for
        from airflow_provider_dj.engine.storage.context import JobContext

        modules = tuple(op_modules(JobContext(job_dir).plan))
        args = [(job_dir, segment_index, pid, try_number, dict(event_defaults or {}), modules) for pid in partition_ids]
        watchdog = watchdog_for(job_dir, segment_index, try_number=try_number, event_defaults=event_defaults)
        t0 = time.perf_counter()
        # A hung call cannot be ended from inside its own process: with the watchdog on, even one
        # worker is a process of the pool.
        if (self.workers == 1 or len(partition_ids) == 1) and not watchdog.policy.enabled:
            outcomes = {}
            for a in args:
                outcomes[a[2]] = _outcome(lambda a=a: segment_task(*a))
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

    def __init__(self, dispatcher: LocalDispatcher, job_dir, segment_index, partition_ids, args, watchdog) -> None:
        self.dispatcher, self.job_dir, self.segment_index = dispatcher, job_dir, segment_index
        self.partition_ids, self.watchdog = partition_ids, watchdog
        self.args = {a[2]: a for a in args}
        self.futures: dict[Future, int] = {}
        self.outcomes: dict[int, tuple[str, Any]] = {}

    def submit(self, pid: int) -> None:
        self.watchdog.submitted(pid)
        self.futures[self.dispatcher._pool_now().submit(segment_task, *self.args[pid])] = pid

    def wait_all(self, on_progress: Progress, rows_by_partition: dict[int, int], t0: float) -> dict:
        for pid in self.args:
            self.submit(pid)
        try:
            return self._wait(on_progress, rows_by_partition, t0)
        except KeyboardInterrupt:  # a library caller's Ctrl-C: the workers ignore it (see _pool_now)
            self.dispatcher._kill("KeyboardInterrupt")
            raise

    def _wait(self, on_progress: Progress, rows_by_partition: dict[int, int], t0: float) -> dict:
        from airflow_provider_dj.engine.jobdir.stop_control import read_stop_request

        while self.futures:
            done, _ = wait(set(self.futures), timeout=self.dispatcher.poll_s, return_when=FIRST_COMPLETED)
            for fut in done:
                self.outcomes[self.futures.pop(fut)] = _outcome(fut.result)
            if done:
                on_progress(_line(self.segment_index, self.partition_ids, self.outcomes, rows_by_partition, t0))
            if self.futures:
                self.restart_stalled()
            request = read_stop_request(self.job_dir) if self.futures else None
            if request is not None and request.get("force"):
                self.dispatcher._kill(f"forced stop requested by {request.get('requested_by')}")
                for pid in self.futures.values():
                    self.outcomes[pid] = ("stopped", request)
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
                self.outcomes[pid] = ("error", error)
            else:
                self.submit(pid)


def _ignore_terminal_interrupt() -> None:
    """A pool worker ignores SIGINT.  A terminal's Ctrl-C goes to its whole foreground process group,
    workers included; the driver decides what it means (``dj-airflow run``: a graceful stop first, so
    the workers finish their op and commit) and ends the workers itself when it must, instead of
    each dying mid-op with a KeyboardInterrupt."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _outcome(call: Callable[[], dict]) -> tuple[str, Any]:
    """('ok', result) / ('stopped', request) / ('error', exception) of one partition task."""
    try:
        out = call()
    except Exception as exc:  # noqa: BLE001 - every sibling runs to its end; the first error is raised after
        return "error", exc
    if out.get("stopped"):
        return "stopped", out["request"]
    return "ok", out


def _line(segment_index, partition_ids, outcomes, rows_by_partition, t0) -> str:
    results = {pid: o[1] for pid, o in outcomes.items() if o[0] == "ok"}
    errors = [(pid, o[1]) for pid, o in outcomes.items() if o[0] == "error"]
    return progress_line(segment_index, partition_ids, results, errors, rows_by_partition, time.perf_counter() - t0)


def _results(job_dir: str, segment_index: int, partition_ids: list[int], outcomes: dict) -> list[dict]:
    """The group's results in partition order, or the first error / the stop, as Ray dispatch raises them."""
    from airflow_provider_dj.engine.jobdir.stop_control import StopRequested

    errors = [(pid, outcomes[pid][1]) for pid in partition_ids if outcomes[pid][0] == "error"]
    if errors:
        pid, exc = errors[0]
        failure = PartitionFailedError(f"partition {pid} failed in segment {segment_index}: {exc}")
        failure.cause = exc
        raise failure from exc
    stopped = {pid: outcomes[pid][1] for pid in partition_ids if outcomes[pid][0] == "stopped"}
    if stopped:
        exc = StopRequested(job_dir, next(iter(stopped.values())), partition_ids=sorted(stopped))
        exc.completed = [outcomes[pid][1] for pid in partition_ids if outcomes[pid][0] == "ok"]  # type: ignore[attr-defined]
        raise exc
    return [outcomes[pid][1] for pid in partition_ids]
