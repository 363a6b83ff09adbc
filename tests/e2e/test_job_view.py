"""The job view behind a real ``airflow standalone``: its app under the real auth manager, and a real browser.

One module, so one server serves both halves (``job_view_server``, tests/e2e/job_view_server.py):
its start-up is most of their time.

**The app** (first half): the plugin is loaded, and the real auth manager guards it.

No task runs here: the job directory is made in this process by the engine
(a partition crashed), recorded as a run of the recipe DAG in its events, in
the server's ``DJ_WORK_DIR``; the server parses the recipe's DAG so its id is
real.  The browser half covers a run the scheduler executed.

**In a browser** (second half): headless Chromium (Debian's) driven by Selenium.

The on-call path, click by click: log in on Airflow's login page, open the
DAG run whose partition crashed, open its "Data-Juicer job" tab (the plugin's
iframe, fed by the UI's own cookie), see the failed partition in the grid
under the name Airflow's grid gives it, open its failed samples, ask "why"
about a row the filter removed; then clear the failed task instance with the
REST call the UI's Clear button makes, sent from the logged-in page itself
(the UI's session), and watch the tab turn green.

Chromium comes from ``scripts/chromium_for_tests.sh`` (installed from Debian's
packages when missing and root); without it the test skips here and fails
under CI (``CI`` set).  Last, the navigation's "Data-Juicer jobs" entry lists the job.
Screenshots go to ``$DJ_SCREENSHOT_DIR`` (default: the test's tmp dir); docs/img/job_view_*.png are ones this test took.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from urllib.parse import quote

import httpx
import pytest

from airflow_provider_dj.engine.config.recipe import load_recipe
from airflow_provider_dj.engine.execution.segment_runner import run_segment
from airflow_provider_dj.engine.job.setup import prepare_job
from airflow_provider_dj.engine.jobdir import lock as job_lock
from airflow_provider_dj.engine.jobdir.events import EventLog
from airflow_provider_dj.engine.jobdir.faults import InjectedFault
from tests.e2e.airflow_server import REPO_ROOT, SQLITE_BUSY_TIMEOUT_S
from tests.e2e.job_view_server import (
    IMAGES_DAG,
    REVIEW_DAG,
    REVIEW_TIMEOUT_DAG,
    REVIEW_TIMEOUT_S,
    VIEW_DAG,
    VIEW_PARTS,
    VIEW_ROWS,
)
from tests.helpers_job_view import crash_fault, filtered_rows
from tests.integration.crash_helpers import write_faults

pytestmark = pytest.mark.e2e

RUN_ID = "manual__2026-12-01T03:00:00+00:00"
API_JOB_ID = "api_crash"


@pytest.fixture(scope="module")
def api_view(job_view_server):
    """A job of the recipe DAG whose partition 1 crashed, made here by the engine in the server's work dir."""
    vs = job_view_server
    job_dir = vs.job_dir(API_JOB_ID)
    os.makedirs(job_dir)
    with open(os.path.join(job_dir, "_fault_injection.json"), "w") as fh:
        json.dump(crash_fault(1), fh)
    recipe = load_recipe(os.path.join(vs.root, "recipes", f"{VIEW_DAG}.yaml"))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DJ_STATE_DIR", os.path.join(vs.root, "state"))  # the server's recent-jobs registry, not ours
        prepared = prepare_job(recipe, job_id=API_JOB_ID, airflow_run_id=RUN_ID)
    EventLog(
        job_dir, API_JOB_ID, writer="validate", defaults={"airflow_dag_id": VIEW_DAG, "airflow_run_id": RUN_ID}
    ).emit("job_start", status="new", partitions=VIEW_PARTS)
    for pid in range(VIEW_PARTS):
        try:
            run_segment(prepared.job_dir, 0, pid, try_number=1)
        except InjectedFault:
            pass
    job_lock.release(prepared.job_dir, RUN_ID)
    return vs


def get(api_view, path: str, token: str | None = None, cookie: str | None = None) -> httpx.Response:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    cookies = {"_token": cookie} if cookie else None
    return httpx.get(api_view.base_url + path, headers=headers, cookies=cookies, timeout=60)


