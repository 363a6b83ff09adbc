"""The job view's app behind a real api-server: the plugin is loaded, and the real auth manager guards it.

The server is the session's ``job_view_server`` (tests/e2e/conftest.py), shared with the browser test.

No task runs here: the job directory is made in this process by the engine
(a partition crashed), recorded as a run of the recipe DAG in its events, in
the server's ``DJ_WORK_DIR``; the server parses the recipe's DAG so its id is
real.  The browser test (test_job_view_browser.py) covers a run the
scheduler executed.
"""

from __future__ import annotations

import json
import os
import time
from urllib.parse import quote

import httpx
import pytest

from airflow_provider_dj.engine.config.recipe import load_recipe
from airflow_provider_dj.engine.execution.faults import InjectedFault
from airflow_provider_dj.engine.execution.segment_runner import run_segment
from airflow_provider_dj.engine.jobdir import lock as job_lock
from airflow_provider_dj.engine.jobdir.setup import prepare_job
from airflow_provider_dj.engine.observe.events import EventLog
from tests.e2e.job_view_server import VIEW_DAG, VIEW_PARTS
from tests.helpers_job_view import crash_fault

pytestmark = pytest.mark.e2e

RUN_ID = "manual__2026-12-01T03:00:00+00:00"
JOB_ID = "api_crash"


@pytest.fixture(scope="module")
def view(job_view_server):
    """A job of the recipe DAG whose partition 1 crashed, made here by the engine in the server's work dir."""
    vs = job_view_server
    job_dir = vs.job_dir(JOB_ID)
    os.makedirs(job_dir)
    with open(os.path.join(job_dir, "_fault_injection.json"), "w") as fh:
        json.dump(crash_fault(1), fh)
    recipe = load_recipe(os.path.join(vs.root, "recipes", f"{VIEW_DAG}.yaml"))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DJ_STATE_DIR", os.path.join(vs.root, "state"))  # the server's recent-jobs registry, not ours
        prepared = prepare_job(recipe, job_id=JOB_ID, airflow_run_id=RUN_ID)
    EventLog(job_dir, JOB_ID, writer="validate", defaults={"airflow_dag_id": VIEW_DAG, "airflow_run_id": RUN_ID}).emit(
        "job_start", status="new", partitions=VIEW_PARTS
    )
    for pid in range(VIEW_PARTS):
        try:
            run_segment(prepared.job_dir, 0, pid, try_number=1)
        except InjectedFault:
            pass
    job_lock.release(prepared.job_dir, RUN_ID)
    return vs


def get(view, path: str, token: str | None = None, cookie: str | None = None) -> httpx.Response:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    cookies = {"_token": cookie} if cookie else None
    return httpx.get(view.base_url + path, headers=headers, cookies=cookies, timeout=60)


RUN_PATH = f"/dj-jobs/dag/{VIEW_DAG}/run/{quote(RUN_ID, safe='')}"
PATHS = [
    RUN_PATH,
    f"{RUN_PATH}/task/partitions_seg0/1",
    f"/dj-jobs/job/{JOB_ID}",
    f"/dj-jobs/api/job/{JOB_ID}",
    f"/dj-jobs/api/job/{JOB_ID}/partition/1",
    f"/dj-jobs/api/job/{JOB_ID}/failed?partition=1",
    f"/dj-jobs/api/job/{JOB_ID}/why?row=8",
]


def test_the_plugin_is_registered_with_its_tabs(view):
    plugins = view.client.request("GET", "/api/v2/plugins")["plugins"]
    ours = [p for p in plugins if p["name"] == "data_juicer_job_view"]
    assert len(ours) == 1, plugins
    dests = sorted(v["destination"] for v in ours[0]["external_views"])
    assert dests == ["dag_run", "nav", "task_instance"]
    assert [a["url_prefix"] for a in ours[0]["fastapi_apps"]] == ["/dj-jobs"]
    assert view.client.request("GET", "/api/v2/plugins/importErrors")["import_errors"] == []


def test_anonymous_forged_and_unauthorized_callers_are_refused(view):
    admin, viewer, nobody = view.token("admin"), view.token("viewer"), view.token("nobody")
    forged = admin[:-4] + ("AAAA" if not admin.endswith("AAAA") else "BBBB")
    t0 = time.perf_counter()
    for path in PATHS:
        assert get(view, path).status_code == 401, path
        assert get(view, path, token=forged).status_code == 401, path
        assert get(view, path, cookie="not-a-jwt").status_code == 401, path
        r = get(view, path, token=nobody)
        assert r.status_code == 403, (path, r.text)
        assert "failed" not in r.text and "partition" not in r.text  # nothing of the job leaks
        assert get(view, path, token=viewer).status_code == 200, path
        assert get(view, path, cookie=admin).status_code == 200, path  # the UI's cookie
    assert get(view, "/dj-jobs/", token=nobody).text.count(f"/dj-jobs/job/{JOB_ID}") == 0
    assert get(view, "/dj-jobs/", token=viewer).text.count(f"/dj-jobs/job/{JOB_ID}") == 1
    print(f"{len(PATHS) * 6} auth checks in {time.perf_counter() - t0:.1f} s")


def test_the_run_tab_shows_the_crashed_partition_and_nothing_can_change_it(view):
    admin = view.token("admin")
    page = get(view, RUN_PATH, token=admin)
    assert page.status_code == 200
    assert page.text.count("class='cell failed'") == 1 and "class='cell failed' data-pid='1'" in page.text
    data = get(view, f"/dj-jobs/api/job/{JOB_ID}", token=admin).json()
    assert [r["status"] == "failed" for r in data["grid"]["rows"]] == [False, True, False, False]
    before = sorted(os.listdir(view.job_dir(JOB_ID)))
    for verb in ("POST", "PUT", "PATCH", "DELETE"):
        r = httpx.request(
            verb, view.base_url + f"/dj-jobs/api/job/{JOB_ID}", headers={"Authorization": f"Bearer {admin}"}
        )
        assert r.status_code == 405, (verb, r.status_code)
    assert sorted(os.listdir(view.job_dir(JOB_ID))) == before


@pytest.mark.parametrize("bad", ["..", "%2E%2E", "..%2F..%2Fetc", ".hidden", "a..b", "x" * 200])
def test_job_ids_that_could_escape_the_work_dir_are_refused(view, bad):
    r = get(view, f"/dj-jobs/api/job/{bad}", token=view.token("admin"))
    assert r.status_code in (400, 404), (bad, r.status_code, r.text[:200])
    assert "root:" not in r.text
