"""The embedded head's replacement rules, on a stand-in ``ray`` command (Ray itself is not started here;
tests/integration/test_embedded_ray.py kills and replaces real heads)."""

from __future__ import annotations

import json

import pytest

from airflow_provider_dj.hooks import ray as ray_hook
from airflow_provider_dj.hooks import ray_local_head as heads
from tests.ports import free_port
from tests.unit.hooks.test_ray_concurrent_start import _fake_ray


@pytest.fixture
def fake_head(tmp_path, monkeypatch):
    tries = _fake_ray(tmp_path, monkeypatch, failures=0)
    monkeypatch.setenv("DJ_RAY_HEAD_PORT", str(free_port()))  # the replacement listens where the head did
    address = heads.ensure_local_head()
    yield tries, address
    heads.stop_local_head(timeout=5)


def test_a_head_recorded_as_starting_is_waited_for_not_replaced(fake_head, tmp_path):
    tries, address = fake_head
    record_path = tmp_path / "state" / "ray-head.json"
    record = json.loads(record_path.read_text())
    record_path.write_text(json.dumps(dict(record, ready=False)))  # its starter died while it came up
    assert heads.ensure_local_head() == address
    assert len(tries.read_text().splitlines()) == 1  # no second head
    assert json.loads(record_path.read_text()) == dict(record, ready=True)


def test_a_head_another_task_already_replaced_is_not_replaced_again(fake_head):
    tries, address = fake_head
    current = heads.local_head_record()
    gone = dict(current, pid=current["pid"] + 100000, started_at=current["started_at"] - 60)
    assert heads.replace_local_head(gone, "connecting to it failed") == address
    assert heads.local_head_record() == current and len(tries.read_text().splitlines()) == 1
    # The head the task could not use is replaced, even though its processes look alive.
    assert heads.replace_local_head(current, "connecting to it failed") == address
    assert heads.local_head_record()["pid"] != current["pid"] and len(tries.read_text().splitlines()) == 2


class _FakeRay:
    def __init__(self, failures: int) -> None:
        self.failures, self.inits, self.shutdowns = failures, [], 0

    def init(self, address, **_kwargs):
        self.inits.append(address)
        if len(self.inits) <= self.failures:
            raise ConnectionError(f"Failed to connect to Ray cluster at {address}")

    def shutdown(self):
        self.shutdowns += 1


def test_a_connect_that_fails_replaces_the_head_once(monkeypatch):
    record = {"address": "127.0.0.1:1", "pid": 11, "started_at": 1.0, "ready": True}
    replaced = []
    monkeypatch.setattr(ray_hook, "ensure_local_head", lambda **kw: "127.0.0.1:1")
    monkeypatch.setattr(ray_hook, "local_head_record", lambda: record)
    monkeypatch.setattr(
        ray_hook, "replace_local_head", lambda rec, why, **kw: replaced.append((rec, why)) or "127.0.0.1:2"
    )
    ray = _FakeRay(failures=1)
    ray_hook._connect_embedded(ray, {}, {})
    assert ray.inits == ["127.0.0.1:1", "127.0.0.1:2"] and ray.shutdowns == 1
    assert replaced == [(record, "connecting to it failed: Failed to connect to Ray cluster at 127.0.0.1:1")]

    ray = _FakeRay(failures=2)  # the new head refuses too: the task fails, naming it
    with pytest.raises(ConnectionError, match="127.0.0.1:2"):
        ray_hook._connect_embedded(ray, {}, {})
