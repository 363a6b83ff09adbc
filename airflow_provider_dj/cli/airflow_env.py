"""Prepare an Airflow home for in-process runs (``dj-airflow run``, tests).

Airflow reads its configuration when it is first imported, so everything
here must happen before ``import airflow``.  With no AIRFLOW_HOME set we
use ``~/.dj-airflow/airflow`` (or ``$DJ_AIRFLOW_HOME``) with no example DAGs.

Several ``dj-airflow run`` on one machine must not see each other: a shared
DAG-stub folder would be emptied by each run, and one SQLite metadata DB has
one writer.  So each run gets a *private run directory* under
``<home>/dj_cli_runs/`` holding

* its own DAG-stub folder (only its recipe's DAG; nobody else writes there);
* with SQLite (the default), its own metadata DB: a file copy of a template
  DB that was migrated once per Airflow version (``airflow db migrate`` is
  about 3 s; copying the ~1 MB template takes milliseconds).  SQLite allows
  one writer at a time, and a CLI run's metadata is scratch anyway: the job
  directory is the durable record.

The copy is made whatever DB the home configures: with ``AIRFLOW_HOME``
pointing at an existing Airflow (its ``airflow.cfg`` naming PostgreSQL, say),
a CLI run reads that home's configuration but never migrates or writes that
DB, which belongs to the deployment.  Only an in-process caller that already
imported Airflow (a test calling ``cli.main``) uses the configured DB.

The private state is set up in two halves: :func:`reserve_run` before
anything imports Airflow (the run directory and the two variables Airflow
reads once, at import), and :func:`prepare_run` once the DAG is known (the
stub, the DB copy).  So a templated recipe, whose preview imports Airflow
for its Jinja environment, still runs on its own copy.

A run removes its own run directory when it ends (:meth:`RunEnv.cleanup`)
and never another's; directories left by crashed runs (their owner process
is gone) are swept by the next run.
"""

from __future__ import annotations

import configparser
import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

from airflow_provider_dj import settings as dj_settings
from airflow_provider_dj.core.errors import DJError

DEFAULT_HOME = os.path.join(os.path.expanduser("~"), ".dj-airflow", "airflow")
CLI_DAGS = "dj_cli_dags"
RUNS_DIR = "dj_cli_runs"
RUN_OWNER_FILE = "owner.json"
TEMPLATE_PREFIX = "dj_cli_template_db"
#: A run directory without an owner file (its run died between creating and
#: naming it) is swept once it is this old.
ORPHAN_AGE_S = 3600.0


class AirflowEnvError(DJError, RuntimeError):
    """The Airflow home cannot be prepared (migration failed, unwritable home)."""


def configure_airflow_env(dags_folder: str | None = None) -> str:
    home = os.environ.setdefault("AIRFLOW_HOME", dj_settings.get("airflow_home") or DEFAULT_HOME)
    os.makedirs(home, exist_ok=True)
    os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
    os.environ.setdefault("AIRFLOW__CORE__UNIT_TEST_MODE", "False")
    os.environ.setdefault("AIRFLOW__LOGGING__LOGGING_LEVEL", "INFO")
    if dags_folder:
        os.environ["AIRFLOW__CORE__DAGS_FOLDER"] = dags_folder
    return home


def _airflow_version() -> str:
    """Without importing airflow (that would read the configuration too early)."""
    from importlib import metadata

    for dist in ("apache-airflow-core", "apache-airflow"):
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return "unknown"


@contextlib.contextmanager
def _file_lock(path: str):
    """An exclusive ``flock`` on ``path`` (released by the kernel if this process dies)."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def configured_db_url(home: str) -> str:
    """The metadata DB URL Airflow will use, read the way Airflow does but without importing it:
    the environment first, then ``airflow.cfg``, else Airflow's default SQLite file."""
    env = os.environ.get("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN")
    if env:
        return env
    if os.environ.get("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_CMD") or os.environ.get(
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_SECRET"
    ):
        return "server://configured-by-command-or-secret"  # not SQLite as far as we can tell: share it
    cfg_path = os.environ.get("AIRFLOW_CONFIG") or os.path.join(home, "airflow.cfg")
    parser = configparser.ConfigParser(interpolation=None, strict=False)
    try:
        parser.read(cfg_path, encoding="utf-8")
        value = parser.get("database", "sql_alchemy_conn", fallback="").strip()
    except configparser.Error:
        value = ""
    return value or f"sqlite:///{os.path.join(home, 'airflow.db')}"


def _airflow_bin() -> str:
    return os.path.join(os.path.dirname(sys.executable), "airflow")