RUN_PATH = f"/dj-jobs/dag/{VIEW_DAG}/run/{quote(RUN_ID, safe='')}"
PATHS = [
    RUN_PATH,
    f"{RUN_PATH}/task/partitions_seg0/1",
    f"/dj-jobs/job/{API_JOB_ID}",
    f"/dj-jobs/api/job/{API_JOB_ID}",
    f"/dj-jobs/api/job/{API_JOB_ID}/partition/1",
    f"/dj-jobs/api/job/{API_JOB_ID}/failed?partition=1",
    f"/dj-jobs/api/job/{API_JOB_ID}/why?row=8",
]


def test_the_plugin_is_registered_with_its_tabs(api_view):
    plugins = api_view.client.request("GET", "/api/v2/plugins")["plugins"]
    ours = [p for p in plugins if p["name"] == "data_juicer_job_view"]
    assert len(ours) == 1, plugins
    dests = sorted(v["destination"] for v in ours[0]["external_views"])
    assert dests == ["dag_run", "nav", "task_instance"]
    assert [a["url_prefix"] for a in ours[0]["fastapi_apps"]] == ["/dj-jobs"]
    assert api_view.client.request("GET", "/api/v2/plugins/importErrors")["import_errors"] == []


def test_anonymous_forged_and_unauthorized_callers_are_refused(api_view):
    admin, viewer, nobody = api_view.token("admin"), api_view.token("viewer"), api_view.token("nobody")
    forged = admin[:-4] + ("AAAA" if not admin.endswith("AAAA") else "BBBB")
    t0 = time.perf_counter()
    for path in PATHS:
        assert get(api_view, path).status_code == 401, path
        assert get(api_view, path, token=forged).status_code == 401, path
        assert get(api_view, path, cookie="not-a-jwt").status_code == 401, path
        r = get(api_view, path, token=nobody)
        assert r.status_code == 403, (path, r.text)
        assert "failed" not in r.text and "partition" not in r.text  # nothing of the job leaks
        assert get(api_view, path, token=viewer).status_code == 200, path
        assert get(api_view, path, cookie=admin).status_code == 200, path  # the UI's cookie
    assert get(api_view, "/dj-jobs/", token=nobody).text.count(f"/dj-jobs/job/{API_JOB_ID}") == 0
    assert get(api_view, "/dj-jobs/", token=viewer).text.count(f"/dj-jobs/job/{API_JOB_ID}") == 1
    print(f"{len(PATHS) * 6} auth checks in {time.perf_counter() - t0:.1f} s")


def test_the_run_tab_shows_the_crashed_partition_and_nothing_can_change_it(api_view):
    admin = api_view.token("admin")
    page = get(api_view, RUN_PATH, token=admin)
    assert page.status_code == 200
    assert page.text.count("class='cell failed'") == 1 and "class='cell failed' data-pid='1'" in page.text
    data = get(api_view, f"/dj-jobs/api/job/{API_JOB_ID}", token=admin).json()
    assert [r["status"] == "failed" for r in data["grid"]["rows"]] == [False, True, False, False]
    before = sorted(os.listdir(api_view.job_dir(API_JOB_ID)))
    for verb in ("POST", "PUT", "PATCH", "DELETE"):
        r = httpx.request(
            verb, api_view.base_url + f"/dj-jobs/api/job/{API_JOB_ID}", headers={"Authorization": f"Bearer {admin}"}
        )
        assert r.status_code == 405, (verb, r.status_code)
    assert sorted(os.listdir(api_view.job_dir(API_JOB_ID))) == before


@pytest.mark.parametrize("bad", ["..", "%2E%2E", "..%2F..%2Fetc", ".hidden", "a..b", "x" * 200])
def test_job_ids_that_could_escape_the_work_dir_are_refused(api_view, bad):
    r = get(api_view, f"/dj-jobs/api/job/{bad}", token=api_view.token("admin"))
    assert r.status_code in (400, 404), (bad, r.status_code, r.text[:200])
    assert "root:" not in r.text


# -- in a real browser ------------------------------------------------------------

CRASHED = 1
BROWSER_JOB_ID = "browser_crash"


def _unavailable(why: str):
    if os.environ.get("CI"):
        pytest.fail(f"CI must run the browser test, but {why}")
    pytest.skip(why)


