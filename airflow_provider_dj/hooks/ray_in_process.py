"""The private in-process Ray of ``dj-airflow run``: started early, shared, killed fast.

``dj-airflow run`` executes every task of the DAG in its own process, so the
tasks share one in-process Ray cluster.  Starting it costs about 3 s, most of
it waiting for the GCS and raylet processes to come up; Airflow's own cold
start (imports, DB, the in-process execution API) costs as much again before
the first partition task asks for Ray.  So the CLI starts Ray in a background
thread as soon as the recipe is valid, and the two overlap: Ray's processes
start on the other cores while this process imports Airflow.

Two details make this work:

* The starting thread is *parked*, never finished.  Ray ties its GCS and
  raylet to the thread that spawned them (Linux ``PR_SET_PDEATHSIG`` fires
  when the parent *thread* exits), so a thread that returned would take the
  cluster down with it.
* :func:`kill_children` ends the run in milliseconds: the CLI has written and
  flushed everything, so it SIGKILLs its own Ray processes and leaves with
  ``os._exit`` instead of ``ray.shutdown()`` plus a full interpreter tear-down
  (what each costs: docs/benchmarks.md).
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
import time
from typing import Any

log = logging.getLogger(__name__)

_ready = threading.Event()
_lock = threading.Lock()
_state: dict[str, Any] = {"thread": None, "error": None, "seconds": None, "abandoned": False}


def ensure_auth_token() -> str | None:
    """Create Ray's default token file (``~/.ray/auth_token``) atomically if token auth needs it.

    Ray writes that file itself when a local cluster starts and finds none,
    by truncating and writing it in place: two runs starting at once on a
    machine without it each write their own token, and one cluster then
    holds a token the file no longer has, or a process reads the file while
    it is empty.  Written here first, complete, under a temporary name and
    linked into place (linking never replaces a file another run made), Ray
    finds a token and never writes one.  Returns the path, or None when the
    token comes from elsewhere (RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH) or auth
    is off.
    """
    import secrets
    import tempfile

    if os.environ.get("RAY_AUTH_MODE", "token").lower() != "token":
        return None
    if os.environ.get("RAY_AUTH_TOKEN") or os.environ.get("RAY_AUTH_TOKEN_PATH"):
        return None
    path = os.path.join(os.path.expanduser("~"), ".ray", "auth_token")
    if os.path.exists(path) and os.path.getsize(path) > 0:
        return path
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".auth_token.", dir=os.path.dirname(path))  # mode 0600
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(secrets.token_hex(32))  # Ray's own format: 256 random bits, hex
        try:
            os.link(tmp, path)
        except FileExistsError:
            pass  # another run made it first: use theirs
    finally:
        os.unlink(tmp)
    return path


#: What Ray says when its fixed 30 s wait for a raylet to register with the GCS ran out.  On a loaded
#: machine that wait can run out while a fresh start succeeds, so such a start is tried again (here
#: and for the shared head, hooks/ray.py); any other start-up error is raised at once.
STARTUP_TIMED_OUT = "timed out during startup"
#: Starts of a Ray cluster before giving up on Ray's start-up time-out.
START_ATTEMPTS = 3


def _init(num_cpus: int, init_kwargs: dict[str, Any]) -> None:
    ensure_auth_token()
    import ray

    for attempt in range(1, START_ATTEMPTS + 1):
        before = _descendants()
        try:
            ray.init(
                address="local",
                num_cpus=num_cpus or None,
                include_dashboard=False,
                configure_logging=False,
                log_to_driver=True,
                **init_kwargs,
            )
            return
        except Exception as exc:
            if STARTUP_TIMED_OUT not in str(exc) or attempt == START_ATTEMPTS:
                raise
            log.warning("Ray's start-up timed out (start %d of %d): starting it again", attempt, START_ATTEMPTS)
            ray.shutdown()
            # The timed-out start leaves its GCS, raylet and agents running (Ray gives up without
            # stopping them); left alone they would load the machine that made it time out.
            _kill_new_descendants(before)


def _descendants() -> set[int]:
    import psutil

    try:
        return {p.pid for p in psutil.Process().children(recursive=True)}
    except psutil.Error:
        return set()


def _kill_new_descendants(before: set[int]) -> None:
    """SIGKILL Ray's processes among this process's descendants not in ``before``; wait for them.

    Only Ray's (see :func:`_is_ray_process`) and what they started: the start
    runs in a thread of ``dj-airflow run`` while its main thread may have a
    child of its own running (``airflow db migrate``), which must survive.
    Processes in another session (a detached head) are left alone.
    """
    import psutil

    try:
        new = [p for p in psutil.Process().children(recursive=True) if p.pid not in before]
    except psutil.Error:
        return
    ray_dir = _ray_package_dir()
    doomed: dict[int, Any] = {}
    for proc in new:
        if proc.pid not in doomed and _is_ray_process(proc, ray_dir):
            doomed[proc.pid] = proc
            with contextlib.suppress(psutil.Error):
                doomed.update((c.pid, c) for c in proc.children(recursive=True))
    psutil.wait_procs(_kill_in_my_session(doomed.values()), timeout=10)


def _kill_in_my_session(procs) -> list:
    """SIGKILL those of ``procs`` in this process's session; the ones signalled.

    A descendant that moved to a session of its own is left alone: that is how
    a process detaches to outlive us (the shared Ray head of ``hooks/ray.py``).
    """
    import psutil

    my_sid = os.getsid(0)
    killed = []
    for proc in procs:
        try:
            if os.getsid(proc.pid) == my_sid:
                proc.kill()
                killed.append(proc)
        except (OSError, psutil.Error):  # already gone
            pass
    return killed


def _ray_package_dir() -> str:
    import ray

    return os.path.dirname(ray.__file__) + os.sep


def _is_ray_process(proc: Any, ray_dir: str) -> bool:
    """A process of Ray's own: its GCS and raylet binaries and its Python agents live in Ray's package
    directory ``ray_dir`` (named on their command line); its workers retitle themselves ``ray::...``."""
    import psutil

    try:
        cmdline = proc.cmdline()
    except psutil.Error:
        return False
    return bool(cmdline) and (cmdline[0].startswith("ray::") or any(a.startswith(ray_dir) for a in cmdline))


def _ray_initialized() -> bool:
    ray = sys.modules.get("ray")
    return bool(ray is not None and ray.is_initialized())


# Packages ``ray.init()`` imports lazily that Airflow's start-up imports too
# (the Execution API imports ``svcs``, which imports ``aiohttp.web``).
# Imported by two threads at once, a package with internal import cycles can
# be handed half-initialised to one of them; the other's import then fails and
# takes it out of ``sys.modules`` (``KeyError: 'aiohttp'`` in the CLI's main
# thread).  Both threads import these anyway, so importing them first in the
# caller adds nothing to the run.
_IMPORTED_BY_BOTH = ("aiohttp", "aiohttp.web", "click", "yarl", "email.policy", "gettext", "netrc", "optparse")


def _import_shared_modules() -> None:
    import importlib

    for name in _IMPORTED_BY_BOTH:
        try:
            importlib.import_module(name)
        except ImportError:  # not installed here: then neither thread imports it
            pass


def start_in_background(num_cpus: int, init_kwargs: dict[str, Any] | None = None) -> bool:
    """Start the in-process cluster in a parked daemon thread; False if Ray already runs here."""
    os.environ.setdefault("RAY_AUTH_MODE", "token")  # read when ray is first imported (RayHook.get_client)
    with _lock:
        if _state["thread"] is not None or _ray_initialized():
            return False
        _import_shared_modules()  # before a second thread exists (see _IMPORTED_BY_BOTH)

        def body() -> None:
            t0 = time.perf_counter()
            try:
                _init(num_cpus, dict(init_kwargs or {}))
            except BaseException as exc:  # noqa: BLE001 - reported to the first task that needs Ray
                _state["error"] = exc
            _state["seconds"] = time.perf_counter() - t0
            _ready.set()
            if _state["error"] is None:
                threading.Event().wait()  # parked for good: Ray's processes die with this thread

        _state["thread"] = threading.Thread(target=body, name="dj-ray-start", daemon=True)
        _state["thread"].start()
        return True


def started_in_background() -> bool:
    """True while a background-started cluster is (or is becoming) this process's Ray."""
    return _state["thread"] is not None and not _state["abandoned"]


