"""Running independent tasks: one by one in this process, on this process's threads, or as Ray tasks.

A ``RunTasks`` maps a function over argument tuples and returns the results in order; the planner's
indexing and hashing tasks and a sharded global step's tasks are written against it, so the same tasks
run wherever the caller has cores: on a Ray cluster the caller is connected to, or on this machine.
A task returns values and never relies on mutating its arguments (a Ray task gets copies).
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, TypeVar

from airflow_provider_dj.core.errors import DJError

RunTasks = Callable[[Callable[..., Any], list[tuple]], list[Any]]
F = TypeVar("F", bound=Callable[..., Any])


def run_in_process(fn: Callable[..., Any], args_list: list[tuple]) -> list[Any]:
    """Every task here, one after another."""
    return [fn(*a) for a in args_list]


def run_on_threads(fn: Callable[..., Any], args_list: list[tuple], workers: int | None = None) -> list[Any]:
    """The tasks on ``workers`` threads (default: one per core of this machine; one task: in this thread).
    Worth it for tasks that spend their time in code that releases the GIL (reads, NumPy, Arrow, xxhash)."""
    workers = min(len(args_list), workers or os.cpu_count() or 1)
    if workers <= 1:
        return run_in_process(fn, args_list)
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="dj-task") as pool:
        return list(pool.map(lambda a: fn(*a), args_list))


#: The attribute ``in_fresh_worker`` sets on a task function.
FRESH_WORKER = "_dj_fresh_worker"


def in_fresh_worker(fn: F) -> F:
    """Mark ``fn`` as a task whose memory is bounded by a budget (a key shard of a global step): as a Ray
    task it runs in a worker of its own that exits after it (``max_calls=1``), so neither what an earlier
    task left in a reused worker's heap nor what this one leaves counts against another task's budget."""
    setattr(fn, FRESH_WORKER, True)
    return fn


def ray_task_runner(fn: Callable[..., Any], args_list: list[tuple]) -> list[Any]:
    """The tasks as Ray tasks of the Ray this process is connected to (a task whose worker dies is retried
    by Ray).  A task that raised one of this package's errors re-raises it here as itself, so its message
    (the file, row or setting to fix) is what the caller reports, not Ray's wrapper around it."""
    import ray

    if getattr(fn, FRESH_WORKER, False):
        remote = ray.remote(num_cpus=1, max_retries=3, max_calls=1)(fn)
    else:
        remote = ray.remote(num_cpus=1, max_retries=3)(fn)
    refs = [remote.remote(*args) for args in args_list]
    try:
        return ray.get(refs)
    except ray.exceptions.RayTaskError as exc:
        cause = getattr(exc, "cause", None)
        if isinstance(cause, DJError):
            raise cause from None
        raise


def default_task_runner() -> RunTasks:
    """Ray tasks where this process is connected to Ray, else one task after another in this process."""
    try:
        import ray
    except ImportError:  # pragma: no cover - ray is a dependency
        return run_in_process
    return ray_task_runner if ray.is_initialized() else run_in_process


__all__ = [
    "RunTasks",
    "default_task_runner",
    "in_fresh_worker",
    "ray_task_runner",
    "run_in_process",
    "run_on_threads",
]