@pytest.fixture(scope="module")
def chrome_paths():
    try:
        import selenium  # noqa: F401
    except ImportError:
        _unavailable("selenium is not installed (it is in the test extra: pip install -e '.[test]')")
    proc = subprocess.run(
        ["bash", os.path.join(REPO_ROOT, "scripts", "chromium_for_tests.sh")],
        capture_output=True,
        text=True,
        timeout=900,
    )
    if proc.returncode != 0:
        _unavailable(f"no headless Chromium: {proc.stderr.strip()[-800:]}")
    browser, driver = proc.stdout.split()
    return browser, driver


@pytest.fixture(scope="module")
def browser_view(chrome_paths, request):
    """The session's job view server (shared with the app tests above), with a run whose partition 1
    crashed (the run failed).  chrome_paths first: without a browser nothing is started."""
    vs = request.getfixturevalue("job_view_server")
    write_faults(vs.job_dir(BROWSER_JOB_ID), crash_fault(CRASHED))
    vs.client.set_paused(VIEW_DAG, False)
    run_id = vs.client.trigger(VIEW_DAG, {"job_id": BROWSER_JOB_ID})["dag_run_id"]
    run = vs.client.wait_run(VIEW_DAG, run_id, timeout=480)
    assert run["state"] == "failed", vs.server.log_tail()
    vs.run_id = run_id
    return vs


@pytest.fixture(scope="module")
def browser(chrome_paths):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = chrome_paths[0]
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1400,1000"):
        opts.add_argument(arg)
    driver = webdriver.Chrome(service=Service(chrome_paths[1]), options=opts)
    driver.set_page_load_timeout(120)
    # The page's own REST calls (execute_async_script) wait for the server's answer, which may wait for
    # SQLite's write lock (the busy timeout, tests/e2e/airflow_server.py): Selenium's default is 30 s.
    driver.set_script_timeout(SQLITE_BUSY_TIMEOUT_S + 60)
    yield driver
    driver.quit()


@pytest.fixture(scope="module")
def shots(tmp_path_factory):
    d = os.environ.get("DJ_SCREENSHOT_DIR") or str(tmp_path_factory.mktemp("screenshots"))
    os.makedirs(d, exist_ok=True)
    return d


def wait(driver, what: str, predicate, timeout: float = 90):
    from selenium.common.exceptions import WebDriverException
    from selenium.webdriver.support.ui import WebDriverWait

    try:
        return WebDriverWait(driver, timeout, poll_frequency=0.5, ignored_exceptions=(WebDriverException,)).until(
            lambda d: predicate(d)
        )
    except Exception as exc:
        raise AssertionError(f"timed out waiting for {what}; page: {driver.current_url}") from exc


def open_tab(driver, browser_view, dag_id: str = VIEW_DAG, run_id: str | None = None) -> None:
    """The DAG run's page (the view DAG's browser run unless named), then its "Data-Juicer job" tab;
    leaves the driver inside the tab's iframe."""
    from selenium.webdriver.common.by import By

    driver.switch_to.default_content()
    run_id = run_id or browser_view.run_id
    driver.get(f"{browser_view.base_url}/dags/{dag_id}/runs/{quote(run_id, safe='')}")
    tab = wait(
        driver,
        "the Data-Juicer job tab",
        lambda d: next((e for e in d.find_elements(By.XPATH, "//*[normalize-space(text())='Data-Juicer job']")), None),
    )
    tab.click()
    frame = wait(
        driver,
        "the tab's iframe",
        lambda d: next(
            (f for f in d.find_elements(By.TAG_NAME, "iframe") if "dj-jobs" in (f.get_attribute("src") or "")), None
        ),
    )
    driver.switch_to.frame(frame)
    wait(driver, "the partition grid", lambda d: d.find_elements(By.ID, "partition-grid"))


def log_in(driver, vs) -> None:
    """Sign in as admin through the login form, as a person does (a new session each time)."""
    from selenium.webdriver.common.by import By

    driver.switch_to.default_content()
    driver.delete_all_cookies()
    driver.get(f"{vs.base_url}/auth/login?next=%2F")
    wait(driver, "the login form", lambda d: d.find_elements(By.NAME, "username"))
    driver.find_element(By.NAME, "username").send_keys("admin")
    driver.find_element(By.NAME, "password").send_keys(vs.password("admin"))
    next(b for b in driver.find_elements(By.TAG_NAME, "button") if b.text.strip() == "Sign in").click()
    wait(driver, "the login to finish", lambda d: "/auth/login" not in d.current_url)