def _run_airflow(args: list[str], env: dict, home: str) -> None:
    proc = subprocess.run([_airflow_bin(), *args], capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise AirflowEnvError(
            f"`airflow {' '.join(args)}` failed (AIRFLOW_HOME={home}); fix the error below, "
            f"or point DJ_AIRFLOW_HOME at a fresh directory:\n"
            f"{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
        )


def _write_default_config(home: str) -> None:
    """Let Airflow write its default ``airflow.cfg`` (keys, defaults) once, from a clean environment.

    Airflow writes the file on first import, and a second process importing
    it meanwhile could read it half-written; we call this under the home
    lock, before any run imports Airflow.  The per-run DB and stub-folder
    overrides are left out, so they do not end up in the file.
    """
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", "AIRFLOW__CORE__DAGS_FOLDER")
    }
    proc = subprocess.run(
        [sys.executable, "-c", "import airflow.configuration"], capture_output=True, text=True, env=env
    )
    if proc.returncode != 0:
        raise AirflowEnvError(
            f"Airflow could not write its default configuration (AIRFLOW_HOME={home}); fix the error "
            f"below, or point DJ_AIRFLOW_HOME at a fresh directory:\n{proc.stderr[-3000:]}"
        )


def template_db_path(home: str) -> str:
    return os.path.join(home, f"{TEMPLATE_PREFIX}_{_airflow_version()}.sqlite")


def ensure_template_db(home: str) -> str:
    """A migrated, never-used SQLite metadata DB for this Airflow version; created once, under a lock.

    Built under a temporary name and renamed into place, so a run that
    finds the template finds a complete one.  No run ever opens it: each
    copies it.
    """
    template = template_db_path(home)
    cfg = os.environ.get("AIRFLOW_CONFIG") or os.path.join(home, "airflow.cfg")
    if os.path.exists(template) and os.path.exists(cfg):
        return template
    with _file_lock(os.path.join(home, ".dj_cli_init.lock")):
        if not os.path.exists(cfg):
            _write_default_config(home)
        if os.path.exists(template):
            return template
        fd, tmp = tempfile.mkstemp(prefix=f".{TEMPLATE_PREFIX}.", suffix=".tmp", dir=home)
        os.close(fd)
        os.remove(tmp)  # Airflow creates the file itself
        try:
            env = dict(os.environ, AIRFLOW__DATABASE__SQL_ALCHEMY_CONN=f"sqlite:///{tmp}")
            _run_airflow(["db", "migrate"], env, home)
            # Airflow runs SQLite in WAL mode: fold the log into the main file
            # so the template is one self-contained file to copy.
            con = sqlite3.connect(tmp)
            try:
                con.execute("PRAGMA journal_mode=DELETE")
            finally:
                con.close()
            os.replace(tmp, template)
        finally:
            for leftover in (tmp, tmp + "-wal", tmp + "-shm", tmp + "-journal"):
                with contextlib.suppress(FileNotFoundError):
                    os.remove(leftover)
    return template


def _migrated_marker(home: str, db_url: str) -> str:
    digest = hashlib.sha1(db_url.encode()).hexdigest()[:12]
    return os.path.join(home, f".dj_db_migrated_{_airflow_version()}_{digest}")


def ensure_db(home: str) -> None:
    """Create/upgrade the configured metadata DB once per Airflow version and DB URL.

    For DBs that runs share (a server DB; the test session's DB).  Under a
    lock file: two first runs do not migrate the same DB at once.
    """
    url = configured_db_url(home)
    marker = _migrated_marker(home, url)
    if os.path.exists(marker):
        return
    with _file_lock(os.path.join(home, ".dj_cli_init.lock")):
        if os.path.exists(marker):
            return
        _run_airflow(["db", "migrate"], os.environ.copy(), home)
        with open(marker, "w") as fh:
            fh.write("ok\n")


