"""The embedded local Ray head that scheduler tasks share (``RayHook`` with no address).

The first task starts one head (``ray start --head --block`` in a session of its own), guarded by
a file lock so parallel tasks do not start several, and records it in ``ray-head.json`` under
``DJ_RAY_STATE_DIR`` (default ``~/.cache/airflow-provider-dj``); every later task only connects.

A recorded head can die under the tasks: the OOM killer SIGKILLs its processes, and Ray's raylet
exits with its agents (``ray::DashboardAgent``, ``ray::RuntimeEnvAgent``) while the ``ray start``
process and the GCS live on, so the GCS port still answers.  Connecting to such a head waits about
60 s and fails, in every later try of every task.  So, under the lock, a task first checks the
recorded head (:func:`why_dead`: its process group alive, a raylet alive in its session, its GCS
accepting connections within a few seconds); a dead one is stopped (only its own processes, never
``ray stop``, which would end every Ray on the machine) and a new one started in its place.  A
head that is still starting is waited for, never judged dead; a head whose raylet and GCS are up is
always reused.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time

from airflow_provider_dj import settings
from airflow_provider_dj.core.errors import DJError
from airflow_provider_dj.hooks import ray_in_process

log = logging.getLogger(__name__)

#: What ``ray start --block`` prints once its node has registered with the GCS (then it blocks).
HEAD_STARTED = "Ray runtime started"

#: How long a started head's GCS may refuse connections before the head counts as dead.  A busy GCS
#: still accepts connections (the kernel does, from its listen backlog): a refusal this long means
#: no process listens.
GCS_PROBE_S = 5.0


class RayConnectionError(DJError, RuntimeError):
    pass


def _state_dir() -> str:
    return settings.get("ray_state_dir") or os.path.join(os.path.expanduser("~"), ".cache", "airflow-provider-dj")


def _head_file() -> str:
    return os.path.join(_state_dir(), "ray-head.json")


def _head_alive(address: str) -> bool:
    """True when something accepts a TCP connection at ``address`` within a second."""
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host or "127.0.0.1", int(port)), timeout=1.0):
            return True
    except OSError:
        return False


def _gcs_answers(address: str, within: float = GCS_PROBE_S) -> bool:
    deadline = time.monotonic() + within
    while True:
        if _head_alive(address):
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)


def _head_port() -> int:
    """DJ_RAY_HEAD_PORT if set; else 26379, or a free port when something else listens there
    (another state dir's head, another user's): a busy default must not make every task fail."""
    if settings.raw("ray_head_port"):
        return int(settings.raw("ray_head_port"))
    if not _head_alive("127.0.0.1:26379"):
        return 26379
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _read_record() -> dict | None:
    try:
        with open(_head_file()) as fh:
            record = json.load(fh)
        record["address"] = str(record["address"])
        return record
    except (FileNotFoundError, ValueError, KeyError, TypeError):
        return None


def local_head_record() -> dict | None:
    """The recorded head (``address``, ``pid``, ``ready``, ``started_at``), or None."""
    return _read_record()


def ensure_local_head(num_cpus: int | None = None, object_store_memory: int | None = None) -> str:
    """Start (once) and return the address of a local Ray head shared by all tasks on this machine.

    A recorded head that is dead (:func:`why_dead`) is stopped and replaced; the task log says so."""
    return _under_lock(_flags(num_cpus, object_store_memory), condemned=None)


def replace_local_head(
    record: dict, why: str, num_cpus: int | None = None, object_store_memory: int | None = None
) -> str:
    """Replace the head ``record`` names, which a task could not use (``why``), and return the new address.

    When another task replaced it first (the record names another process now), that head is
    checked as usual instead: one dead head is replaced once, however many tasks found it dead."""
    return _under_lock(_flags(num_cpus, object_store_memory), condemned=(record, why))


def _flags(num_cpus: int | None, object_store_memory: int | None) -> list[str]:
    flags = ["--include-dashboard=false", "--disable-usage-stats"]
    if num_cpus:
        flags.append(f"--num-cpus={int(num_cpus)}")
    if object_store_memory:
        flags.append(f"--object-store-memory={int(object_store_memory)}")
    return flags


def _under_lock(flags: list[str], condemned: tuple[dict, str] | None) -> str:
    import fcntl

    os.makedirs(_state_dir(), exist_ok=True)
    with open(os.path.join(_state_dir(), "ray-head.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        record = _read_record()
        why = None
        if record is not None:
            same = condemned is not None and _same_head(record, condemned[0])
            why = condemned[1] if same else why_dead(record)
            if why is None:
                return record["address"]
            log.warning("the embedded Ray head at %s is dead (%s): stopping what is left of it", record["address"], why)
            _stop_head_processes(record)
        ray_in_process.ensure_auth_token()  # made once, atomically, before `ray start` would write one
        address = _start_head(flags)
        if record is not None:
            log.warning(
                "the embedded Ray head at %s was dead (%s); started a new one at %s", record["address"], why, address
            )
        return address


def _same_head(a: dict, b: dict) -> bool:
    return (a.get("address"), a.get("pid"), a.get("started_at")) == (
        b.get("address"),
        b.get("pid"),
        b.get("started_at"),
    )


def why_dead(record: dict) -> str | None:
    """Why the recorded head cannot serve a task, or None when it is alive (or still starting and
    came up: it is waited for, up to the start-up timeout).  Called with the head lock held."""
    address, pid = record["address"], record.get("pid")
    if not pid:  # a record without a process: only its GCS can tell
        return None if _gcs_answers(address) else f"its GCS at {address} does not answer"
    pid = int(pid)
    if not _leader_alive(pid):
        return f"its process {pid} is gone"
    if not record.get("ready", True):
        # Its starter was killed while waiting (a task timeout), but the head runs on in its own
        # session: wait for it rather than start a second one on the same port.
        return _wait_started(record)
    if _session_processes(pid) is not None and not _raylet_alive(pid):
        return "its raylet is gone"
    if not _gcs_answers(address):
        return f"its GCS at {address} does not answer"
    return None


def _wait_started(record: dict, timeout: float = 120.0) -> str | None:
    """Wait for a head recorded as starting: its GCS answering and (where /proc shows it) its raylet up."""
    address, pid = record["address"], int(record["pid"])
    deadline = time.time() + timeout
    while time.time() < deadline:
        if not _leader_alive(pid):
            return f"its process {pid} is gone"
        up = _head_alive(address) and (_session_processes(pid) is None or _raylet_alive(pid))
        if up:
            _write_head_file(dict(record, ready=True))
            return None
        time.sleep(0.2)
    return f"it did not come up within {timeout:.0f} s"


def _session_processes(sid: int) -> dict[int, tuple[str, str, bytes]] | None:
    """Live processes of session ``sid``: pid -> (name, state, command line); None without /proc."""
    if not os.path.isdir("/proc/self"):
        return None
    out: dict[int, tuple[str, str, bytes]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as fh:
                stat = fh.read()
            fields = stat[stat.rindex(")") + 2 :].split()
            if int(fields[3]) != sid or fields[0] in ("Z", "X"):  # fields: state, ppid, pgrp, session
                continue
            with open(f"/proc/{name}/cmdline", "rb") as fh:
                cmdline = fh.read()
        except (OSError, ValueError, IndexError):
            continue
        out[int(name)] = (stat[stat.index("(") + 1 : stat.rindex(")")], fields[0], cmdline)
    return out


def _leader_alive(pid: int) -> bool:
    """True while the head's ``ray start`` process lives (a zombie does not count)."""
    group = _group_alive(pid)  # reaps it when this process started it
    live = _session_processes(pid)
    return group if live is None else pid in live