def test_on_call_sees_the_failed_partition_explains_a_row_and_retries_it(browser_view, browser, shots):
    from selenium.webdriver.common.by import By

    d = browser
    log_in(d, browser_view)

    # -- the tab shows the crashed partition, named as in Airflow's grid ---------------------
    open_tab(d, browser_view)
    tis = browser_view.client.task_instances(VIEW_DAG, browser_view.run_id)
    failed_tis = [t for t in tis if t["task_id"] == "partitions_seg0" and t["state"] == "failed"]
    assert [t["map_index"] for t in failed_tis] == [CRASHED]
    airflow_name = failed_tis[0]["rendered_map_index"]
    size = VIEW_ROWS // VIEW_PARTS
    assert airflow_name == f"p{CRASHED} rows {CRASHED * size}-{(CRASHED + 1) * size - 1}"
    cells = d.find_elements(By.CSS_SELECTOR, "td.cell.failed")
    assert [c.get_attribute("data-pid") for c in cells] == [str(CRASHED)]
    row = d.find_element(By.CSS_SELECTOR, f"#partition-grid tr[data-pid='{CRASHED}']")
    assert row.find_element(By.CSS_SELECTOR, "a.open-partition").text == airflow_name
    summary = d.find_element(By.ID, "failed-summary").text
    assert airflow_name in summary and f"partitions_seg0[{CRASHED}]" in summary
    assert d.find_element(By.ID, "resume-token").text == BROWSER_JOB_ID
    # found through validate's XCom in Airflow's metadata DB, not the fallback search
    assert d.find_element(By.TAG_NAME, "body").get_attribute("data-job-found-by") == "xcom"
    d.switch_to.default_content()
    d.save_screenshot(os.path.join(shots, "job_view_failed_run.png"))

    # -- its failed samples: the rows with a null text in that partition, with the reason ---
    d.switch_to.frame(d.find_element(By.CSS_SELECTOR, "iframe[src*='dj-jobs']"))
    cells[0].click()
    wait(d, "the partition's failed samples", lambda d: d.find_elements(By.CSS_SELECTOR, "#partition-failed table tr"))
    body = d.find_element(By.ID, "partition-body").text
    assert "InjectedFault" in d.find_element(By.ID, "partition-error").text
    mine = [r for r in browser_view.nulls if CRASHED * size <= r < (CRASHED + 1) * size]
    rows = d.find_elements(By.CSS_SELECTOR, "#partition-failed table tr")[1:]
    assert [int(r.find_elements(By.TAG_NAME, "td")[0].text) for r in rows] == mine[:20]
    assert "'text' is missing or null" in body and "whitespace_normalization_mapper" in body
    assert "words_num_filter" in d.find_element(By.ID, "partition-log").text
    d.switch_to.default_content()
    d.save_screenshot(os.path.join(shots, "job_view_failed_samples.png"))

    # -- why is this row not exported? -------------------------------------------------------
    removed = filtered_rows(browser_view.job_dir(BROWSER_JOB_ID))
    assert removed, "the filter removed no row in the partitions that ran"
    d.switch_to.frame(d.find_element(By.CSS_SELECTOR, "iframe[src*='dj-jobs']"))
    box = d.find_element(By.ID, "why-row")
    box.clear()
    box.send_keys(str(removed[0]))
    d.find_element(By.ID, "why-go").click()
    answer = wait(
        d, "the why answer", lambda d: (d.find_element(By.ID, "why-result").text or "").count("filtered") and d
    )
    text = answer.find_element(By.ID, "why-result").text
    assert f"row {removed[0]}: filtered" in text and "words_num_filter" in text and "num_words" in text
    d.execute_script("document.getElementById('why-form').scrollIntoView()")
    d.switch_to.default_content()
    d.save_screenshot(os.path.join(shots, "job_view_why.png"))

    # -- clear the failed task instance with the UI's own REST call, from the UI's session --
    status = d.execute_async_script(
        """
        const [dag, run, done] = arguments;
        fetch('/api/v2/dags/' + encodeURIComponent(dag) + '/clearTaskInstances', {
          method: 'POST', credentials: 'same-origin', headers: {'Content-Type': 'application/json'},
          body: JSON.stringify({dry_run: false, dag_run_id: run, task_ids: [['partitions_seg0', %d]],
                                include_downstream: true, only_failed: false, reset_dag_runs: true})
        }).then(r => done(r.status)).catch(e => done(String(e)));
        """
        % CRASHED,
        VIEW_DAG,
        browser_view.run_id,
    )
    assert status == 200, status
    run = browser_view.client.wait_run(VIEW_DAG, browser_view.run_id, timeout=480)
    assert run["state"] == "success", browser_view.server.log_tail()
    retried = [
        t
        for t in browser_view.client.task_instances(VIEW_DAG, browser_view.run_id)
        if t["task_id"] == "partitions_seg0"
    ]
    assert {t["map_index"]: t["try_number"] for t in retried} == {0: 1, 1: 2, 2: 1, 3: 1}

    # -- the tab turns green -----------------------------------------------------------------
    open_tab(d, browser_view)
    wait(d, "a grid without failed cells", lambda d: not d.find_elements(By.CSS_SELECTOR, "td.cell.failed"))
    states = {c.get_attribute("data-state") for c in d.find_elements(By.CSS_SELECTOR, "td.cell")}
    assert states == {"completed"}
    assert d.find_element(By.CSS_SELECTOR, "h1 .badge").text == "completed"
    assert not d.find_elements(By.ID, "failed-summary")
    d.switch_to.default_content()
    d.save_screenshot(os.path.join(shots, "job_view_green.png"))

    # -- the navigation entry lists the job -----------------------------------------------------
    d.get(f"{browser_view.base_url}/plugin/dj-jobs")
    frame = wait(
        d,
        "the jobs list's iframe",
        lambda d: next(
            (f for f in d.find_elements(By.TAG_NAME, "iframe") if "dj-jobs" in (f.get_attribute("src") or "")), None
        ),
    )
    d.switch_to.frame(frame)
    link = wait(
        d, "the job in the list", lambda d: d.find_elements(By.CSS_SELECTOR, f"#jobs a[href$='/job/{BROWSER_JOB_ID}']")
    )
    assert link[0].text == BROWSER_JOB_ID
    assert link[0].find_element(By.XPATH, "../..").text.split()[1] == "completed"
    d.switch_to.default_content()
    with open(os.path.join(shots, "screenshots.json"), "w") as fh:
        json.dump(sorted(os.listdir(shots)), fh)
    print(f"screenshots in {shots} ({time.strftime('%H:%M:%S')})")


