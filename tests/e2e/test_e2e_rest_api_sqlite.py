"""The REST API scenarios (tests/e2e/rest_api_scenarios.py) on ``airflow standalone`` with a SQLite
metadata DB, and SQLite's own: a REST write waits for the single writer's lock, and several runs of two
recipes at once.  One module per DB, so each DB's server has its own test worker."""

import os
import sqlite3
import threading
import time

import httpx

from tests.e2e.rest_api_scenarios import *  # noqa: F403 - the scenarios are collected in this module
from tests.e2e.rest_api_scenarios import _explain
from tests.e2e.rest_client import TERMINAL_RUN_STATES, RestError

E2E_DB = "sqlite"


def test_a_rest_write_waits_for_the_sqlite_write_lock_instead_of_failing(e2e):
    """SQLite has one writer at a time; Airflow's components take turns.  A REST call that writes must
    wait while another holds the lock longer than the sqlite3 driver's default 5 s (which answered
    HTTP 500 "Database error": database is locked).  Sent without the client's retries, so the
    server's own wait is what is checked."""
    c = e2e.client
    paused = c.get_dag("e2e_slow")["is_paused"]
    answer: dict = {}

    def patch() -> None:  # a change, so the server must write
        try:
            answer["resp"] = httpx.patch(
                f"{c.base_url}/api/v2/dags/e2e_slow",
                json={"is_paused": not paused},
                headers={"Authorization": f"Bearer {c.token()}"},
                timeout=300,
            )
        except Exception as exc:  # noqa: BLE001 - shown by the assertion below
            answer["error"] = exc

    db = sqlite3.connect(e2e.server.sql_alchemy_conn.removeprefix("sqlite:///"), timeout=120, isolation_level=None)
    try:
        db.execute("BEGIN IMMEDIATE")  # the write lock, as a long transaction of another component holds it
        t = threading.Thread(target=patch)
        t.start()
        t.join(8)  # longer than the driver's default busy timeout
        assert t.is_alive(), f"the write did not wait for the lock: {answer}"
    finally:
        db.execute("ROLLBACK")
        db.close()
    t.join(300)
    assert "resp" in answer and answer["resp"].status_code == 200, answer
    assert answer["resp"].json()["is_paused"] is (not paused)
    assert c.set_paused("e2e_slow", paused)["is_paused"] is paused


# -- several runs at once ------------------------------------------------------------------------------------------

CONCURRENT_RUN_TIMEOUT = 900  # four runs on two cores shared with other test workers


def _wait_run_through_slow_answers(client, dag_id: str, run_id: str) -> dict:
    """Poll until the run ends; a slow answer (the API server waiting for SQLite's write lock) is a reason
    to ask again, not to fail."""
    deadline = time.monotonic() + CONCURRENT_RUN_TIMEOUT
    last = None
    while time.monotonic() < deadline:
        try:
            last = client.dag_run(dag_id, run_id)
        except (httpx.TransportError, RestError) as exc:
            last = exc
        else:
            if last["state"] in TERMINAL_RUN_STATES:
                return last
        time.sleep(2)
    raise AssertionError(f"run {dag_id}/{run_id} did not end in {CONCURRENT_RUN_TIMEOUT}s; last answer: {last!r}")


def _other_recipe_alone(e2e) -> bytes:
    """e2e_other's export run alone, by the engine in this process (the steps every DAG task calls)."""
    from airflow_provider_dj.engine import run_job

    root = os.path.join(e2e.root, "other_alone")
    os.makedirs(root, exist_ok=True)
    recipe = os.path.join(root, "e2e_other.yaml")
    with open(os.path.join(e2e.root, "recipes", "e2e_other.yaml"), encoding="utf-8") as fh:
        text = fh.read()
    with open(recipe, "w", encoding="utf-8") as fh:
        fh.write(text)
    result = run_job(
        recipe, overrides={"export_path": os.path.join(root, "export.jsonl")}, work_dir=root, job_id="alone", workers=1
    )
    with open(result.export_path, "rb") as fh:
        return fh.read()


def test_two_recipes_and_two_job_ids_at_once_export_what_single_runs_export(e2e, reference):
    """Two recipes triggered at the same moment, each twice with its own ``job_id`` and export path, all
    over REST on SQLite (the harder case for concurrent writers).  Runs of one recipe are one DAG, which
    allows one active run (``max_active_runs=1``): the second run of a recipe queues, then runs.  Every
    run succeeds and exports, byte for byte, what the recipe exports run alone."""
    c = e2e.client
    recipes = ("e2e_clean", "e2e_other")
    for dag_id in recipes:
        c.set_paused(dag_id, False)
    runs = {}
    for name in recipes:
        for job in ("a", "b"):
            job_id = f"cc_{name}_{job}"
            export = e2e.export_path(job_id)
            runs[job_id] = (name, c.trigger(name, {"job_id": job_id, "export_path": export})["dag_run_id"], export)
    alone = {"e2e_other": _other_recipe_alone(e2e)}  # while the four runs go on

    finals = {}
    for job_id, (name, run_id, _export) in runs.items():
        finals[job_id] = _wait_run_through_slow_answers(c, name, run_id)
        assert finals[job_id]["state"] == "success", _explain(e2e, name, run_id)

    # Different recipes ran at the same time: their first runs overlap.
    one, two = finals["cc_e2e_clean_a"], finals["cc_e2e_other_a"]
    assert one["start_date"] < two["end_date"] and two["start_date"] < one["end_date"], (one, two)

    alone["e2e_clean"] = reference.export()
    assert alone["e2e_clean"] != alone["e2e_other"] and all(b.count(b"\n") > 50 for b in alone.values())
    for job_id, (name, _run_id, export) in runs.items():
        with open(export, "rb") as fh:
            assert fh.read() == alone[name], f"{job_id}'s export differs from {name} run alone"
        assert os.path.exists(os.path.join(e2e.job_dir(job_id), "job_summary.json"))
    assert not os.path.exists(e2e.export_path("e2e_other"))  # its own export path was overridden by every run