def write_cli_dag_stub(
    home: str, recipe_path: str, dag_id: str, folder: str | None = None, build_kwargs: dict | None = None
) -> str:
    """A DAG file for one recipe, so dag.test()'s bundle sync finds the DAG we run; returns its folder.

    ``dj-airflow run`` passes its private folder (only this stub, so no other
    recipe is parsed).  Without ``folder`` the stub goes to ``<home>/dj_cli_dags``,
    the folder in-process callers of one process share (the tests' session
    home): there the other stubs are removed, so dag.test() parses one file,
    not every recipe the session ran.  No CLI run uses that folder.

    ``build_kwargs`` are extra ``build_dag`` arguments (what the CLI decided, e.g.
    ``default_group_size``), written into the stub so the DAG Airflow parses from it
    equals the one the CLI built.
    """
    if folder is None:
        folder = os.path.join(home, CLI_DAGS)
        os.makedirs(folder, exist_ok=True)
        for name in os.listdir(folder):
            if name.startswith("dj_cli_") and name.endswith(".py"):
                with contextlib.suppress(FileNotFoundError):
                    os.remove(os.path.join(folder, name))
    os.makedirs(folder, exist_ok=True)
    extra = "".join(f", {k}={v!r}" for k, v in sorted((build_kwargs or {}).items()))
    stub = os.path.join(folder, f"dj_cli_{dag_id.replace('.', '_').replace('-', '_')}.py")
    text = (
        '"""airflow DAG stub written by `dj-airflow run` (regenerated each run)."""\n'
        "from airflow_provider_dj.dag_builder.factory import build_dag\n\n"
        f"dag = build_dag({recipe_path!r}, dag_id={dag_id!r}{extra})\n"
    )
    fd, tmp = tempfile.mkstemp(prefix=".stub.", suffix=".tmp", dir=folder)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    os.replace(tmp, stub)  # a reader sees the old stub or the new one, never half of one
    return folder


# -- private run directories ------------------------------------------------------


def _pid_start_time(pid: int) -> int | None:
    from airflow_provider_dj.engine.jobdir.lock import pid_start_time

    return pid_start_time(pid)


def _owner_alive(owner: dict) -> bool:
    from airflow_provider_dj.engine.jobdir.lock import pid_alive

    if owner.get("host") != socket.gethostname():
        return True  # a home shared between hosts: we cannot tell, so never touch it
    try:
        return pid_alive(int(owner["pid"]), owner.get("pid_start"))
    except (KeyError, TypeError, ValueError):
        return False


def sweep_stale_runs(home: str) -> list[str]:
    """Remove run directories whose owner process is gone (crashed runs); returns those removed.

    A live run's directory is never touched: its owner file names its host,
    pid and the pid's start time (a reused pid does not count as alive).
    """
    root = os.path.join(home, RUNS_DIR)
    try:
        names = os.listdir(root)
    except FileNotFoundError:
        return []
    removed = []
    for name in names:
        path = os.path.join(root, name)
        if not name.startswith("run-") or not os.path.isdir(path):
            continue
        try:
            with open(os.path.join(path, RUN_OWNER_FILE), encoding="utf-8") as fh:
                owner = json.load(fh)
        except (OSError, ValueError):  # no owner file yet, or an unreadable one
            try:
                young = time.time() - os.path.getmtime(path) < ORPHAN_AGE_S
            except FileNotFoundError:
                continue
            if young:
                continue  # being created right now, or too recent to judge
            owner = {}
        if owner and _owner_alive(owner):
            continue
        shutil.rmtree(path, ignore_errors=True)
        removed.append(path)
    return removed


@dataclass
class RunEnv:
    """What one ``dj-airflow run`` owns in the Airflow home."""

    home: str
    run_dir: str | None  # None for an in-process caller (no private directory)
    dags_folder: str
    db_path: str | None  # the private SQLite copy; None when the run uses a shared DB
    saved_env: dict[str, str | None]  # the variables prepare_run set, as they were before

    def cleanup(self) -> None:
        """Remove this run's directory (stub folder, DB copy), nothing of any other run, and
        restore the environment (an in-process caller goes on with its own settings)."""
        if self.db_path is not None and "airflow.settings" in sys.modules:
            with contextlib.suppress(Exception):
                from airflow import settings

                settings.dispose_orm()  # close our connections to the DB file before it goes
        if self.run_dir is not None:
            shutil.rmtree(self.run_dir, ignore_errors=True)
        for key, value in self.saved_env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def reserve_run() -> RunEnv | None:
    """The first half of a private run, before anything in this process imports Airflow.

    Creates this run's directory under ``<home>/dj_cli_runs/`` (its owner file names this process)
    and points AIRFLOW__CORE__DAGS_FOLDER and, with SQLite, AIRFLOW__DATABASE__SQL_ALCHEMY_CONN at
    its stub folder and DB copy, neither written yet: Airflow reads both variables once, at import,
    and does not open the DB until a run does.  :func:`prepare_run` with ``reserved=`` completes it;
    :meth:`RunEnv.cleanup` undoes it.  None when Airflow is already imported (too late to choose)."""
    if "airflow.settings" in sys.modules:
        return None
    try:
        return _reserve_run()
    except OSError as exc:
        raise _home_error(exc) from exc