# -- the review gate (docs/review_gate.md): approve and reject over REST, one look in the browser ----------


def _wait_awaiting_review(vs, run_id: str, dag_id: str = REVIEW_DAG) -> dict:
    """The run's review task, once it waits for an answer (Airflow 3.3: state awaiting_input)."""

    def probe():
        tis = {t["task_id"]: t for t in vs.client.task_instances(dag_id, run_id)}
        review = tis.get("review")
        if review and review["state"] in ("failed", "upstream_failed", "success"):
            raise AssertionError(f"review ended without asking: {review}\n{vs.server.log_tail()}")
        return review if review and review["state"] in ("awaiting_input", "deferred") else None

    review = vs.client.wait_for(f"{dag_id}/{run_id} to await its review", probe, timeout=300)
    # Airflow 3.3's scheduler must also have taken the executor's event for the paused workload: an
    # answer that lands before it re-queues the task, and the late event then fails it ("finished with
    # state success, but the task instance's state attribute is queued").  A person never answers that
    # fast; this test does, so it waits for the scheduler's own line for that event.
    finished = f"TaskInstance Finished: dag_id={dag_id}, task_id=review, run_id={run_id},"
    vs.client.wait_for(
        f"the scheduler to take {dag_id}/{run_id}'s paused review",
        lambda: any(finished in ln and "state=awaiting_input" in ln for ln in _server_lines(vs)) or None,
        timeout=120,
    )
    return review


def _server_lines(vs) -> list[str]:
    with open(vs.server.log_path, encoding="utf-8", errors="replace") as fh:
        return fh.readlines()


def _hitl_path(run_id: str, dag_id: str = REVIEW_DAG) -> str:
    return f"/api/v2/dags/{dag_id}/dagRuns/{quote(run_id, safe='')}/taskInstances/review/-1/hitlDetails"


