"""Prepare an Airflow home for in-process runs (``dj-airflow run``, tests).

Airflow reads its configuration when it is first imported, so everything
here must happen before ``import airflow``.  With no AIRFLOW_HOME set we
use ``~/.dj-airflow/airflow`` with SQLite and no example DAGs, and run
``airflow db migrate`` once (about 3 s; skipped while the DB is current).
"""

from __future__ import annotations

import os
import subprocess
import sys

DEFAULT_HOME = os.path.join(os.path.expanduser("~"), ".dj-airflow", "airflow")
CLI_DAGS = "dj_cli_dags"


def configure_airflow_env(dags_folder: str | None = None) -> str:
    home = os.environ.setdefault("AIRFLOW_HOME", os.environ.get("DJ_AIRFLOW_HOME", DEFAULT_HOME))
    os.makedirs(home, exist_ok=True)
    os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
    os.environ.setdefault("AIRFLOW__CORE__UNIT_TEST_MODE", "False")
    os.environ.setdefault("AIRFLOW__LOGGING__LOGGING_LEVEL", "INFO")
    if dags_folder:
        os.environ["AIRFLOW__CORE__DAGS_FOLDER"] = dags_folder
    return home


def _migrated_marker(home: str) -> str:
    import airflow

    return os.path.join(home, f".dj_db_migrated_{airflow.__version__}")


def ensure_db(home: str) -> None:
    """Create/upgrade the metadata DB once per Airflow version (idempotent)."""
    marker = _migrated_marker(home)
    if os.path.exists(marker) and "sql_alchemy_conn" not in os.environ.get("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", ""):
        return
    airflow_bin = os.path.join(os.path.dirname(sys.executable), "airflow")
    proc = subprocess.run([airflow_bin, "db", "migrate"], capture_output=True, text=True, env=os.environ.copy())
    if proc.returncode != 0:
        raise RuntimeError(f"`airflow db migrate` failed (AIRFLOW_HOME={home}):\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
    with open(marker, "w") as fh:
        fh.write("ok\n")


def write_cli_dag_stub(home: str, recipe_path: str, dag_id: str) -> str:
    """A DAG file for one recipe, so dag.test()'s bundle sync finds the DAG we run.

    The folder holds only this stub: other recipes' DAGs are not parsed.
    """
    folder = os.path.join(home, CLI_DAGS)
    os.makedirs(folder, exist_ok=True)
    for name in os.listdir(folder):
        if name.startswith("dj_cli_") and name.endswith(".py"):
            os.remove(os.path.join(folder, name))
    stub = os.path.join(folder, f"dj_cli_{dag_id.replace('.', '_').replace('-', '_')}.py")
    with open(stub, "w") as fh:
        fh.write(
            '"""airflow DAG stub written by `dj-airflow run` (regenerated each run)."""\n'
            "from airflow_provider_dj.dag_factory import build_dag\n\n"
            f"dag = build_dag({recipe_path!r}, dag_id={dag_id!r})\n"
        )
    return folder
