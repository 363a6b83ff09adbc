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
# `dj-airflow run` and run_job(executor="auto") keep small jobs off Ray; the suite's runs are small, and most
# tests are there to exercise Ray's path, so Ray stays on unless a test asks for the local choice
# (tests/integration/test_executor_choice.py sets the setting itself).
os.environ["DJ_LOCAL_WORK_MAX_ROWS"] = "0"
os.makedirs(os.environ["AIRFLOW__CORE__DAGS_FOLDER"], exist_ok=True)

import pytest  # noqa: E402


@pytest.fixture(scope="session")
def session_dir() -> str:
    return _SESSION_DIR


from airflow_provider_dj import settings as dj_settings  # noqa: E402


class _SettingsAwareMonkeyPatch(pytest.MonkeyPatch):
    """``monkeypatch`` whose environment changes the provider's settings see at once.

    The settings are read once per process (airflow_provider_dj/settings.py);
    a test that sets ``DJ_*`` mid-process needs them read again."""

    def setenv(self, name: str, value: str, prepend: str | None = None) -> None:
        super().setenv(name, value, prepend)
        dj_settings.reset()

    def delenv(self, name: str, raising: bool = True) -> None:
        super().delenv(name, raising)
        dj_settings.reset()

    def undo(self) -> None:
        super().undo()
        dj_settings.reset()


@pytest.fixture
def monkeypatch():
    mp = _SettingsAwareMonkeyPatch()
    yield mp
    mp.undo()


@pytest.fixture(autouse=True)
def _fresh_settings():
    """Every test starts from the environment as it is (settings.reset())."""
    dj_settings.reset()
    yield
    dj_settings.reset()


# --- Order of test files under pytest-xdist -------------------------------------------------------------
# scripts/test.sh runs whole files per worker (--dist loadfile) with --no-loadscope-reorder, so files are
# handed out in collection order.  xdist's own default orders files by their number of tests, which puts
# the few-test, minutes-long end-to-end modules last, where one of them alone becomes the run's tail.
# Longest first instead (a longest-processing-time schedule): tests/module_durations.json holds each
# slow file's measured seconds (refresh it with scripts/refresh_test_durations.py from a --durations=0
# log); a file not listed counts as quick and keeps its place after the listed ones.
_DURATIONS_FILE = os.path.join(os.path.dirname(__file__), "module_durations.json")


def pytest_collection_modifyitems(config, items):
    import json

    try:
        with open(_DURATIONS_FILE) as fh:
            seconds = json.load(fh)["seconds"]
    except FileNotFoundError:
        return
    order = {}
    for index, item in enumerate(items):
        module = item.nodeid.split("::", 1)[0]
        order.setdefault(module, (-float(seconds.get(module, 0.0)), index))
    items.sort(key=lambda item: order[item.nodeid.split("::", 1)[0]])
