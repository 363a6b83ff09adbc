"""The REST API scenarios (tests/e2e/rest_api_scenarios.py) on ``airflow standalone`` with a SQLite
metadata DB, and SQLite's own: a REST write waits for the single writer's lock.  One module per DB,
so each DB's server has its own test worker."""

import sqlite3
import threading

import httpx

from tests.e2e.rest_api_scenarios import *  # noqa: F403 - the scenarios are collected in this module

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
