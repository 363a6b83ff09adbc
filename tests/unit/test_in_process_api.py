"""in_process_api: the CLI's one-version in-process Execution API, on Airflow's real app.

Each check runs in a fresh interpreter: the in-process API is a process-wide
cache, and building it here would change it for every later test of this
worker.  Nothing is mocked; requests go through the same httpx transport
``dag.test()``'s task runner uses.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

PROBE = """
import json
import httpx
from airflow.api_fastapi.execution_api import versions
from airflow.api_fastapi.execution_api.routes import execution_api_router
from airflow.sdk.api.datamodels import _generated
from airflow.sdk.execution_time.supervisor import in_process_api_server
from airflow_provider_dj.cli.in_process_api import build_for_own_client_only

{setup}
full_versions = [str(v.value) for v in versions.bundle.versions]
routes_before = list(execution_api_router.routes)
built = [build_for_own_client_only(), build_for_own_client_only()]
api = in_process_api_server()
client = httpx.Client(transport=api.transport, base_url="http://in-process.invalid./")
status = {{v: client.get("health/ping", headers={{"Airflow-API-Version": v}}).status_code
          for v in (_generated.API_VERSION, full_versions[-1])}}
print(json.dumps({{
    "built": built,
    "full_versions": full_versions,
    "bundle_after": [str(v.value) for v in versions.bundle.versions],
    "routes_restored": execution_api_router.routes == routes_before,
    "served_versions": sorted(api.app.router.versioned_routers),
    "status": status,
    "client_version": _generated.API_VERSION,
}}))
"""


def _probe(tmp_path, setup: str = "") -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW__")}
    env.update(AIRFLOW_HOME=str(tmp_path), AIRFLOW__CORE__LOAD_EXAMPLES="False", PYTHONPATH=REPO)
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(PROBE.format(setup=setup))],
        env=env,
        cwd=str(tmp_path),
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.integration
def test_the_cli_app_serves_the_clients_version_only_and_leaves_airflows_state_as_it_was(tmp_path):
    got = _probe(tmp_path)
    assert got["built"] == [True, False]  # built once; a second call keeps the cached app
    assert got["served_versions"] == [got["client_version"]]
    assert got["status"][got["client_version"]] == 200
    assert got["status"][got["full_versions"][-1]] == 404  # an older version is not served here
    # Airflow's own bundle and router are back as they were: a full app built later is unchanged.
    assert got["bundle_after"] == got["full_versions"] and len(got["full_versions"]) > 1
    assert got["routes_restored"] is True


@pytest.mark.integration
def test_a_client_that_is_not_on_the_newest_version_gets_airflows_full_app(tmp_path):
    got = _probe(tmp_path, setup="_generated.API_VERSION = versions.bundle.versions[1].value")
    assert got["built"] == [False, False]
    assert got["served_versions"] == sorted(got["full_versions"])
    assert got["status"][got["client_version"]] == 200
