"""Per-DAG access with a real per-DAG auth manager: Airflow's FAB auth manager.

``airflow standalone`` always runs SimpleAuthManager, whose roles cover every DAG at once, so this
module starts the same four components itself (api-server, scheduler, dag-processor, triggerer, with
the LocalExecutor) under ``FabAuthManager``.  ``reader_a`` has a role that may read DAG A
(``e2e_acl_a``) and its runs, task instances and review details, and nothing of DAG B
(``e2e_acl_b``), and may edit nothing.  Over HTTP and in a real browser (Debian's Chromium):

* the job view's run tab, the job's page, its JSON and ``why`` answer 200 for A's run and 403 for B's;
* the review gate of A's run, answered by ``reader_a``, is refused by Airflow (403) and recorded nowhere
  as an answer: the task still awaits input, the review detail has no response, the job directory has no
  ``review_answered`` event; the admin's answer then goes through (the control).
"""

from __future__ import annotations

import os
import secrets
import subprocess
from urllib.parse import quote

import httpx
import pytest

from airflow_provider_dj.engine.jobdir.events import read_events
from tests.e2e.airflow_server import VENV_BIN, AirflowServer
from tests.e2e.job_view_server import REVIEW_OPS, REVIEW_SECTION, entry_point_installed
from tests.e2e.test_job_view import browser, chrome_paths, shots, wait  # noqa: F401 - the browser fixtures, shared
from tests.helpers_job_view import view_recipe, write_view_input

pytestmark = pytest.mark.e2e

DAG_A, DAG_B = "e2e_acl_a", "e2e_acl_b"
READER, ROLE = "reader_a", "acl_reader"
FAB = "airflow.providers.fab.auth_manager.fab_auth_manager.FabAuthManager"
#: What ``reader_a``'s role may read: DAG A by name, the sub-entities the job view and the review need.
READER_RESOURCES = (f"DAG:{DAG_A}", "DAG Runs", "Task Instances", "HITL Detail", "Website")
RUN_TIMEOUT = 300


def _reader_ready(home: str) -> str:
    return os.path.join(home, "reader-created")


def _components_command(home: str, admin_pw: str, reader_pw: str) -> list[str]:
    """The metadata DB and the admin (the server's client logs in as it), then the four components in one
    process session, with the reader's role and user created beside them (``_reader_ready`` marks it)."""
    af = os.path.join(VENV_BIN, "airflow")
    admin = f"{af} users create -u admin -p {admin_pw} -r Admin -f Ad -l Min -e admin@example.org"
    reader = (
        f"({af} roles create {ROLE} && "
        f"{af} users create -u {READER} -p {reader_pw} -r {ROLE} -f Re -l Ader -e reader@example.org && "
        f"touch {_reader_ready(home)})"
    )
    components = " & ".join(f"{af} {c}" for c in ("api-server", "scheduler", "dag-processor", "triggerer"))
    script = f"set -e; {af} db migrate > {home}/db-migrate.log 2>&1; {admin}; {components} & {reader} & wait"
    return ["bash", "-c", script]


