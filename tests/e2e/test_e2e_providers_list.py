"""`airflow providers list` shows this package (issue 2): Airflow finds our provider entry point."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from tests.e2e.airflow_server import VENV_BIN

pytestmark = pytest.mark.e2e


def test_airflow_providers_list_shows_our_provider(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW__")}
    env.update(
        {
            "AIRFLOW_HOME": str(tmp_path / "airflow"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "PATH": VENV_BIN + os.pathsep + env.get("PATH", ""),
        }
    )
    proc = subprocess.run(
        [os.path.join(VENV_BIN, "airflow"), "providers", "list", "--output", "json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    providers = {p["package_name"]: p for p in json.loads(proc.stdout)}
    assert "airflow-provider-dj" in providers, sorted(providers)
    from airflow_provider_dj import __version__

    assert providers["airflow-provider-dj"]["version"] == __version__
