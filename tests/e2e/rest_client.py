"""A small client for Airflow's REST API v2 — the only way the e2e tests act on Airflow.

Only the calls the tests need, each a thin wrapper so a failing test shows
the exact request and Airflow's answer.  Authentication is what a user's
script would do with SimpleAuthManager: ``POST /auth/token`` with the
admin's password, then a bearer token on every call.
"""

from __future__ import annotations

import time
from typing import Any, Callable
from urllib.parse import quote

import httpx

TERMINAL_RUN_STATES = frozenset({"success", "failed"})

#: Requests :meth:`AirflowRestClient.request` may send again.  GET reads.  Every PATCH this client
#: sends sets fields to given values (``is_paused``, a task instance's ``new_state``), so a second
#: one leaves the same outcome as one.  No POST is ever sent twice: triggering a run or clearing
#: task instances again is a second action, not the same one.
IDEMPOTENT_METHODS = frozenset({"GET", "PATCH"})
#: At most this many sends of one request, and no new send after this many seconds.
RETRY_ATTEMPTS = 6
RETRY_WINDOW_S = 240.0


def _is_database_error(status: int, body: str) -> bool:
    """The api-server's answer to a SQLAlchemy error (its transaction was rolled back: nothing changed).

    With SQLite that is mostly "database is locked": another Airflow component held the single
    write lock for longer than the busy timeout."""
    return status == 500 and "Database error" in body


class RestError(RuntimeError):
    def __init__(self, method: str, path: str, status: int, body: str) -> None:
        super().__init__(f"{method} {path} -> HTTP {status}: {body[:2000]}")
        self.status = status
        self.body = body


