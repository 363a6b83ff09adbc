"""RayHook: where partition work runs.

Resolution order for the cluster address:

1. the Airflow connection (``conn_id``, default ``ray_default``) if it exists:
   its host/port (``ray://host:10001`` for Ray Client, or ``host:6379`` for
   a GCS address), or ``extra.address``; a dashboard (``http://host:8265``,
   or ``extra.dashboard_address``) selects Ray Jobs mode, where each
   partition group runs as a Ray Job (hooks/ray_jobs.py, ``get_jobs_client``);
2. the ``RAY_ADDRESS`` environment variable;
3. otherwise an *embedded* local Ray.

Embedded Ray must not cost a full start-up in every task.  If Ray is
already initialised in this process (``dj-airflow run``, ``dag.test()``),
it is reused.  Otherwise (scheduler tasks, one process per task) the hook
starts one local head node the first time — guarded by a file lock, so
parallel tasks do not start several — records its address under
``DJ_RAY_STATE_DIR`` (default ``~/.cache/airflow-provider-dj``), and every
later task only connects to it (about a second instead of several).

Only allowlisted connection extras reach ``ray.init`` (never the whole
extra dict): ``namespace``, ``runtime_env``, ``num_cpus`` (embedded only),
``object_store_memory`` (embedded only), ``address``, ``dashboard_address``,
``entrypoint_python`` (Ray Jobs mode): the keys of
``provider_info.RAY_CONN_FIELDS``, which the connection form shows.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
from typing import Any

from airflow_provider_dj import settings
from airflow_provider_dj.core.errors import DJError
from airflow_provider_dj.hooks import ray_in_process
from airflow_provider_dj.provider_info import RAY_CONN_FIELDS

log = logging.getLogger(__name__)

# The connection form's conn-fields and this allowlist are one list (provider_info.RAY_CONN_FIELDS), so the
# UI offers exactly the extras that reach Ray.
ALLOWED_EXTRAS = frozenset(RAY_CONN_FIELDS)

try:  # Airflow is optional for the engine; the hook is usable without it in scripts.
    from airflow.sdk.bases.hook import BaseHook  # type: ignore[import-not-found]
except Exception:  # noqa: BLE001 - Airflow's import path differs between versions  # pragma: no cover
    try:
        from airflow.hooks.base import BaseHook  # type: ignore
    except Exception:  # noqa: BLE001 - no Airflow at all: the hook still works in scripts  # pragma: no cover
        BaseHook = object  # type: ignore[misc,assignment]


def _state_dir() -> str:
    return settings.get("ray_state_dir") or os.path.join(os.path.expanduser("~"), ".cache", "airflow-provider-dj")


class RayConnectionError(DJError, RuntimeError):
    pass


class RayHook(BaseHook):  # type: ignore[misc]
    conn_name_attr = "ray_conn_id"
    default_conn_name = "ray_default"
    conn_type = "ray"
    hook_name = "Ray"

    def __init__(
        self, ray_conn_id: str | None = default_conn_name, *, in_process_cpus: int | None = None, **kwargs: Any
    ) -> None:
        if BaseHook is not object:
            super().__init__(**kwargs)
        self.ray_conn_id = ray_conn_id
        # `dj-airflow run` (operators/local_run.py): this process's private Ray with these CPUs.
        self.in_process_cpus = in_process_cpus

    # -- configuration -------------------------------------------------------
    def _connection_settings(self) -> dict[str, Any]:
        if not self.ray_conn_id or BaseHook is object:
            return {}
        try:
            conn = self.get_connection(self.ray_conn_id)
        except Exception:  # noqa: BLE001 - connection not defined: fall through to env / embedded
            return {}
        extra = conn.extra_dejson or {}
        unknown = sorted(set(extra) - ALLOWED_EXTRAS)
        if unknown:
            log.warning("ignoring unsupported Ray connection extras %s (allowed: %s)", unknown, sorted(ALLOWED_EXTRAS))
        settings = {k: v for k, v in extra.items() if k in ALLOWED_EXTRAS}
        if conn.host and "address" not in settings:
            host = conn.host
            if "://" not in host and conn.port:
                host = f"{host}:{conn.port}"
            elif conn.port and host.count(":") < 2:
                host = f"{host}:{conn.port}"
            settings["address"] = host
        return settings

    def resolve(self) -> dict[str, Any]:
        """{'mode': 'cluster'|'embedded'|'jobs', 'address': ..., 'init_kwargs': {...}} without connecting.

        ``jobs`` (Ray Jobs mode, hooks/ray_jobs.py): the connection names a dashboard
        (``dashboard_address``, or an ``http(s)://`` address); partition groups are submitted there as
        Ray Jobs, and ``dashboard_address`` says where.  Its ``address`` (a GCS address, or None: the
        embedded Ray) is where the steps that stay in the worker reach Ray."""
        from airflow_provider_dj.hooks.ray_jobs import is_dashboard_address

        settings = self._connection_settings()
        address = settings.pop("address", None) or os.environ.get("RAY_ADDRESS") or None
        dashboard = settings.pop("dashboard_address", None)
        python = settings.pop("entrypoint_python", None) or "python"
        if not dashboard and is_dashboard_address(address):
            dashboard, address = address, None
        init_kwargs: dict[str, Any] = {}
        if settings.get("namespace"):
            init_kwargs["namespace"] = settings["namespace"]
        if settings.get("runtime_env"):
            init_kwargs["runtime_env"] = settings["runtime_env"]
        embedded = {k: settings[k] for k in ("num_cpus", "object_store_memory") if k in settings}
        if dashboard:
            mode = {"mode": "jobs", "dashboard_address": dashboard}
        else:
            mode = {"mode": "cluster" if address else "embedded"}
        mode["entrypoint_python"] = python  # what a Ray Job's driver runs with (Ray Jobs mode only)
        if address:
            return {**mode, "address": address, "init_kwargs": init_kwargs}
        return {**mode, "address": None, "init_kwargs": init_kwargs, "embedded": embedded}

    def get_jobs_client(self):
        """Ray Jobs mode's client (hooks/ray_jobs.RayJobsClient); raises RayDashboardUnreachableError
        naming the address when the dashboard does not answer, and RayConnectionError when the
        connection names no dashboard."""
        from airflow_provider_dj.hooks.ray_jobs import RayJobsClient

        cfg = self.resolve()
        if cfg["mode"] != "jobs":
            raise RayConnectionError(
                f"the Ray connection {self.ray_conn_id!r} names no dashboard: set its host to http://<head>:8265 "
                f"or its extra dashboard_address for Ray Jobs mode"
            )
        kwargs = cfg["init_kwargs"]
        return RayJobsClient(
            cfg["dashboard_address"],
            runtime_env=kwargs.get("runtime_env"),
            namespace=kwargs.get("namespace"),
            python=cfg["entrypoint_python"],
        )

    # -- connecting ----------------------------------------------------------
    def get_client(self):
        """Return the ``ray`` module, connected.  Cheap when already connected."""
        cfg = self.resolve()
        if cfg["mode"] != "cluster" and not cfg["address"]:
            # Ray 2.5x+ turns token auth on for `ray start` whenever
            # ~/.ray/auth_token exists, and reads the mode when `ray` is first
            # imported: set it before the import so the head we start and
            # every task connecting to it agree.
            os.environ.setdefault("RAY_AUTH_MODE", "token")
        import ray

        if cfg["mode"] == "cluster" and ray_in_process.started_in_background():
            # `dj-airflow run` started its private cluster before it could see
            # the connection: a configured cluster address wins.
            ray_in_process.abandon()
        if ray.is_initialized():
            return ray
        t0 = time.perf_counter()
        if cfg["mode"] == "jobs":
            # Ray Jobs mode: partition groups run on the cluster as Ray Jobs; what a task does in the
            # worker itself (a parallel export's parts, a GPU probe) uses the connection's GCS address
            # when it has one, else the embedded Ray.
            cfg = dict(cfg, mode="cluster" if cfg["address"] else "embedded")
        if cfg["mode"] == "cluster":
            log.info("connecting to Ray cluster at %s", cfg["address"])
            ray.init(address=cfg["address"], ignore_reinit_error=True, log_to_driver=True, **cfg["init_kwargs"])
        elif self.in_process_cpus:
            # `dj-airflow run`: every task runs in this one process, so a private
            # in-process cluster, which the CLI starts in the background at
            # launch when the input has rows (hooks/ray_in_process.py); without
            # that, the first task that needs Ray starts it.
            log.info("using the private in-process Ray cluster of this run")
            ray_in_process.ensure_started(int(self.in_process_cpus), cfg["init_kwargs"])
        else:
            address = ensure_local_head(**cfg.get("embedded", {}))
            log.info("connecting to the embedded local Ray head at %s", address)
            ray.init(address=address, ignore_reinit_error=True, log_to_driver=True, **cfg["init_kwargs"])
        log.info("Ray ready in %.2fs", time.perf_counter() - t0)
        return ray

    def test_connection(self) -> tuple[bool, str]:
        try:
            ray = self.get_client()
            return True, f"connected; cluster resources: {ray.cluster_resources()}"
        except Exception as exc:  # noqa: BLE001 - depends on the cluster  # pragma: no cover
            return False, str(exc)


def _head_file() -> str:
    return os.path.join(_state_dir(), "ray-head.json")


def _head_alive(address: str) -> bool:
    host, _, port = address.rpartition(":")
    import socket

    try:
        with socket.create_connection((host or "127.0.0.1", int(port)), timeout=1.0):
            return True
    except OSError:
        return False


def _head_port() -> int:
    """DJ_RAY_HEAD_PORT if set; else 26379, or a free port when something else listens there
    (another state dir's head, another user's): a busy default must not make every task fail."""
    if settings.raw("ray_head_port"):
        return int(settings.raw("ray_head_port"))
    if not _head_alive("127.0.0.1:26379"):
        return 26379
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ensure_local_head(num_cpus: int | None = None, object_store_memory: int | None = None) -> str:
    """Start (once) and return the address of a local Ray head shared by all tasks on this machine."""
    import fcntl

    os.makedirs(_state_dir(), exist_ok=True)
    lock_path = os.path.join(_state_dir(), "ray-head.lock")
    with open(lock_path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            with open(_head_file()) as fh:
                record = json.load(fh)
            address = record["address"]
            if _head_alive(address):
                return address
            # A head still coming up: its starter was killed while waiting
            # (a task timeout), but the head runs on in its own session.
            # Wait for it rather than start a second one on the same port.
            if record.get("pid") and _group_alive(int(record["pid"])) and _wait_alive(address, record["pid"]):
                return address
        except (FileNotFoundError, ValueError, KeyError, TypeError):
            pass
        ray_in_process.ensure_auth_token()  # made once, atomically, before `ray start` would write one
        flags = ["--include-dashboard=false", "--disable-usage-stats"]
        if num_cpus:
            flags.append(f"--num-cpus={int(num_cpus)}")
        if object_store_memory:
            flags.append(f"--object-store-memory={int(object_store_memory)}")
        return _start_head(flags)


#: What ``ray start --block`` prints once its node has registered with the GCS (then it blocks).
HEAD_STARTED = "Ray runtime started"


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
        if _wait_started(proc, log_path, offset, timeout):
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
    import signal

    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _wait_started(proc: subprocess.Popen, log_path: str, offset: int, timeout: float) -> bool:
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


def _wait_alive(address: str, pgid: int, timeout: float = 120.0) -> bool:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if _head_alive(address):
            return True
        if not _group_alive(int(pgid)):
            return False
        time.sleep(0.2)
    return False


def stop_local_head(timeout: float = 30.0) -> bool:
    """Stop the shared embedded head, if this machine runs one (``dj-airflow ray-stop``).

    Only the head's own process group is signalled; other Ray clusters on
    the machine are left alone.
    """
    import signal

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
