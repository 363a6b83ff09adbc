"""Test-wide setup.

Airflow reads its configuration at import, so the isolated AIRFLOW_HOME (a
fresh SQLite DB per session) is set here, before any test module imports
airflow.  Nothing is mocked: integration tests use a real Airflow
(``dag.test()``) and a real local Ray started once per session.
"""

from __future__ import annotations

import os
import tempfile

_SESSION_DIR = tempfile.mkdtemp(prefix="dj-tests-")
os.environ["AIRFLOW_HOME"] = os.path.join(_SESSION_DIR, "airflow")
os.environ["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"
os.environ["AIRFLOW__CORE__DAGS_FOLDER"] = os.path.join(_SESSION_DIR, "airflow", "dj_cli_dags")
os.environ["DJ_TASK_RETRY_DELAY_S"] = "0"
os.environ["DJ_RAY_STATE_DIR"] = os.path.join(_SESSION_DIR, "ray-state")
os.environ["DJ_STATE_DIR"] = os.path.join(_SESSION_DIR, "dj-state")  # the recent-jobs registry, not ~/.cache
os.environ.pop("RAY_ADDRESS", None)
os.makedirs(os.environ["AIRFLOW__CORE__DAGS_FOLDER"], exist_ok=True)

import pytest  # noqa: E402


@pytest.fixture(scope="session")
def session_dir() -> str:
    return _SESSION_DIR