def _reserve_run() -> RunEnv:
    home = configure_airflow_env()
    saved = {k: os.environ.get(k) for k in ("AIRFLOW__CORE__DAGS_FOLDER", "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN")}
    sweep_stale_runs(home)
    root = os.path.join(home, RUNS_DIR)
    os.makedirs(root, exist_ok=True)
    run_dir = tempfile.mkdtemp(prefix=f"run-{os.getpid()}-", dir=root)
    pid = os.getpid()
    owner = {"host": socket.gethostname(), "pid": pid, "pid_start": _pid_start_time(pid), "started_at": time.time()}
    # Written whole and renamed into place: a sweep by a run starting at this instant never reads half of it.
    tmp_owner = os.path.join(run_dir, RUN_OWNER_FILE + ".tmp")
    with open(tmp_owner, "w", encoding="utf-8") as fh:
        json.dump(owner, fh)
    os.replace(tmp_owner, os.path.join(run_dir, RUN_OWNER_FILE))
    dags = os.path.join(run_dir, "dags")
    db_path = os.path.join(run_dir, "airflow.db")
    os.environ["AIRFLOW__CORE__DAGS_FOLDER"] = dags
    os.environ["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] = f"sqlite:///{db_path}"
    return RunEnv(home=home, run_dir=run_dir, dags_folder=dags, db_path=db_path, saved_env=saved)


def prepare_run(
    recipe_path: str,
    dag_id: str,
    *,
    private: bool = True,
    build_kwargs: dict | None = None,
    reserved: RunEnv | None = None,
) -> RunEnv:
    """Set up this process's Airflow state for one run; with ``reserved`` (:func:`reserve_run`),
    complete that reservation.

    A private run (the ``dj-airflow`` console script) gets its own DAG-stub folder and its own copy
    of a migrated SQLite metadata DB, set in ``os.environ`` before Airflow is imported; that is why
    the private state is for a process that runs one DAG and ends.  An in-process caller that goes
    on using Airflow (a test calling ``cli.main``) passes ``private=False``, and one that imported
    Airflow without a reservation gets the same: the stub goes to the DAG folder Airflow already
    uses (one process, one run at a time) and the configured DB is used (and migrated once).
    ``build_kwargs`` go into the DAG stub (:func:`write_cli_dag_stub`).
    """
    try:
        if reserved is not None:
            return _complete_reserved(reserved, recipe_path, dag_id, build_kwargs)
        if not private or "airflow.settings" in sys.modules:
            return _prepare_shared(recipe_path, dag_id, build_kwargs)
        return _complete_reserved(_reserve_run(), recipe_path, dag_id, build_kwargs)
    except OSError as exc:  # an unwritable or full home: say which and what to do, not a traceback
        raise _home_error(exc) from exc


def _home_error(exc: OSError) -> AirflowEnvError:
    home = os.environ.get("AIRFLOW_HOME") or dj_settings.get("airflow_home") or DEFAULT_HOME
    return AirflowEnvError(
        f"cannot prepare the Airflow home {home} for this run ({exc}); make it writable "
        f"(and free some space), or point DJ_AIRFLOW_HOME at another directory"
    )


def _prepare_shared(recipe_path: str, dag_id: str, build_kwargs: dict | None) -> RunEnv:
    """An in-process caller's run: the DAG folder and DB Airflow was configured with."""
    home = configure_airflow_env()
    folder = None
    if "airflow.settings" in sys.modules:
        from airflow import settings

        folder = getattr(settings, "DAGS_FOLDER", None)
    dags = write_cli_dag_stub(home, recipe_path, dag_id, folder=folder, build_kwargs=build_kwargs)
    if folder is None:
        os.environ["AIRFLOW__CORE__DAGS_FOLDER"] = dags
    ensure_db(home)
    return RunEnv(home=home, run_dir=None, dags_folder=dags, db_path=None, saved_env={})


def _complete_reserved(env: RunEnv, recipe_path: str, dag_id: str, build_kwargs: dict | None) -> RunEnv:
    """The stub and the DB copy of a reserved run; on any error the reservation is undone."""
    try:
        write_cli_dag_stub(env.home, recipe_path, dag_id, folder=env.dags_folder, build_kwargs=build_kwargs)
        # Migrated with this home's configuration (its airflow.cfg), on a file of ours: whatever DB the
        # home names is never opened.
        shutil.copyfile(ensure_template_db(env.home), env.db_path)
    except BaseException:
        env.cleanup()
        raise
    return env
