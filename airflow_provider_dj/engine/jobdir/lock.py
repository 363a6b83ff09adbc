"""One runner per job: ``metadata/runner.lock`` names the run that owns a job.

Two DAG runs (or CLI processes) working on the same job directory at once
would race on checkpoints and the export, so the ``validate`` task takes the
lock and every partition task refreshes it (a heartbeat).  Another owner is
refused with the holder's identity (host, pid, Airflow run id, start time).

A lock is stale — and is taken over — when its holder is provably gone: the
same host and the holder pid no longer exists (a crashed CLI run), or its
heartbeat is older than ``DJ_LOCK_STALE_S`` seconds (default 600; a failed
Airflow run stops heartbeating).  The same owner (a retried task, a cleared
run) always passes.  The lock is released when the export completes, and
when a task of the owning run fails for good (its on_failure_callback), so
a new run can resume a failed job at once.

Taking the lock is check-then-write, so two runners starting at the same
moment could both find the job free.  On a local work dir every change of
the lock (take, refresh, release) runs under an exclusive ``flock`` of the
lock's directory, so exactly one of them wins and the other is refused
naming the winner.  Object stores have no such lock: there the lock is read
back after writing, and a runner that finds someone else's lock there is
refused (a narrower window, not a closed one).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import time

from airflow_provider_dj import settings
from airflow_provider_dj.core import fs as storage
from airflow_provider_dj.core.errors import RefusedError
from airflow_provider_dj.core.write_roots import check_write
from airflow_provider_dj.engine.jobdir.layout import RUNNER_LOCK

LOCK_REL = RUNNER_LOCK


class JobLockedError(RefusedError, RuntimeError):
    pass


def default_stale_seconds() -> float:
    return float(settings.get("lock_stale_s"))


def owner_identity(airflow_run_id: str | None, pid: int | None = None, *, run_pid: int | None = None) -> dict:
    """Who is running.  ``dj-airflow run`` passes its own pid as ``run_pid``: it lives
    as long as the whole run, so its death proves the run is gone; a scheduler
    task's pid (the default, or ``pid``) does not (each task is a short-lived process)."""
    the_pid = run_pid or pid or os.getpid()
    return {
        "host": socket.gethostname(),
        "pid": the_pid,
        "pid_start": _pid_start_time(the_pid),
        "pid_is_run": bool(run_pid),
        "airflow_run_id": airflow_run_id,
        "started_at": time.time(),
        "heartbeat": time.time(),
    }


def owner_key(owner: dict) -> str:
    return owner.get("airflow_run_id") or f"{owner.get('host')}:{owner.get('pid')}"


def _path(job_dir: str) -> str:
    return storage.join(job_dir, *LOCK_REL.split("/"))


def read_lock(job_dir: str) -> dict | None:
    try:
        return json.loads(storage.read_bytes(_path(job_dir)))
    except FileNotFoundError:
        return None
    except ValueError:
        return {"corrupt": True, "heartbeat": 0}


@contextlib.contextmanager
def _guard(job_dir: str):
    """Serialise lock changes of one job dir across processes (local paths; a no-op for URLs)."""
    if storage.is_url(job_dir):
        yield
        return
    lock_dir = storage.dirname(_path(job_dir))
    check_write(lock_dir)
    os.makedirs(lock_dir, exist_ok=True)
    fd = os.open(lock_dir, os.O_RDONLY)  # flock on the directory itself: no extra file in the job dir
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the flock


