"""The validate task reads Airflow's [core] max_map_length, the bound its groups are planned within."""

from __future__ import annotations

from airflow_provider_dj.operators.resume_validator import max_map_length


def test_airflows_default_and_a_configured_limit(monkeypatch):
    monkeypatch.delenv("AIRFLOW__CORE__MAX_MAP_LENGTH", raising=False)
    assert max_map_length() == 1024
    monkeypatch.setenv("AIRFLOW__CORE__MAX_MAP_LENGTH", "16")
    assert max_map_length() == 16