class AirflowRestClient:
    def __init__(self, base_url: str, username: str, password: str, timeout: float = 180.0) -> None:
        # ``timeout`` is per request, longer than the SQLite busy timeout the test servers set
        # (tests/e2e/airflow_server.py): a call that waits for the DB's write lock gets its answer.
        self.base_url = base_url.rstrip("/")
        self.username = username
        self.password = password
        self._token: str | None = None
        self._http = httpx.Client(base_url=self.base_url, timeout=timeout)

    # -- plumbing ------------------------------------------------------------
    def token(self) -> str:
        resp = self._http.post("/auth/token", json={"username": self.username, "password": self.password})
        if resp.status_code not in (200, 201):
            raise RestError("POST", "/auth/token", resp.status_code, resp.text)
        self._token = resp.json()["access_token"]
        return self._token

    def request(
        self, method: str, path: str, *, json: Any = None, params: dict | None = None, ok: tuple[int, ...] = (200, 201)
    ) -> Any:
        """One call; an idempotent one (:data:`IDEMPOTENT_METHODS`) is sent again, a bounded number of
        times, when the server answered a database error or did not answer in time.  Anything else,
        and any POST, raises at once."""
        retry = method.upper() in IDEMPOTENT_METHODS
        started = time.monotonic()
        attempt = 0
        while True:
            attempt += 1
            may_retry = retry and attempt < RETRY_ATTEMPTS and time.monotonic() - started < RETRY_WINDOW_S
            try:
                resp = self._send(method, path, json=json, params=params)
            except (httpx.TimeoutException, httpx.RemoteProtocolError):
                if not may_retry:
                    raise
            else:
                if resp.status_code in ok:
                    return resp.json() if resp.content else None
                if not (may_retry and _is_database_error(resp.status_code, resp.text)):
                    raise RestError(method, path, resp.status_code, resp.text)
            time.sleep(min(2.0 * attempt, 10.0))

    def _send(self, method: str, path: str, *, json: Any, params: dict | None) -> httpx.Response:
        headers = {"Authorization": f"Bearer {self._token}"} if self._token else {}
        resp = self._http.request(method, path, json=json, params=params, headers=headers)
        if resp.status_code == 401 and self._token:  # expired: one fresh token, one retry
            self.token()
            resp = self._http.request(
                method, path, json=json, params=params, headers={"Authorization": f"Bearer {self._token}"}
            )
        return resp

    def close(self) -> None:
        self._http.close()

    # -- API calls -----------------------------------------------------------
    def health(self) -> dict:
        return self.request("GET", "/api/v2/monitor/health")

    def get_dag(self, dag_id: str) -> dict:
        return self.request("GET", f"/api/v2/dags/{quote(dag_id)}")

    def import_errors(self) -> list[dict]:
        return self.request("GET", "/api/v2/importErrors")["import_errors"]

    def set_paused(self, dag_id: str, paused: bool) -> dict:
        return self.request("PATCH", f"/api/v2/dags/{quote(dag_id)}", json={"is_paused": paused})

    def trigger(self, dag_id: str, conf: dict | None = None, *, logical_date: str | None = None) -> dict:
        """A manual run; with ``logical_date`` (ISO 8601) it is that date's run, as a scheduled night or a
        backfill would be (``ds`` and the data interval follow from it), else a run without a logical date."""
        return self.request(
            "POST", f"/api/v2/dags/{quote(dag_id)}/dagRuns", json={"logical_date": logical_date, "conf": conf or {}}
        )

    def dag_run(self, dag_id: str, run_id: str) -> dict:
        return self.request("GET", f"/api/v2/dags/{quote(dag_id)}/dagRuns/{quote(run_id)}")

    def dag_runs(self, dag_id: str) -> list[dict]:
        return self.request("GET", f"/api/v2/dags/{quote(dag_id)}/dagRuns", params={"limit": 100})["dag_runs"]

    def asset_events(self, source_dag_id: str) -> list[dict]:
        return self.request("GET", "/api/v2/assets/events", params={"source_dag_id": source_dag_id, "limit": 100})[
            "asset_events"
        ]

    def task_instances(self, dag_id: str, run_id: str) -> list[dict]:
        return self.request(
            "GET", f"/api/v2/dags/{quote(dag_id)}/dagRuns/{quote(run_id)}/taskInstances", params={"limit": 1000}
        )["task_instances"]

    def clear_task_instances(
        self, dag_id: str, run_id: str, task_ids: list[tuple[str, int]], *, include_downstream: bool = True
    ) -> dict:
        """Clear exactly these (task_id, map_index) instances (and, by default, what depends on them)."""
        return self.request(
            "POST",
            f"/api/v2/dags/{quote(dag_id)}/clearTaskInstances",
            json={
                "dry_run": False,
                "dag_run_id": run_id,
                "task_ids": [[t, i] for t, i in task_ids],
                "include_downstream": include_downstream,
                "reset_dag_runs": True,
                "only_failed": False,
            },
        )

    def set_task_instance_state(self, dag_id: str, run_id: str, task_id: str, map_index: int, state: str) -> Any:
        """The UI's "mark failed/success" on one (mapped) task instance."""
        return self.request(
            "PATCH",
            f"/api/v2/dags/{quote(dag_id)}/dagRuns/{quote(run_id)}/taskInstances/{quote(task_id)}/{map_index}",
            json={"new_state": state},
        )

    # -- waiting -------------------------------------------------------------
    def wait_for(self, what: str, probe: Callable[[], Any], timeout: float, interval: float = 1.0) -> Any:
        """Poll ``probe`` until it returns something truthy; raise with the last value on timeout.

        One poll the API server does not answer in time (its SQLite DB busy with the tasks' writes on
        a loaded machine) is a slow answer, not a broken one: the next poll asks again, and only the
        overall ``timeout`` ends the wait."""
        deadline = time.monotonic() + timeout
        last: Any = None
        while True:
            try:
                last = probe()
            except httpx.TimeoutException as exc:
                if time.monotonic() > deadline:
                    raise
                last = f"no answer within the client's timeout ({exc!r})"
            else:
                if last:
                    return last
            if time.monotonic() > deadline:
                raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}; last: {last!r}")
            time.sleep(interval)

    def wait_dag(self, dag_id: str, timeout: float = 300.0) -> dict:
        # The DAG processor may take minutes to parse the DAG folder on a loaded machine
        # (the test servers allow a parse 180 s: AIRFLOW__CORE__DAGBAG_IMPORT_TIMEOUT).
        def probe():
            try:
                return self.get_dag(dag_id)
            except RestError as exc:
                if exc.status == 404:
                    return None
                raise

        try:
            return self.wait_for(f"DAG {dag_id} to be parsed", probe, timeout)
        except TimeoutError as exc:
            raise TimeoutError(f"{exc}; import errors: {self.import_errors()}") from None

    def wait_run(self, dag_id: str, run_id: str, timeout: float, states=TERMINAL_RUN_STATES) -> dict:
        def probe():
            run = self.dag_run(dag_id, run_id)
            return run if run["state"] in states else None

        return self.wait_for(f"run {dag_id}/{run_id} to reach {sorted(states)}", probe, timeout)