def pid_start_time(pid: int) -> int | None:
    """Kernel start time of a process (clock ticks since boot), to tell a reused pid from its holder."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return int(fh.read().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def pid_alive(pid: int, start_time: int | None = None) -> bool:
    """Whether ``pid`` runs on this host and, given its start time, is still that same process."""
    if start_time is not None:
        now = pid_start_time(pid)
        if now is not None and now != start_time:
            return False  # the pid was reused by another process
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


_pid_start_time = pid_start_time  # the names older callers use
_pid_alive = pid_alive


def is_stale(lock: dict, stale_after: float | None = None) -> tuple[bool, str]:
    stale_after = default_stale_seconds() if stale_after is None else stale_after
    if lock.get("corrupt"):
        return True, "unreadable lock file"
    if (
        lock.get("host") == socket.gethostname()
        and lock.get("pid")
        and not _pid_alive(int(lock["pid"]), lock.get("pid_start"))
    ):
        # A dead process on this host cannot be working — unless it was only
        # one short-lived task process of a scheduler-driven Airflow run.
        if lock.get("pid_is_run") or not lock.get("airflow_run_id"):
            return True, f"holder pid {lock['pid']} on this host is gone"
    age = time.time() - float(lock.get("heartbeat") or 0)
    if age > stale_after:
        return True, f"no heartbeat for {age:.0f}s (> {stale_after:.0f}s)"
    return False, ""


def describe(lock: dict) -> str:
    started = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(float(lock.get("started_at") or 0)))
    return (
        f"host={lock.get('host')} pid={lock.get('pid')} airflow_run_id={lock.get('airflow_run_id')} "
        f"started={started}Z last_heartbeat={time.time() - float(lock.get('heartbeat') or 0):.0f}s ago"
    )


def check(job_dir: str, owner: dict) -> dict | None:
    """Raise JobLockedError if another live owner holds the job; return the lock seen (read-only)."""
    lock = read_lock(job_dir)
    if lock and owner_key(lock) != owner_key(owner):
        stale, why = is_stale(lock)
        if not stale:
            raise JobLockedError(
                f"job {storage.basename(job_dir)} is being run by another runner ({describe(lock)}); wait for it, "
                f"stop it, or after a crash wait {default_stale_seconds():.0f}s for the lock to go stale "
                f"(DJ_LOCK_STALE_S) — `dj-airflow unlock` removes it by hand"
            )
    return lock


def acquire(job_dir: str, owner: dict) -> str:
    """Take (or keep, or take over a stale) lock; returns a line saying which.

    Atomic against other runners of the same job (see the module docstring).
    """
    with _guard(job_dir):
        lock = check(job_dir, owner)
        note = "acquired"
        if lock and owner_key(lock) == owner_key(owner):
            owner = dict(owner, started_at=lock.get("started_at", owner["started_at"]))
            note = "re-acquired by the same owner"
        elif lock:
            note = f"took over a stale lock ({is_stale(lock)[1]}; was {describe(lock)})"
        storage.atomic_write_bytes(_path(job_dir), json.dumps(owner).encode())
        if storage.is_url(job_dir):
            _confirm(job_dir, owner)
    return note


def _confirm(job_dir: str, owner: dict) -> None:
    """Read the lock back: a runner whose write lost a race (object stores) is refused."""
    seen = read_lock(job_dir)
    if seen is None or owner_key(seen) != owner_key(owner):
        raise JobLockedError(
            f"job {storage.basename(job_dir)} was taken by another runner at the same moment "
            f"({describe(seen) if seen else 'its lock vanished'}); wait for it or stop it"
        )


def heartbeat(job_dir: str, airflow_run_id: str | None) -> None:
    """Refresh the lock if this run owns it; refuse if another live runner does."""
    me = owner_identity(airflow_run_id)
    with _guard(job_dir):
        lock = check(job_dir, me)
        if lock is None or owner_key(lock) != owner_key(me):
            return  # no lock (e.g. completed job) or stale: validate takes locks, tasks only refresh their own
        lock["heartbeat"] = time.time()
        storage.atomic_write_bytes(_path(job_dir), json.dumps(lock).encode())


def release(job_dir: str, airflow_run_id: str | None) -> None:
    """Remove the lock if this run holds it; another runner's lock is never removed."""
    if not storage.is_url(job_dir) and not os.path.isdir(storage.dirname(_path(job_dir))):
        return  # nothing to release (and nothing to create just to lock it)
    with _guard(job_dir):
        lock = read_lock(job_dir)
        if lock and owner_key(lock) == owner_key(owner_identity(airflow_run_id)):
            storage.remove(_path(job_dir))


def force_unlock(job_dir: str) -> dict | None:
    """Remove whatever lock there is (``dj-airflow unlock``); under the guard, so a heartbeat
    that read the lock just before cannot write it back just after."""
    with _guard(job_dir):
        lock = read_lock(job_dir)
        storage.remove(_path(job_dir))
    return lock
