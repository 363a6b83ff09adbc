"""The docker/ deployment, brought up whole: Airflow on PostgreSQL, a Ray head
and a Ray worker, the demo recipe over the REST API, the export on the
shared work volume.  Skips (see conftest) where no Docker engine runs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
import yaml

pytestmark = pytest.mark.docker

DAG_ID = "dj_demo_compose"
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _api(docker_ip, stack_env) -> str:
    return f"http://{docker_ip}:{stack_env['DJ_API_PORT']}"


def _healthy(url: str) -> bool:
    import httpx

    try:
        r = httpx.get(url + "/api/v2/monitor/health", timeout=5)
        return r.status_code == 200 and r.json()["scheduler"]["status"] == "healthy"
    except Exception:  # noqa: BLE001 - not up yet, whatever the reason: poll again
        return False


def test_demo_dag_runs_on_the_compose_stack(docker_engine, stack_env, docker_ip, docker_services, tmp_path):
    import httpx

    base = _api(docker_ip, stack_env)
    docker_services.wait_until_responsive(check=lambda: _healthy(base), timeout=600, pause=5)
    token = httpx.post(base + "/auth/token", json={"username": "admin", "password": "admin"}, timeout=30).json()[
        "access_token"
    ]
    client = httpx.Client(base_url=base + "/api/v2", headers={"Authorization": f"Bearer {token}"}, timeout=60)

    deadline = time.time() + 300
    while client.get(f"/dags/{DAG_ID}").status_code != 200:  # the dag-processor needs a moment
        assert time.time() < deadline, f"DAG {DAG_ID} never appeared"
        time.sleep(5)
    assert client.patch(f"/dags/{DAG_ID}", json={"is_paused": False}).status_code == 200
    run = client.post(f"/dags/{DAG_ID}/dagRuns", json={"logical_date": None, "conf": {}}).json()
    run_id = run["dag_run_id"]

    deadline = time.time() + 900
    state = None
    while time.time() < deadline:
        state = client.get(f"/dags/{DAG_ID}/dagRuns/{run_id}").json()["state"]
        if state in ("success", "failed"):
            break
        time.sleep(10)
    assert state == "success", f"DAG run ended {state}"

    export = os.path.join(stack_env["DJ_WORK_HOST_DIR"], "export", "demo_corpus_clean.jsonl")
    with open(export, "rb") as fh:
        exported = fh.read()
    jobs = os.path.join(stack_env["DJ_WORK_HOST_DIR"], "jobs")
    summaries = [os.path.join(root, f) for root, _, files in os.walk(jobs) for f in files if f == "job_summary.json"]
    assert len(summaries) == 1, summaries
    with open(summaries[0], encoding="utf-8") as fh:
        summary = json.load(fh)
    assert summary["status"] == "completed"
    assert summary["export"]["rows"] == exported.count(b"\n") > 0
    # The same recipe run directly on this machine gives the same bytes.
    assert exported == _direct_run_export(tmp_path)


def _direct_run_export(tmp_path) -> bytes:
    with open(os.path.join(ROOT, "docker", "recipes", "demo_compose.yaml"), encoding="utf-8") as fh:
        recipe = yaml.safe_load(fh)
    recipe["dataset_path"] = os.path.join(ROOT, "dags", "recipes", "data", "demo_corpus.jsonl")
    recipe["export_path"] = str(tmp_path / "direct" / "export.jsonl")
    recipe["work_dir"] = str(tmp_path / "direct" / "jobs")
    path = tmp_path / "direct_recipe.yaml"
    path.write_text(yaml.safe_dump(recipe), encoding="utf-8")
    cli = os.path.join(os.path.dirname(sys.executable), "dj-airflow")
    subprocess.run([cli, "run", str(path)], check=True, timeout=600)
    return (tmp_path / "direct" / "export.jsonl").read_bytes()
