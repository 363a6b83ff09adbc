"""The job view's FastAPI app: auth on every route, read-only routes, validated job ids.

The auth manager is a stand-in with the interface Airflow's has (token -> user,
is_authorized_dag, get_authorized_dag_ids): the real SimpleAuthManager behind
a real api-server is exercised in tests/e2e/test_job_view.py.
"""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from jwt import ExpiredSignatureError, InvalidTokenError

from airflow_provider_dj.plugins import auth
from airflow_provider_dj.plugins.app import create_app
from tests.unit.plugins.conftest import DAG_ID, FAILED_PARTITION, RUN_ID, resume_failed_partition


class User:
    def __init__(self, name: str, dags: set[str]) -> None:
        self.name, self.dags = name, dags


class FakeAuthManager:
    users = {"alice": User("alice", {DAG_ID}), "bob": User("bob", {"another_dag"})}

    async def get_user_from_token(self, token: str):
        if token == "expired":
            raise ExpiredSignatureError("expired")
        if token not in self.users:
            raise InvalidTokenError("bad signature")
        return self.users[token]

    def is_authorized_dag(self, *, method, user, access_entity=None, details=None):
        assert method == "GET"
        return details is not None and details.id in user.dags

    def get_authorized_dag_ids(self, *, user, method="GET"):
        return set(user.dags)


@pytest.fixture
def client(crashed_job, monkeypatch):
    monkeypatch.setattr(auth, "_auth_manager", lambda: FakeAuthManager())
    monkeypatch.setenv("DJ_WORK_DIR", crashed_job["work"])
    monkeypatch.setenv("DJ_STATE_DIR", str(crashed_job["tmp"] / "state"))
    app = create_app()
    return TestClient(app, root_path="/dj-jobs")


RUN_PATH = f"/dag/{DAG_ID}/run/{RUN_ID}"
ROUTES = [
    "/",
    RUN_PATH,
    f"{RUN_PATH}/task/partitions_seg0/{FAILED_PARTITION}",
    "/job/crashed",
    "/api/job/crashed",
    f"/api/job/crashed/partition/{FAILED_PARTITION}",
    "/api/job/crashed/failed",
    "/api/job/crashed/trace/1",
    "/api/job/crashed/why?row=3",
    "/static/job_view.js",
]


@pytest.mark.parametrize("path", ROUTES)
def test_every_route_refuses_anonymous_and_bad_tokens(client, path):
    assert client.get(path).status_code == 401
    assert client.get(path, headers={"Authorization": "Bearer forged"}).status_code == 401
    assert client.get(path, cookies={"_token": "expired"}).status_code == 401
    assert client.get(path, headers={"Authorization": "Bearer alice"}).status_code == 200


@pytest.mark.parametrize("path", [p for p in ROUTES if p not in ("/", "/static/job_view.js")])
def test_a_user_without_access_to_the_dag_gets_403(client, path):
    r = client.get(path, headers={"Authorization": "Bearer bob"})
    assert r.status_code == 403, r.text
    assert "crashed" not in r.text  # nothing of the job leaks


def test_the_jobs_list_shows_only_jobs_of_readable_dags(client):
    mine = client.get("/", cookies={"_token": "alice"})
    assert "/dj-jobs/job/crashed" in mine.text
    other = client.get("/", cookies={"_token": "bob"})
    assert other.status_code == 200 and "/dj-jobs/job/crashed" not in other.text


def test_the_run_tab_finds_the_job_and_shows_the_failed_partition(client):
    r = client.get(RUN_PATH, cookies={"_token": "alice"})
    assert r.status_code == 200
    assert "<code id='job-id'>crashed</code>" in r.text
    assert 'data-api="/dj-jobs/api/job/crashed"' in r.text
    assert 'data-job-found-by="events"' in r.text  # no metadata DB here: found by its job_start event
    assert "class='cell failed' data-pid='1'" in r.text and r.text.count("class='cell failed'") == 1
    assert "p1 rows 50-99" in r.text
    task = client.get(f"{RUN_PATH}/task/partitions_seg0/{FAILED_PARTITION}", cookies={"_token": "alice"})
    assert 'data-focus="1"' in task.text
    missing = client.get(f"/dag/{DAG_ID}/run/no_such_run", cookies={"_token": "alice"})
    assert missing.status_code == 404 and "validate task has not run" in missing.text


@pytest.mark.parametrize("bad", ["..", "..%2F..%2Fetc", ".hidden", "a..b", "%2Fetc%2Fpasswd", "x" * 200])
def test_job_ids_are_validated_before_any_path_is_built(client, bad):
    r = client.get(f"/api/job/{bad}", headers={"Authorization": "Bearer alice"})
    assert r.status_code in (400, 404), r.text
    assert "root:" not in r.text


def test_every_route_is_a_get_and_nothing_can_change_a_job(client):
    methods = {m for route in client.app.routes for m in getattr(route, "methods", set())}
    assert methods <= {"GET", "HEAD"}
    for verb in ("post", "put", "patch", "delete"):
        assert getattr(client, verb)("/api/job/crashed", headers={"Authorization": "Bearer alice"}).status_code == 405


def test_json_endpoints_page_and_look_up(client, crashed_job):
    h = {"Authorization": "Bearer alice"}
    page = client.get("/api/job/crashed/failed", params={"offset": 2, "limit": 3}, headers=h).json()
    assert [s["input_row"] for s in page["items"]] == crashed_job["nulls"][2:5]
    assert client.get("/api/job/crashed/failed", params={"limit": 100000}, headers=h).status_code == 422
    w = client.get("/api/job/crashed/why", params={"row": crashed_job["nulls"][0]}, headers=h).json()
    assert w["fate"] == "failed"
    # A part of a job that is not there answers 404 naming it (one helper in app.py for every route).
    missing_row = client.get("/api/job/crashed/why", params={"row": 10**6}, headers=h)
    assert missing_row.status_code == 404 and str(10**6) in missing_row.json()["detail"]
    missing_part = client.get("/api/job/crashed/partition/42", headers=h)
    assert (missing_part.status_code, missing_part.json()["detail"]) == (404, "job crashed has no partition 42")
    missing_op = client.get("/api/job/crashed/trace/99", headers=h)
    assert (missing_op.status_code, missing_op.json()["detail"]) == (404, "job crashed has no op 99")
    missing_job = client.get("/api/job/nosuchjob", headers=h)
    assert (missing_job.status_code, missing_job.json()["detail"]) == (404, "job 'nosuchjob' not found")


def test_the_tab_turns_green_after_the_failed_partition_is_retried(client, crashed_job):
    # Last in this module: it changes the module's job (the partition's second try succeeds).
    resume_failed_partition(crashed_job["dir"])
    data = client.get("/api/job/crashed", headers={"Authorization": "Bearer alice"}).json()
    assert [r["cells"][0] for r in data["grid"]["rows"]] == ["completed"] * 4
    assert data["grid"]["counts"]["failed"] == 0
    assert "failed-summary" not in client.get(RUN_PATH, cookies={"_token": "alice"}).text