def ensure_started(num_cpus: int, init_kwargs: dict[str, Any]) -> None:
    """Wait for the background start, or start here when there was none (or it failed)."""
    if started_in_background():
        t0 = time.perf_counter()
        _ready.wait()
        if _state["error"] is None and _ray_initialized():
            log.info(
                "in-process Ray started in the background in %.2fs (this task waited %.2fs)",
                _state["seconds"],
                time.perf_counter() - t0,
            )
            return
        if _state["error"] is not None:
            log.warning("starting Ray in the background failed (%s); starting it now", _state["error"])
    if not _ray_initialized():
        _init(num_cpus, init_kwargs)


def abandon() -> None:
    """Shut down a background-started cluster the run turned out not to use (a Ray cluster address was set)."""
    if not started_in_background():
        return
    _ready.wait()
    _state["abandoned"] = True
    if _ray_initialized():
        import ray

        ray.shutdown()


def kill_children() -> int:
    """SIGKILL every process this one started (Ray's GCS, raylet, agents and workers); how many.

    Only for the very end of a CLI run, after every file is written: nothing
    of Ray's needs a graceful stop then.  Children that Ray's raylet started
    are found while the raylet still lives, so the whole tree goes at once.

    Only descendants of this process are candidates, so another run's
    processes (its own tree) are never among them; and a descendant that
    moved to a session of its own is left alone, since that is how a process
    detaches to outlive us (the shared Ray head of ``hooks/ray.py`` does).
    """
    import psutil

    try:
        procs = psutil.Process().children(recursive=True)
    except psutil.Error:
        return 0
    return len(_kill_in_my_session(procs))