def _answer(vs, run_id: str, option: str) -> dict:
    return vs.client.request("PATCH", _hitl_path(run_id), json={"chosen_options": [option], "params_input": {}})


def _login(d, vs) -> None:
    from selenium.webdriver.common.by import By

    d.get(f"{vs.base_url}/auth/login?next=%2F")
    if "/auth/login" not in d.current_url:
        return  # already logged in (the on-call test above)
    wait(d, "the login form", lambda d: d.find_elements(By.NAME, "username"))
    d.find_element(By.NAME, "username").send_keys("admin")
    d.find_element(By.NAME, "password").send_keys(vs.password("admin"))
    next(b for b in d.find_elements(By.TAG_NAME, "button") if b.text.strip() == "Sign in").click()
    wait(d, "the login to finish", lambda d: "/auth/login" not in d.current_url)


def _review_events(job_dir: str) -> list[tuple[str, str]]:
    from airflow_provider_dj.engine.jobdir.events import read_events

    return [(e["event_type"], e["status"]) for e in read_events(job_dir) if e["event_type"].startswith("review_")]


def test_the_review_gate_waits_then_approve_exports_and_reject_fails(job_view_server, browser, shots):
    """Two runs of a recipe whose review bound is crossed: approved over REST, its export holds the rows
    that passed; rejected, the run fails with no export and the checkpoints kept.  The review's page in
    the UI is screenshotted (docs/img/review_gate_required_action.png)."""
    from selenium.webdriver.common.by import By

    vs = job_view_server
    exports = os.path.join(vs.root, "exports")
    vs.client.set_paused(REVIEW_DAG, False)
    runs = {}
    for job_id in ("review_approve", "review_reject"):
        conf = {"job_id": job_id, "export_path": os.path.join(exports, f"{job_id}.jsonl")}
        run_id = vs.client.trigger(REVIEW_DAG, conf)["dag_run_id"]
        review = _wait_awaiting_review(vs, run_id)
        detail = vs.client.request("GET", _hitl_path(run_id))
        assert detail["options"] == ["Approve", "Reject"] and detail["defaults"] == ["Reject"]
        assert "words_num_filter removed" in detail["subject"]
        assert "review.max_removed_fraction 5.0%" in detail["body"] and "Removed rows and why" in detail["body"]
        assert f"/dj-jobs/job/{job_id}" in detail["body"]
        if job_id == "review_reject":  # one look at the review in the UI, as a reviewer sees it
            _login(browser, vs)
            browser.get(f"{vs.base_url}/dags/{REVIEW_DAG}/runs/{quote(run_id, safe='')}/tasks/review/required_actions")
            wait(browser, "the review's body", lambda d: "Bounds crossed" in d.find_element(By.TAG_NAME, "body").text)
            time.sleep(1)  # the markdown's last paint
            browser.save_screenshot(os.path.join(shots, "review_gate_required_action.png"))
        _answer(vs, run_id, "Approve" if job_id == "review_approve" else "Reject")
        runs[job_id] = vs.client.wait_run(REVIEW_DAG, run_id, timeout=300)
        assert review["task_id"] == "review"

    assert runs["review_approve"]["state"] == "success", vs.server.log_tail()
    approved_dir = vs.job_dir("review_approve")
    summary = json.load(open(os.path.join(approved_dir, "job_summary.json")))
    with open(os.path.join(exports, "review_approve.jsonl"), encoding="utf-8") as fh:
        rows = [json.loads(line) for line in fh]
    assert len(rows) == summary["export"]["rows"] == summary["ops"][-1]["rows_out"] > 0
    assert _review_events(approved_dir) == [("review_decided", "review"), ("review_answered", "approved")]

    assert runs["review_reject"]["state"] == "failed", vs.server.log_tail()
    rejected_dir = vs.job_dir("review_reject")
    tis = {t["task_id"]: t["state"] for t in vs.client.task_instances(REVIEW_DAG, runs["review_reject"]["dag_run_id"])}
    assert tis["review"] == "failed" and tis["export"] == "upstream_failed"
    assert not os.path.exists(os.path.join(exports, "review_reject.jsonl"))
    assert any(n.startswith("checkpoint_op_") for n in os.listdir(os.path.join(rejected_dir, "checkpoints")))
    assert _review_events(rejected_dir) == [("review_decided", "review"), ("review_answered", "rejected")]


