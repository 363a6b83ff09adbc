"""Airflow as the engine's host: connection look-ups and secret masking (``core/host.py``).

Registered two ways: the operators call :func:`install_airflow_host` when they are imported, and the
package declares :func:`airflow_host_services` as its ``airflow_provider_dj.host_services`` entry point,
so a Ray worker or ``dj-airflow`` process reaches Airflow's connections (``AIRFLOW_CONN_*`` variables,
a secrets backend, the metadata DB) the same way.
"""

from __future__ import annotations

from airflow_provider_dj.core import host


def _get_connection(conn_id: str) -> host.Connection:
    from airflow.sdk import BaseHook

    conn = BaseHook.get_connection(conn_id)
    extra = conn.extra_dejson if isinstance(getattr(conn, "extra_dejson", None), dict) else {}
    return host.Connection(
        conn_id=conn_id, host=conn.host, port=conn.port, login=conn.login, password=conn.password, extra=extra
    )


def _mask_secret(value: str) -> None:
    from airflow.sdk.log import mask_secret

    mask_secret(value)


def airflow_host_services() -> host.HostServices:
    return host.HostServices(get_connection=_get_connection, mask_secret=_mask_secret)


def install_airflow_host() -> None:
    host.install(airflow_host_services())
