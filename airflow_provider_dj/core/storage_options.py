"""Credentials and endpoint for object-store URLs (``s3://``), without ever logging them.

Why process-wide rather than per recipe: the job directory itself lives on
the store, so every process that touches a job — the Airflow task, each Ray
worker on any node, ``dj-airflow`` — must reach the store *before* it can
read anything of the job.  The settings therefore come from that process's
environment, resolved once per process:

1. ``DJ_STORAGE_CONN_ID`` names an Airflow connection (type ``aws``):
   login = access key id, password = secret access key, extra
   ``endpoint_url``, ``region_name`` and ``aws_session_token`` (allowlisted;
   nothing else of the extra reaches the client).  Where Ray workers run
   outside Airflow, the connection must be resolvable there too (an
   ``AIRFLOW_CONN_<ID>`` variable or a secrets backend), as for
   ``llm_api_mapper``'s ``conn_id``.
2. Otherwise the standard AWS variables, which botocore reads itself
   (``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``,
   ``AWS_DEFAULT_REGION``, profiles, instance roles); ``AWS_ENDPOINT_URL_S3``
   or ``AWS_ENDPOINT_URL`` set the endpoint (an S3-compatible server).

Listings are never cached (``use_listings_cache=False``): several writers
share a job directory, and a reader must see objects another process wrote
a moment ago (a commit marker, an event file) — S3 itself has been strongly
read-after-write consistent since December 2020; a client-side cache would
undo that.

Secrets stay out of reprs, events, summaries and error messages: options
are held in :class:`StorageOptions`, whose ``repr`` shows only which keys
are set, and the secret is registered with the host's log masker (Airflow's, through
``core/host.py``) when there is one.
"""

from __future__ import annotations

import os
import threading
from typing import Any

from airflow_provider_dj import settings
from airflow_provider_dj.core import host
from airflow_provider_dj.core.errors import DJError

CONN_ENV = "DJ_STORAGE_CONN_ID"
# Protocols handled here; other fsspec protocols get fsspec's defaults.
S3_PROTOCOLS = ("s3", "s3a")
_EXTRA_ALLOWED = ("endpoint_url", "region_name", "aws_session_token")


class StorageConfigError(DJError, RuntimeError):
    """The object-store settings cannot be used; the message says which setting and what to do."""


class StorageOptions:
    """fsspec keyword arguments for one protocol.  ``repr`` never shows a secret."""

    __slots__ = ("_kwargs", "source")

    def __init__(self, kwargs: dict[str, Any], source: str) -> None:
        self._kwargs = kwargs
        self.source = source

    def kwargs(self) -> dict[str, Any]:
        return dict(self._kwargs)

    def __repr__(self) -> str:
        shown = sorted(k for k in self._kwargs if k not in ("key", "secret", "token"))
        creds = "credentials set" if self._kwargs.get("secret") else "ambient credentials"
        return f"StorageOptions(source={self.source!r}, {creds}, options={shown})"

    __str__ = __repr__


_cache: dict[tuple[str | None, ...], StorageOptions] = {}  # by connection id and the AWS_* variables read
_cache_lock = threading.Lock()


def protocol_of(url: str) -> str:
    return str(url).split("://", 1)[0].lower() if "://" in str(url) else "file"


def _mask(secret: str | None) -> None:
    """Second line of defence: the host's log masker (Airflow's) hides the value in task logs."""
    host.mask_secret(secret)


def _from_connection(conn_id: str) -> StorageOptions:
    try:
        conn = host.get_connection(conn_id)
    except host.HostUnavailableError as exc:
        raise StorageConfigError(
            f"{CONN_ENV}={conn_id!r} needs Airflow to look the connection up ({exc}); "
            f"unset it and use the AWS_* environment variables instead"
        ) from None
    except Exception as exc:  # noqa: BLE001 - message only: a lookup error never carries the secret
        raise StorageConfigError(
            f"{CONN_ENV}={conn_id!r}: the Airflow connection cannot be read here ({type(exc).__name__}); "
            f"define it (type aws: login = access key id, password = secret, extra endpoint_url/region_name) "
            f"where this process runs — e.g. as AIRFLOW_CONN_{conn_id.upper()} on every Airflow worker and "
            f"Ray node — or unset {CONN_ENV} and use AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY"
        ) from None
    extra = conn.extra
    kwargs: dict[str, Any] = {}
    client: dict[str, Any] = {}
    if conn.login:
        kwargs["key"] = conn.login
    if conn.password:
        kwargs["secret"] = conn.password
        _mask(conn.password)
    if extra.get("aws_session_token"):
        kwargs["token"] = extra["aws_session_token"]
        _mask(extra["aws_session_token"])
    endpoint = extra.get("endpoint_url") or (conn.host if conn.host and "://" in conn.host else None)
    if endpoint:
        client["endpoint_url"] = str(endpoint)
    if extra.get("region_name"):
        client["region_name"] = str(extra["region_name"])
    unknown = sorted(k for k in extra if k not in _EXTRA_ALLOWED)
    if unknown:
        import logging

        logging.getLogger(__name__).info(
            "connection %s: extra keys %s are not used for storage (allowed: %s)",
            conn_id,
            unknown,
            ", ".join(_EXTRA_ALLOWED),
        )
    if client:
        kwargs["client_kwargs"] = client
    return StorageOptions(kwargs, source=f"connection {conn_id}")


def _from_environment() -> StorageOptions:
    kwargs: dict[str, Any] = {}
    endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    if endpoint:
        kwargs["endpoint_url"] = endpoint
    _mask(os.environ.get("AWS_SECRET_ACCESS_KEY"))
    return StorageOptions(kwargs, source="environment")


def options_for(url: str) -> StorageOptions | None:
    """fsspec options for ``url``'s protocol, or None for protocols left to fsspec's defaults."""
    proto = protocol_of(url)
    if proto not in S3_PROTOCOLS:
        return None
    conn_id = settings.raw("storage_conn_id")
    env_key = (
        conn_id,
        os.environ.get("AWS_ENDPOINT_URL_S3"),
        os.environ.get("AWS_ENDPOINT_URL"),
        os.environ.get("AWS_ACCESS_KEY_ID"),
    )
    with _cache_lock:
        opts = _cache.get(env_key)
    if opts is None:
        opts = _from_connection(conn_id) if conn_id else _from_environment()
        with _cache_lock:
            _cache[env_key] = opts
    return opts


def fs_kwargs(url: str) -> dict[str, Any]:
    """Keyword arguments for ``fsspec.core.url_to_fs(url, **kwargs)``."""
    opts = options_for(url)
    if opts is None:
        return {}
    kwargs = opts.kwargs()
    kwargs.setdefault("use_listings_cache", False)
    return kwargs


def clear_cache() -> None:
    """Forget resolved settings (tests switch credentials within one process)."""
    with _cache_lock:
        _cache.clear()
