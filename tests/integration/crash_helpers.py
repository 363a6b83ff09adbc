"""Helpers for crash tests: run ``dj-airflow`` or the engine's driver as a separate process session.

A ``kill_run`` fault SIGKILLs every process of the run's session, so each
run is started with ``start_new_session=True``: its session id is its pid,
and the session holds exactly the run (the CLI or the engine's driver
``python -m airflow_provider_dj.engine.runner``, Ray and its workers).
Whatever the outcome, every process still in that session is SIGKILLed
before the helper returns, so no test leaves processes behind.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass

from airflow_provider_dj.engine.jobdir.events import read_events

DJ_AIRFLOW = os.path.join(os.path.dirname(sys.executable), "dj-airflow")
#: the engine's own driver: one job in one process, no Airflow (engine/runner/__main__.py)
ENGINE_DRIVER = [sys.executable, "-m", "airflow_provider_dj.engine.runner"]


@dataclass
class CliRun:
    rc: int
    output: str
    pid: int
    started_at: float
    wall_s: float

    @property
    def killed(self) -> bool:
        return self.rc == -signal.SIGKILL


def _session_members(sid: int) -> list[tuple[int, str]]:
    """(pid, state) of every process whose session id is ``sid``."""
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        try:
            if int(fields[3]) == sid:  # stat field 6: session id (fields[0] is field 3, the state)
                out.append((int(name), fields[0]))
        except (IndexError, ValueError):
            continue
    return out


def live_session_members(sid: int) -> list[int]:
    return [pid for pid, state in _session_members(sid) if state not in ("Z", "X")]


def kill_session(sid: int, timeout: float = 20.0) -> list[int]:
    """SIGKILL every live process of session ``sid`` and wait until none is left; returns those killed."""
    killed: list[int] = []
    deadline = time.monotonic() + timeout
    while True:
        live = live_session_members(sid)
        if not live:
            return killed
        if time.monotonic() > deadline:
            raise AssertionError(f"processes of session {sid} survive SIGKILL: {live}")
        for pid in live:
            try:
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
            except ProcessLookupError:
                pass
        time.sleep(0.1)


def run_cli(args: list[str], log_path: str, *, env_extra: dict | None = None, timeout: float = 240.0) -> CliRun:
    """Run ``dj-airflow ARGS`` in its own session; output goes to ``log_path`` (and is returned)."""
    return run_session([DJ_AIRFLOW, *args], log_path, env_extra=env_extra, timeout=timeout)


def run_engine(args: list[str], log_path: str, *, env_extra: dict | None = None, timeout: float = 240.0) -> CliRun:
    """Run the engine's driver with ``ARGS`` (a recipe and its flags) in its own session, like :func:`run_cli`."""
    return run_session([*ENGINE_DRIVER, *args], log_path, env_extra=env_extra, timeout=timeout)


def run_session(cmd: list[str], log_path: str, *, env_extra: dict | None = None, timeout: float = 240.0) -> CliRun:
    """Run ``cmd`` in its own session; output goes to ``log_path`` (and is returned)."""
    env = dict(os.environ)
    env.pop("RAY_ADDRESS", None)  # the CLI starts its own private Ray
    env.update(env_extra or {})
    t0 = time.time()
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            cmd,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
        )
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            rc = None
        finally:
            # Leftovers of a killed (or hung) run: the whole session goes.
            kill_session(proc.pid)
            if proc.poll() is None:
                proc.wait(timeout=30)
    with open(log_path, encoding="utf-8", errors="replace") as fh:
        output = fh.read()
    if rc is None:
        raise AssertionError(f"{' '.join(cmd)} did not finish in {timeout}s; log tail:\n{output[-4000:]}")
    return CliRun(rc=rc, output=output, pid=proc.pid, started_at=t0, wall_s=time.time() - t0)


def write_faults(job_dir: str, faults: list[dict]) -> None:
    os.makedirs(job_dir, exist_ok=True)
    with open(os.path.join(job_dir, "_fault_injection.json"), "w") as fh:
        json.dump(faults, fh)


def fired(job_dir: str) -> list[str]:
    d = os.path.join(job_dir, "_fault_injection.fired")
    return sorted(os.listdir(d)) if os.path.isdir(d) else []


def events_since(job_dir: str, since: float, event_type: str | None = None, **match) -> list[dict]:
    """Events written at or after ``since`` (a time.time()), optionally filtered by field values."""
    return [
        e
        for e in read_events(job_dir, event_type)
        if e.get("timestamp", 0) >= since and all(e.get(k) == v for k, v in match.items())
    ]


def tail(text: str, n: int = 6000) -> str:
    return text[-n:]
