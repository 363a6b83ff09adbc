"""core/host.py: the engine reaches Airflow's connections and masker only through the host it is given."""

from __future__ import annotations

import pytest

from airflow_provider_dj.core import host, storage_options


@pytest.fixture(autouse=True)
def _fresh_host():
    host.install(None)
    storage_options.clear_cache()
    yield
    host.install(None)
    storage_options.clear_cache()


def test_the_installed_package_declares_airflow_as_its_host(monkeypatch):
    """Found through the entry point, as a Ray worker or dj-airflow finds it: an AIRFLOW_CONN_* variable resolves."""
    monkeypatch.setenv("AIRFLOW_CONN_DJ_TEST_LLM", '{"conn_type": "http", "host": "llm.local", "password": "s3cr3t"}')
    conn = host.get_connection("dj_test_llm")
    assert (conn.conn_id, conn.host, conn.password) == ("dj_test_llm", "llm.local", "s3cr3t")
    assert "s3cr3t" not in repr(conn)


def test_an_installed_host_wins_and_masking_goes_to_it():
    masked: list[str] = []
    fake = host.HostServices(
        get_connection=lambda cid: host.Connection(
            conn_id=cid, login="AKIA", password="pw", extra={"region_name": "x"}
        ),
        mask_secret=masked.append,
    )
    host.install(fake)
    opts = storage_options._from_connection("store")
    assert opts.kwargs() == {"key": "AKIA", "secret": "pw", "client_kwargs": {"region_name": "x"}}
    assert masked == ["pw"]


def test_without_a_host_the_connection_is_refused_by_name(monkeypatch):
    monkeypatch.setattr(host, "_from_entry_point", lambda: None)
    host.install(None)
    with pytest.raises(host.HostUnavailableError, match="connection 'store' cannot be looked up here"):
        host.get_connection("store")
    host.mask_secret("anything")  # no host: nothing to mask with, and no error
    with pytest.raises(storage_options.StorageConfigError, match="DJ_STORAGE_CONN_ID='store' needs Airflow"):
        storage_options._from_connection("store")


def test_a_host_lookup_error_becomes_a_storage_error_without_the_secret():
    def refuse(cid):
        raise KeyError(f"no {cid}")

    host.install(host.HostServices(get_connection=refuse, mask_secret=lambda v: None))
    with pytest.raises(storage_options.StorageConfigError, match=r"cannot be read here \(KeyError\)"):
        storage_options._from_connection("store")