def _raylet_alive(sid: int) -> bool:
    return any(name == "raylet" for name, _state, _cmd in (_session_processes(sid) or {}).values())


def _stop_head_processes(record: dict, timeout: float = 20.0) -> None:
    """SIGKILL what is left of a dead head, and wait until it is gone and its GCS port is free.

    What is left: the Ray processes of the head's session (its ``ray start`` started it in a session
    of its own; a worker may have left the process group, never the session).  Only processes whose
    command line names Ray are signalled, so a recycled pid never costs someone else's process.
    Without /proc, the head's process group."""
    pid = int(record.get("pid") or 0)
    deadline = time.monotonic() + timeout
    while pid and time.monotonic() < deadline:
        members = _session_processes(pid)
        if members is None:
            if not _group_alive(pid):
                break
            _kill_group(pid)
        else:
            left = [member for member, (_name, _state, cmdline) in members.items() if b"ray" in cmdline]
            if not left:
                break
            for member in left:
                try:
                    os.kill(member, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
        time.sleep(0.2)
    if pid:
        _group_alive(pid)  # reaps the leader when this process started it
    while _head_alive(record["address"]) and time.monotonic() < deadline + timeout:
        time.sleep(0.2)


def _ray_binary() -> str:
    return os.path.join(os.path.dirname(sys.executable), "ray")


def _start_head(flags: list[str], timeout: float = 120.0) -> str:
    """Run ``ray start --head --block`` in a session of its own and wait until it says it started.

    Called with the head lock held.  The head counts as started when it printed ``HEAD_STARTED``
    (its raylet registered), not merely when its GCS port answers: a GCS can answer and then go
    down with a raylet that never registered.  Returns the head's address.
    """
    log_path = os.path.join(_state_dir(), "ray-head.log")
    # Ray 2.5x+ turns token auth on whenever ~/.ray/auth_token exists; be
    # explicit so the head and every connecting task agree on the mode.
    env = dict(os.environ)
    env.setdefault("RAY_AUTH_MODE", "token")
    for attempt in range(1, ray_in_process.START_ATTEMPTS + 1):
        port = _head_port()
        cmd = [_ray_binary(), "start", "--head", "--block", f"--port={port}", *flags]
        log.info("starting the embedded local Ray head: %s", " ".join(cmd))
        offset = os.path.getsize(log_path) if os.path.exists(log_path) else 0
        # --block in its own session: the head's processes form one process
        # group that stop_local_head() can end without touching any other Ray
        # on this machine (`ray stop` would kill them all).
        with open(log_path, "ab") as out:
            proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        address = f"127.0.0.1:{port}"
        _write_head_file({"address": address, "started_at": time.time(), "pid": proc.pid, "ready": False})
        if _wait_printed_started(proc, log_path, offset, timeout):
            _write_head_file({"address": address, "started_at": time.time(), "pid": proc.pid, "ready": True})
            return address
        timed_out = proc.poll() is not None and ray_in_process.STARTUP_TIMED_OUT in _log_since(log_path, offset)
        if not timed_out or attempt == ray_in_process.START_ATTEMPTS:
            break
        _kill_group(proc.pid)  # what the timed-out start left running (its GCS, agents) would load the machine
        log.warning(
            "Ray's start-up timed out (start %d of %d): starting the head again", attempt, ray_in_process.START_ATTEMPTS
        )
    raise RayConnectionError(f"could not start a local Ray head (exit {proc.poll()}); see {log_path}")


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _wait_printed_started(proc: subprocess.Popen, log_path: str, offset: int, timeout: float) -> bool:
    """True once ``ray start`` printed ``HEAD_STARTED`` after ``offset``; False when it exited or ``timeout`` passed."""
    deadline = time.time() + timeout
    while HEAD_STARTED not in _log_since(log_path, offset):
        if proc.poll() is not None or time.time() > deadline:
            return False
        time.sleep(0.2)
    return True


def _log_since(path: str, offset: int) -> str:
    with open(path, "rb") as fh:
        fh.seek(offset)
        return fh.read().decode(errors="replace")


def _write_head_file(record: dict) -> None:
    tmp = _head_file() + f".{os.getpid()}.tmp"
    with open(tmp, "w") as fh:
        json.dump(record, fh)
    os.replace(tmp, _head_file())  # readers see the old record or the new one, never half of one


def _group_alive(pgid: int) -> bool:
    """True while a process of group ``pgid`` lives.  When this process started the group's leader
    (the ``ray start`` of a head it started itself), the leader is reaped first: an exited child
    stays a zombie member of its group until its parent waits for it."""
    try:
        os.waitpid(pgid, os.WNOHANG)
    except ChildProcessError:  # not our child: its own parent (or init) reaps it
        pass
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def stop_local_head(timeout: float = 30.0) -> bool:
    """Stop the shared embedded head, if this machine runs one (``dj-airflow ray-stop``).

    Only the head's own process group is signalled; other Ray clusters on
    the machine are left alone.
    """
    try:
        with open(_head_file()) as fh:
            pid = int(json.load(fh)["pid"])
    except (FileNotFoundError, ValueError, KeyError):
        return False
    os.remove(_head_file())
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            return True
        deadline = time.time() + timeout
        while time.time() < deadline:
            if not _group_alive(pid):
                return True
            time.sleep(0.2)
    return True