def _airflow_cli(server: AirflowServer, *args: str) -> str:
    proc = subprocess.run(
        [os.path.join(VENV_BIN, "airflow"), *args],
        env=server.started_env,
        cwd=server.home,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, f"airflow {' '.join(args)}: {proc.stdout[-2000:]}{proc.stderr[-2000:]}"
    return proc.stdout


@pytest.fixture(scope="module")
def acl(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("acl"))
    recipes, work, exports = (os.path.join(root, d) for d in ("recipes", "work", "exports"))
    for d in (recipes, work, exports):
        os.makedirs(d, exist_ok=True)
    data, _nulls = write_view_input(os.path.join(root, "data", "view.jsonl"), 200)
    with open(os.path.join(recipes, f"{DAG_A}.yaml"), "w") as fh:
        fh.write(view_recipe(DAG_A, data, os.path.join(exports, "a.jsonl"), work, 2, ops=REVIEW_OPS) + REVIEW_SECTION)
    with open(os.path.join(recipes, f"{DAG_B}.yaml"), "w") as fh:
        fh.write(view_recipe(DAG_B, data, os.path.join(exports, "b.jsonl"), work, 2))
    home = os.path.join(root, "airflow")
    admin_pw, reader_pw = secrets.token_hex(8), secrets.token_hex(8)
    extra_env = {"AIRFLOW__CORE__AUTH_MANAGER": FAB, "DJ_WORK_DIR": work, "DJ_STATE_DIR": os.path.join(root, "state")}
    if not entry_point_installed():  # the plugin through a shim file, as tests/e2e/job_view_server.py does
        from tests.e2e.job_view_server import PLUGIN_SHIM

        os.makedirs(os.path.join(home, "plugins"), exist_ok=True)
        with open(os.path.join(home, "plugins", "dj_job_view.py"), "w") as fh:
            fh.write(PLUGIN_SHIM)
        extra_env["AIRFLOW__CORE__PLUGINS_FOLDER"] = os.path.join(home, "plugins")
    server = AirflowServer(
        home=home,
        sql_alchemy_conn=f"sqlite:///{os.path.join(home, 'airflow.db')}",
        recipes_dir=recipes,
        extra_env=extra_env,
        command=_components_command(home, admin_pw, reader_pw),
        admin_credentials=("admin", admin_pw),
    )
    client = server.start(timeout=420)
    try:
        for dag_id in (DAG_A, DAG_B):
            client.wait_dag(dag_id)
            client.set_paused(dag_id, False)
        client.wait_for("the reader's role and user", lambda: os.path.exists(_reader_ready(home)) or None, 300)
        _airflow_cli(server, "sync-perm", "--include-dags")  # the per-DAG resources (DAG:e2e_acl_a)
        _airflow_cli(server, "roles", "add-perms", ROLE, "-a", "can_read", "-r", *READER_RESOURCES)
        runs = {
            "a": client.trigger(DAG_A, {"job_id": "acl_job_a"})["dag_run_id"],
            "b": client.trigger(DAG_B, {"job_id": "acl_job_b"})["dag_run_id"],
        }
        yield {"server": server, "client": client, "work": work, "runs": runs, "reader_pw": reader_pw}
    finally:
        server.stop()


def _token(acl, user: str, password: str) -> str:
    resp = httpx.post(f"{acl['server'].base_url}/auth/token", json={"username": user, "password": password}, timeout=60)
    resp.raise_for_status()
    return resp.json()["access_token"]


def _get(acl, path: str, token: str) -> httpx.Response:
    return httpx.get(acl["server"].base_url + path, headers={"Authorization": f"Bearer {token}"}, timeout=60)


def _wait_review_awaits(acl) -> None:
    c, run_id = acl["client"], acl["runs"]["a"]

    def probe():
        tis = {t["task_id"]: t for t in c.task_instances(DAG_A, run_id)}
        review = tis.get("review")
        if review and review["state"] in ("failed", "upstream_failed", "success"):
            raise AssertionError(f"the review ended without asking: {review}")
        return review if review and review["state"] == "awaiting_input" else None

    c.wait_for(f"{DAG_A}/{run_id} to await its review", probe, timeout=RUN_TIMEOUT)


def _paths(job_id: str, dag_id: str, run_id: str) -> list[str]:
    return [
        f"/dj-jobs/dag/{dag_id}/run/{quote(run_id, safe='')}",
        f"/dj-jobs/job/{job_id}",
        f"/dj-jobs/api/job/{job_id}",
        f"/dj-jobs/api/job/{job_id}/why?row=0",
    ]


def test_the_job_view_answers_for_the_dag_a_user_may_read_and_refuses_the_other(acl):
    c = acl["client"]
    final_b = c.wait_run(DAG_B, acl["runs"]["b"], RUN_TIMEOUT)
    assert final_b["state"] == "success", final_b
    _wait_review_awaits(acl)
    reader, admin = _token(acl, READER, acl["reader_pw"]), c.token()
    for path in _paths("acl_job_a", DAG_A, acl["runs"]["a"]):
        r = _get(acl, path, reader)
        assert r.status_code == 200, (path, r.status_code, r.text[:500])
    for path in _paths("acl_job_b", DAG_B, acl["runs"]["b"]):
        r = _get(acl, path, reader)
        assert r.status_code == 403, (path, r.status_code, r.text[:500])
        assert "acl_job_b" not in r.text and "partition" not in r.text.lower()  # nothing of B's job leaks
        assert _get(acl, path, admin).status_code == 200, path  # B's job is there to be read
    # Airflow's own API agrees with the plugin: the reader sees A's runs, not B's.
    assert _get(acl, f"/api/v2/dags/{DAG_A}/dagRuns", reader).status_code == 200
    assert _get(acl, f"/api/v2/dags/{DAG_B}/dagRuns", reader).status_code == 403


def test_a_review_answer_from_a_user_without_the_right_is_refused_and_recorded_nowhere(acl):
    c, run_id = acl["client"], acl["runs"]["a"]
    _wait_review_awaits(acl)
    path = f"/api/v2/dags/{DAG_A}/dagRuns/{quote(run_id, safe='')}/taskInstances/review/-1/hitlDetails"
    reader = _token(acl, READER, acl["reader_pw"])
    for option in ("Approve", "Reject"):
        r = httpx.patch(
            acl["server"].base_url + path,
            json={"chosen_options": [option], "params_input": {}},
            headers={"Authorization": f"Bearer {reader}"},
            timeout=60,
        )
        assert r.status_code == 403, (option, r.status_code, r.text[:500])
    assert _get(acl, path, reader).status_code == 200  # the reader may read the question
    detail = c.request("GET", path)
    assert not detail.get("response_received") and not detail.get("chosen_options"), detail
    tis = {t["task_id"]: t["state"] for t in c.task_instances(DAG_A, run_id)}
    assert tis["review"] == "awaiting_input" and tis["export"] not in ("success", "running"), tis
    job_dir = os.path.join(acl["work"], "acl_job_a")
    assert [e["event_type"] for e in read_events(job_dir) if e["event_type"] == "review_answered"] == []
    assert not os.path.exists(os.path.join(os.path.dirname(acl["work"]), "exports", "a.jsonl"))
    # The control: the admin may answer, and the answer is recorded.
    c.request("PATCH", path, json={"chosen_options": ["Reject"], "params_input": {}})
    assert c.wait_run(DAG_A, run_id, RUN_TIMEOUT)["state"] == "failed"
    answered = [e["status"] for e in read_events(job_dir) if e["event_type"] == "review_answered"]
    assert answered == ["rejected"]


def test_in_a_browser_the_reader_sees_a_jobs_tab_and_is_refused_b(acl, browser, shots):
    """A person logs in on FAB's login page and opens both jobs' pages in Chromium."""
    from selenium.webdriver.common.by import By

    driver = browser
    driver.delete_all_cookies()
    base = acl["server"].base_url
    driver.get(f"{base}/auth/login/")
    wait(driver, "FAB's login form", lambda d: d.find_elements(By.NAME, "username"))
    driver.find_element(By.NAME, "username").send_keys(READER)
    driver.find_element(By.NAME, "password").send_keys(acl["reader_pw"])
    driver.find_element(By.CSS_SELECTOR, "input[type=submit], button[type=submit]").click()
    wait(driver, "the login to finish", lambda d: "/auth/login" not in d.current_url)
    runs = acl["runs"]
    for path in (f"/dj-jobs/dag/{DAG_A}/run/{quote(runs['a'], safe='')}", "/dj-jobs/job/acl_job_a"):
        driver.get(base + path)  # the run's tab (what its iframe loads) and the job's page
        wait(driver, f"A's partition grid at {path}", lambda d: d.find_elements(By.ID, "partition-grid"))
        driver.save_screenshot(os.path.join(shots, f"per_dag_a_{path.split('/')[2]}.png"))
    for path in (f"/dj-jobs/dag/{DAG_B}/run/{quote(runs['b'], safe='')}", "/dj-jobs/job/acl_job_b"):
        driver.get(base + path)
        body = wait(driver, f"B's answer at {path}", lambda d: d.find_element(By.TAG_NAME, "body").text.strip())
        assert not driver.find_elements(By.ID, "partition-grid"), body
        assert f"Not allowed to read DAG '{DAG_B}'" in body, body
        driver.save_screenshot(os.path.join(shots, f"per_dag_b_{path.split('/')[2]}.png"))
