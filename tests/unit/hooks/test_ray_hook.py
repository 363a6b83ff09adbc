"""RayHook address resolution and the extras allowlist (no cluster needed)."""

from __future__ import annotations

from types import SimpleNamespace

from airflow_provider_dj.hooks.ray import RayHook


def _conn(host=None, port=None, extra=None):
    return SimpleNamespace(host=host, port=port, extra_dejson=extra or {})


def test_connection_address_and_allowlisted_extras(monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    hook = RayHook(ray_conn_id="ray_x")
    monkeypatch.setattr(
        hook,
        "get_connection",
        lambda cid: _conn(
            "ray://head",
            10001,
            {
                "namespace": "dj",
                "runtime_env": {"env_vars": {"A": "1"}},
                "_system_config": {"evil": True},
                "address_override": "x",
            },
        ),
    )
    cfg = hook.resolve()
    assert cfg["mode"] == "cluster" and cfg["address"] == "ray://head:10001"
    assert cfg["init_kwargs"] == {"namespace": "dj", "runtime_env": {"env_vars": {"A": "1"}}}


def test_env_address_when_no_connection(monkeypatch):
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.5:6379")
    hook = RayHook(ray_conn_id="missing")

    def boom(cid):
        raise LookupError(cid)

    monkeypatch.setattr(hook, "get_connection", boom)
    assert hook.resolve()["address"] == "10.0.0.5:6379"


def test_embedded_when_nothing_configured(monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    hook = RayHook(ray_conn_id=None)
    cfg = hook.resolve()
    assert cfg["mode"] == "embedded" and cfg["address"] is None


def test_provider_info_declares_ray_conn_fields():
    from airflow_provider_dj.provider_info import get_provider_info

    info = get_provider_info()
    ct = info["connection-types"][0]
    assert ct["connection-type"] == "ray" and ct["hook-class-name"].endswith("RayHook")
    assert set(ct["conn-fields"]) == {
        "address",
        "dashboard_address",
        "entrypoint_python",
        "namespace",
        "runtime_env",
        "num_cpus",
        "object_store_memory",
    }
    for field in ct["conn-fields"].values():
        assert {"label", "schema"} <= set(field)


def test_a_dashboard_address_selects_ray_jobs_mode(monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    hook = RayHook(ray_conn_id="ray_x")
    monkeypatch.setattr(hook, "get_connection", lambda cid: _conn("http://head", 8265, {"namespace": "dj"}))
    cfg = hook.resolve()
    assert cfg["mode"] == "jobs" and cfg["dashboard_address"] == "http://head:8265"
    assert cfg["address"] is None and cfg["init_kwargs"] == {"namespace": "dj"}
    # the extra names the dashboard; a GCS address beside it is where the worker's own steps reach Ray
    monkeypatch.setattr(
        hook, "get_connection", lambda cid: _conn("head", 6379, {"dashboard_address": "https://head:8443"})
    )
    cfg = hook.resolve()
    assert (cfg["mode"], cfg["dashboard_address"], cfg["address"]) == ("jobs", "https://head:8443", "head:6379")


def test_a_dashboard_that_does_not_answer_is_refused_naming_it(monkeypatch):
    import socket

    import pytest

    from airflow_provider_dj.hooks.ray_jobs import RayDashboardUnreachableError

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    hook = RayHook(ray_conn_id="ray_x")
    monkeypatch.setattr(hook, "get_connection", lambda cid: _conn(f"http://127.0.0.1:{port}"))
    with pytest.raises(RayDashboardUnreachableError, match=f"http://127.0.0.1:{port} does not answer"):
        hook.get_jobs_client()
