"""Start and stop a real ``airflow standalone`` for the end-to-end tests.

Why standalone: it is the smallest real deployment — api-server, scheduler,
dag-processor and triggerer as separate processes with the LocalExecutor —
so a task runs the way it does in production (its own process, talking to
the execution API), not in the test's process as ``dag.test()`` does.

Isolation, because several people run tests on one machine at once:

* a fresh ``AIRFLOW_HOME`` and metadata DB per server;
* every port is a free one picked at start (API, worker and triggerer log
  servers, the embedded Ray head), never a default;
* the server runs in its own process session, and :meth:`AirflowServer.stop`
  ends exactly that session (SIGTERM, then SIGKILL for whatever is left),
  plus the embedded Ray head the scheduler's tasks started, which lives in a
  session of its own (``hooks.ray.ensure_local_head``) — never ``ray stop``,
  which would end every Ray cluster on the machine.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field

import httpx

from tests.e2e.rest_client import AirflowRestClient, RestError
from tests.integration.crash_helpers import kill_session, live_session_members
from tests.ports import free_port

VENV_BIN = os.path.dirname(sys.executable)
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DAGS_FOLDER = os.path.join(REPO_ROOT, "dags")

# Environment of the test process that must not leak into the server: the
# test session's own Airflow settings and the in-process Ray switches of
# `dj-airflow run`.
_DROP_ENV_PREFIXES = ("AIRFLOW__", "RAY_ADDRESS", "DJ_DEFAULT_GROUP_SIZE")


#: How long a connection to a SQLite metadata DB waits for the write lock before it fails
#: with "database is locked" (the sqlite3 module's default is 5 s).  Airflow standalone's
#: api-server, scheduler, dag-processor and triggerer all write one SQLite file, and SQLite
#: lets one writer in at a time: on a loaded machine another component can hold the lock
#: longer than 5 s, and then a REST call that writes (``PATCH /api/v2/dags/...``) answered
#: HTTP 500 "Database error".  Waiting for the lock is what a writer should do here.
SQLITE_BUSY_TIMEOUT_S = 120


def sqlite_url_with_busy_timeout(url: str, timeout_s: float = SQLITE_BUSY_TIMEOUT_S) -> str:
    """``url`` with the sqlite3 ``timeout`` (busy timeout) in its query, when it is a SQLite URL without one.

    SQLAlchemy's pysqlite and aiosqlite dialects pass the URL's ``timeout`` on to the driver's
    ``connect``, so the setting reaches every engine each Airflow component creates, sync and async.
    """
    from sqlalchemy.engine import make_url

    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite" or "timeout" in parsed.query:
        return url
    return parsed.update_query_dict({"timeout": str(timeout_s)}).render_as_string(hide_password=False)


class ServerStartError(RuntimeError):
    pass


class ApiServerPortTaken(ServerStartError):
    """The api-server could not listen: its port was taken between our pick and its bind."""


@dataclass
class AirflowServer:
    """One ``airflow standalone`` with its own home, DB, ports and Ray head."""

    home: str
    sql_alchemy_conn: str
    recipes_dir: str
    extra_env: dict = field(default_factory=dict)
    port: int = 0
    proc: subprocess.Popen | None = None
    client: AirflowRestClient | None = None
    started_s: float = 0.0
    #: The environment the running server was started with (its secrets included): what an extra
    #: component started by a test (a replacement triggerer) must share.
    started_env: dict = field(default_factory=dict)
    _log_start: int = 0  # where this start's lines begin in the log
    #: What runs the server instead of ``airflow standalone`` (which always uses SimpleAuthManager): a
    #: command that starts the same four components itself, e.g. with another auth manager.
    command: list[str] | None = None
    #: The admin's (user, password) when ``command`` creates them; else standalone's generated ones.
    admin_credentials: tuple[str, str] | None = None

    @property
    def ray_state_dir(self) -> str:
        return os.path.join(self.home, "ray-state")

    @property
    def log_path(self) -> str:
        return os.path.join(self.home, "standalone.log")

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def env(self) -> dict:
        env = {k: v for k, v in os.environ.items() if not k.startswith(_DROP_ENV_PREFIXES)}
        env["PATH"] = VENV_BIN + os.pathsep + env.get("PATH", "")
        env.update(
            {
                "AIRFLOW_HOME": self.home,
                "AIRFLOW__CORE__DAGS_FOLDER": DAGS_FOLDER,
                "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
                "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": sqlite_url_with_busy_timeout(self.sql_alchemy_conn),
                # A database error names its statement and the driver's error in the answer, so a
                # failing test shows why (the default hides both behind an id in the server's log).
                "AIRFLOW__API__EXPOSE_STACKTRACE": "True",
                "AIRFLOW__API__HOST": "127.0.0.1",
                "AIRFLOW__API__PORT": str(self.port),
                "AIRFLOW__API__WORKERS": "1",
                "AIRFLOW__API__SECRET_KEY": secrets.token_hex(16),
                # Tasks reach the API server's execution API: it is on our port,
                # not the default 8080 (which may be someone else's server).
                "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{self.port}/execution/",
                # Every component must sign and check tokens with the same secret.
                "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_hex(32),
                "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(free_port()),
                "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(free_port()),
                "AIRFLOW__CORE__PARALLELISM": "8",
                "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "2",
                "AIRFLOW__LOGGING__LOGGING_LEVEL": "INFO",
                # The recipes do not change during a test: parse the DAG folder
                # once, instead of every 30 s (each parse writes to the DB, and on
                # SQLite that stalls the API server and the tasks' execution API).
                "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "600",
                "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "600",
                # Slow is not broken on a shared, loaded machine.
                "AIRFLOW__CORE__DAGBAG_IMPORT_TIMEOUT": "180",
                # A task's calls to the execution API (default 5 s) time out when several runs start at once.
                "AIRFLOW__WORKERS__EXECUTION_API_TIMEOUT": "120",
                "AIRFLOW__DAG_PROCESSOR__DAG_FILE_PROCESSOR_TIMEOUT": "240",
                # The project's DAG file reads its recipes from here.
                "DJ_RECIPES_DIR": self.recipes_dir,
                # A failed partition must end its task failed (no automatic retry):
                # the tests clear it through the API instead.
                "DJ_TASK_RETRIES": "0",
                "DJ_TASK_RETRY_DELAY_S": "0",
                # The scheduler's tasks share one embedded Ray head: ours alone.
                "DJ_RAY_STATE_DIR": self.ray_state_dir,
                "DJ_RAY_HEAD_PORT": str(free_port()),
                "PYTHONUNBUFFERED": "1",
            }
        )
        env.update(self.extra_env)
        return env

    # -- life cycle ----------------------------------------------------------
    def start(self, timeout: float = 300.0) -> AirflowRestClient:
        """Start the server and wait until every component is healthy; a client logged in as admin.

        Once, when the api-server could not listen because its port was taken after we picked it
        (another process on the machine), the whole server starts again on another port: that is
        the machine's race, not the server's fault.  Any other failure is raised at once."""
        try:
            return self._start_once(timeout)
        except ApiServerPortTaken:
            self.port = free_port()
            with open(self.log_path, "a") as log:
                log.write(f"[tests] the api-server's port was taken: starting again on port {self.port}\n")
            return self._start_once(timeout)

    def _start_once(self, timeout: float) -> AirflowRestClient:
        os.makedirs(self.home, exist_ok=True)
        os.makedirs(self.ray_state_dir, exist_ok=True)
        self.port = self.port or free_port()
        env = self.started_env = self.env()
        t0 = time.monotonic()
        # The embedded Ray head, started exactly as the first task would start
        # it (hooks.ray.ensure_local_head, same environment), but now, while
        # Airflow starts, instead of inside the first task run.
        ray_head = subprocess.Popen(
            [sys.executable, "-c", "from airflow_provider_dj.hooks.ray import ensure_local_head; ensure_local_head()"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            env=env,
        )
        with open(self.log_path, "ab") as log:
            self._log_start = log.tell()
            self.proc = subprocess.Popen(
                self.command or [os.path.join(VENV_BIN, "airflow"), "standalone"],
                cwd=self.home,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                start_new_session=True,
            )
        try:
            _out, err = ray_head.communicate(timeout=timeout)
            if ray_head.returncode != 0:
                raise ServerStartError(f"could not start the embedded Ray head: {err.decode(errors='replace')[-3000:]}")
            self._wait_healthy(t0 + timeout)
            user, password = self.admin_credentials or ("admin", self._admin_password(t0 + timeout))
            self.client = AirflowRestClient(self.base_url, user, password)
            self.client.token()
        except BaseException:
            self.stop()
            raise
        self.started_s = time.monotonic() - t0
        return self.client

    def _wait_healthy(self, deadline: float) -> None:
        # The loop below asks again: one slow answer must not hold it past its deadline for long.
        probe = AirflowRestClient(self.base_url, "", "", timeout=30.0)
        last: object = None
        api_server_seen = False
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise ServerStartError(
                    f"airflow standalone exited with {self.proc.returncode}; log tail:\n{self.log_tail()}"
                )
            # standalone goes on without a component whose process ended: an api-server that
            # could not listen, or started and is gone, will never answer, so say why now instead of
            # at the deadline.  (After a failed bind its process may linger for minutes.)
            lines = self.component_lines("api-server")
            if "address already in use" in lines.lower():
                raise ApiServerPortTaken(lines)
            if self._api_server_running():
                api_server_seen = True
            elif api_server_seen:
                raise ServerStartError(f"the api-server of airflow standalone ended; its last lines:\n{lines}")
            try:
                last = probe.health()
                if all(
                    (last.get(part) or {}).get("status") == "healthy"
                    for part in ("metadatabase", "scheduler", "triggerer", "dag_processor")
                ):
                    return
            except (RestError, OSError, httpx.TransportError) as exc:
                last = exc
            time.sleep(1.0)
        raise ServerStartError(
            f"airflow standalone on port {self.port} not healthy in time (last answer: {last!r}); "
            f"log tail:\n{self.log_tail()}\n--- the api-server's last lines ---\n{self.component_lines('api-server')}"
        )

    def _admin_password(self, deadline: float) -> str:
        path = os.path.join(self.home, "simple_auth_manager_passwords.json.generated")
        while True:
            try:
                with open(path) as fh:
                    return json.load(fh)["admin"]
            except (FileNotFoundError, ValueError, KeyError):
                if time.monotonic() > deadline:
                    raise ServerStartError(f"no admin password in {path}") from None
                time.sleep(0.5)

    def stop(self) -> list[int]:
        """End the server's whole session and our Ray head; returns pids that needed SIGKILL."""
        killed: list[int] = []
        if self.proc is not None:
            sid = self.proc.pid
            for pid in live_session_members(sid):
                try:
                    os.kill(pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
            deadline = time.monotonic() + 5  # a throwaway server needs no graceful shutdown
            while live_session_members(sid) and time.monotonic() < deadline:
                time.sleep(0.3)
            killed += kill_session(sid)
            if self.proc.poll() is None:
                self.proc.wait(timeout=10)
        killed += stop_ray_head(self.ray_state_dir)
        return killed

    def _api_server_running(self) -> bool:
        if self.proc is None:
            return False
        for pid in live_session_members(self.proc.pid):
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as fh:
                    cmdline = fh.read()  # the CLI's argv, or the title the api-server gives itself
            except FileNotFoundError:
                continue
            if b"api-server" in cmdline or b"airflow api_server" in cmdline:
                return True
        return False

    def component_lines(self, name: str, n: int = 60) -> str:
        """The last ``n`` lines standalone printed for one component (``api-server``, ``scheduler``, ...)."""
        try:
            with open(self.log_path, encoding="utf-8", errors="replace") as fh:
                fh.seek(self._log_start)  # this start's lines only
                mine = [line for line in fh if line.split("|", 1)[0].strip() == name]
        except FileNotFoundError:
            return "(no log)"
        return "".join(mine[-n:]) or f"(no {name} lines)"

    def log_tail(self, n: int = 4000) -> str:
        try:
            with open(self.log_path, encoding="utf-8", errors="replace") as fh:
                return fh.read()[-n:]
        except FileNotFoundError:
            return "(no log)"

    def task_log(
        self, dag_id: str, run_id: str, task_id: str, map_index: int = -1, try_number: int = 1, n: int = 3000
    ) -> str:
        """Tail of a task's log file, for assertion messages only (the tests act through REST)."""
        base = os.path.join(self.home, "logs", f"dag_id={dag_id}", f"run_id={run_id}", f"task_id={task_id}")
        if map_index >= 0:
            base = os.path.join(base, f"map_index={map_index}")
        path = os.path.join(base, f"attempt={try_number}.log")
        try:
            with open(path, encoding="utf-8", errors="replace") as fh:
                return fh.read()[-n:]
        except FileNotFoundError:
            return f"(no log at {path})"


def _head_pid(state_dir: str) -> int | None:
    try:
        with open(os.path.join(state_dir, "ray-head.json")) as fh:
            return int(json.load(fh)["pid"])
    except (FileNotFoundError, ValueError, KeyError):
        return None


def stop_ray_head(state_dir: str) -> list[int]:
    """Stop the embedded Ray head recorded in ``state_dir`` (only that one), and its whole session."""
    from airflow_provider_dj.hooks.ray import stop_local_head

    pid = _head_pid(state_dir)
    if pid is None:
        return []
    saved = os.environ.get("DJ_RAY_STATE_DIR")
    os.environ["DJ_RAY_STATE_DIR"] = state_dir  # stop_local_head reads the state dir from the environment
    try:
        stop_local_head(timeout=5)
    finally:
        if saved is None:
            os.environ.pop("DJ_RAY_STATE_DIR", None)
        else:
            os.environ["DJ_RAY_STATE_DIR"] = saved
    # The head ran in its own session (sid == its pid): whatever outlived the
    # process-group stop (a worker that changed its group) goes too.
    return kill_session(pid)


def ray_worker_pids(state_dir: str, task_name: str = "segment_task") -> list[int]:
    """Pids of Ray workers of *our* head executing ``task_name`` right now.

    A Ray worker sets its process title to ``ray::<task>`` while it runs a
    task (``ray::IDLE`` otherwise), and inherits the head's environment, so
    ``DJ_RAY_STATE_DIR`` tells our cluster's workers from anyone else's.
    This works without Ray's dashboard (the embedded head runs without one,
    so the state API is not there).
    """
    want_env = f"DJ_RAY_STATE_DIR={state_dir}".encode()
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as fh:
                cmd = fh.read()
            if not cmd.startswith(f"ray::{task_name}".encode()):
                continue
            with open(f"/proc/{name}/environ", "rb") as fh:
                if want_env not in fh.read().split(b"\0"):
                    continue
        except OSError:
            continue
        out.append(int(name))
    return out