def test_a_review_nobody_answers_is_rejected_by_the_scheduler_at_its_deadline(job_view_server):
    """``review.timeout_s`` with ``on_timeout: reject`` and nobody answering: Airflow's scheduler (its
    awaiting-input sweep, not our code) gives the recipe's default at the deadline; the review task
    fails with the timeout recorded, the export never runs, nothing is exported, the checkpoints stay."""
    vs = job_view_server
    exports = os.path.join(vs.root, "exports")
    job_id = "review_timeout"
    export = os.path.join(exports, f"{job_id}.jsonl")
    vs.client.set_paused(REVIEW_TIMEOUT_DAG, False)
    run_id = vs.client.trigger(REVIEW_TIMEOUT_DAG, {"job_id": job_id, "export_path": export})["dag_run_id"]
    asked_at = time.monotonic()
    _wait_awaiting_review(vs, run_id, REVIEW_TIMEOUT_DAG)
    detail = vs.client.request("GET", _hitl_path(run_id, REVIEW_TIMEOUT_DAG))
    assert detail["defaults"] == ["Reject"] and detail["response_received"] is False

    run = vs.client.wait_run(REVIEW_TIMEOUT_DAG, run_id, timeout=300)
    assert run["state"] == "failed", vs.server.log_tail()
    assert time.monotonic() - asked_at >= REVIEW_TIMEOUT_S - 5  # the deadline, not an early failure
    tis = {t["task_id"]: t["state"] for t in vs.client.task_instances(REVIEW_TIMEOUT_DAG, run_id)}
    assert tis["review"] == "failed" and tis["export"] == "upstream_failed"
    detail = vs.client.request("GET", _hitl_path(run_id, REVIEW_TIMEOUT_DAG))
    assert detail["chosen_options"] == ["Reject"] and detail["responded_by_user"] is None
    job_dir = vs.job_dir(job_id)
    assert not os.path.exists(export)
    assert any(n.startswith("checkpoint_op_") for n in os.listdir(os.path.join(job_dir, "checkpoints")))
    assert _review_events(job_dir) == [("review_decided", "review"), ("review_answered", "timed_out")]


#: In the image demo's rows (dags/recipes/data/demo_images.jsonl): the 32x32 icon image_shape_filter removes.
TINY_ICON = 3


def test_the_why_of_a_removed_image_row_shows_its_thumbnail(job_view_server, browser, shots):
    """The image-text demo as a DAG run (its partitions in Ray); in the run's tab, the "why" of the row
    image_shape_filter removed shows the row's image, served scaled by the plugin and loaded by the
    browser, beside the reason."""
    from selenium.webdriver.common.by import By

    vs = job_view_server
    vs.client.set_paused(IMAGES_DAG, False)
    run_id = vs.client.trigger(IMAGES_DAG, {"job_id": "view_images"})["dag_run_id"]
    run = vs.client.wait_run(IMAGES_DAG, run_id, timeout=480)
    assert run["state"] == "success", vs.server.log_tail()
    d = browser
    log_in(d, vs)
    open_tab(d, vs, IMAGES_DAG, run_id)
    box = d.find_element(By.ID, "why-row")
    box.clear()
    box.send_keys(str(TINY_ICON))
    d.find_element(By.ID, "why-go").click()

    def loaded_thumbnail(d):
        imgs = d.find_elements(By.CSS_SELECTOR, "#why-result .thumbs img")
        return next(
            (i for i in imgs if d.execute_script("return arguments[0].complete && arguments[0].naturalWidth", i)), None
        )

    img = wait(d, "the removed row's thumbnail, loaded", loaded_thumbnail)
    text = d.find_element(By.ID, "why-result").text
    assert f"row {TINY_ICON}: filtered" in text and "image_shape_filter" in text, text
    assert img.get_attribute("alt") == "pin_small.png"
    # the icon itself (32x32: a thumbnail never enlarges), not the placeholder the plugin sends for a refusal
    assert d.execute_script("return [arguments[0].naturalWidth, arguments[0].naturalHeight]", img) == [32, 32]
    d.switch_to.default_content()
    d.save_screenshot(os.path.join(shots, "job_view_why_image.png"))
