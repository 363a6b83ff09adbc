"""The e2e tests' REST client sends again only what is safe to send again (tests/e2e/rest_client.py)."""

from __future__ import annotations

import httpx
import pytest

from tests.e2e import rest_client
from tests.e2e.rest_client import AirflowRestClient, RestError

DB_ERROR = {"detail": {"reason": "Database error", "statement": "UPDATE dag ...", "orig_error": "database is locked"}}


def _client(monkeypatch, answers: list) -> tuple[AirflowRestClient, list[str]]:
    """A client whose server answers from ``answers`` in turn (a status and body, or an exception)."""
    sent: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(request.method)
        answer = answers.pop(0) if answers else (200, {})
        if isinstance(answer, Exception):
            raise answer
        status, body = answer
        return httpx.Response(status, json=body)

    monkeypatch.setattr(rest_client.time, "sleep", lambda s: None)
    c = AirflowRestClient("http://airflow.invalid", "admin", "pw")
    c._http = httpx.Client(base_url=c.base_url, transport=httpx.MockTransport(handler))
    return c, sent


def test_a_patch_answered_with_a_database_error_is_sent_again(monkeypatch):
    c, sent = _client(monkeypatch, [(500, DB_ERROR), (500, DB_ERROR), (200, {"is_paused": True})])
    assert c.set_paused("d", True) == {"is_paused": True}
    assert sent == ["PATCH"] * 3


def test_a_get_without_an_answer_in_time_is_sent_again(monkeypatch):
    c, sent = _client(monkeypatch, [httpx.ReadTimeout("slow"), (200, {"state": "running"})])
    assert c.dag_run("d", "r") == {"state": "running"}
    assert sent == ["GET", "GET"]


def test_a_post_is_never_sent_twice(monkeypatch):
    c, sent = _client(monkeypatch, [(500, DB_ERROR), (200, {"dag_run_id": "x"})])
    with pytest.raises(RestError, match="HTTP 500"):
        c.trigger("d", {})
    c2, sent2 = _client(monkeypatch, [httpx.ReadTimeout("slow"), (200, {})])
    with pytest.raises(httpx.ReadTimeout):
        c2.clear_task_instances("d", "r", [("t", 1)])
    assert sent == sent2 == ["POST"]


def test_other_errors_are_not_retried(monkeypatch):
    c, sent = _client(monkeypatch, [(500, {"detail": "something else"}), (200, {})])
    with pytest.raises(RestError, match="something else"):
        c.get_dag("d")
    c2, sent2 = _client(monkeypatch, [(404, {"detail": "no such DAG"})])
    with pytest.raises(RestError) as info:
        c2.get_dag("d")
    assert info.value.status == 404
    assert sent == sent2 == ["GET"]


def test_retries_are_bounded(monkeypatch):
    c, sent = _client(monkeypatch, [(500, DB_ERROR)] * 50)
    with pytest.raises(RestError, match="Database error"):
        c.set_paused("d", False)
    assert len(sent) == rest_client.RETRY_ATTEMPTS
