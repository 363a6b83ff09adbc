"""What the engine and the ops ask of the process that hosts them: a connection, and secret masking.

Why a seam: ``engine/`` and ``ops/`` import no Airflow (docs/architecture.md), yet two of their
needs are Airflow's: reading a connection (object-store credentials, an LLM endpoint's key) and
registering a secret with Airflow's log masker.  The host supplies both as plain callables:

* an Airflow task process gets them from the provider's operators, which call :func:`install`
  when they are imported (``airflow_provider_dj.hooks.host_services``);
* any other process that runs engine code (a Ray worker, ``dj-airflow``, a script) finds the same
  implementation through the package's entry point ``airflow_provider_dj.host_services``, looked up
  on first use only, so a process that never needs a connection never pays for the look-up.

Without a host (a bare engine install), :func:`get_connection` raises :class:`HostUnavailableError`
naming the connection, and :func:`mask_secret` does nothing.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Callable

from airflow_provider_dj.core.errors import DJError

ENTRY_POINT_GROUP = "airflow_provider_dj.host_services"


class HostUnavailableError(DJError, RuntimeError):
    """No host here can look a connection up; the message names the connection."""


@dataclass(frozen=True)
class Connection:
    """The fields of a connection the engine reads (a plain copy: no Airflow object crosses the seam)."""

    conn_id: str
    host: str | None = None
    port: int | None = None
    login: str | None = None
    password: str | None = field(default=None, repr=False)
    extra: dict[str, Any] = field(default_factory=dict, repr=False)


@dataclass(frozen=True)
class HostServices:
    """The host's callables: ``get_connection(conn_id) -> Connection`` and ``mask_secret(value)``."""

    get_connection: Callable[[str], Connection]
    mask_secret: Callable[[str], None]


_lock = threading.Lock()
_installed: HostServices | None = None
_looked_up = False


def install(services: HostServices | None) -> None:
    """Use ``services`` in this process from now on (None: forget them, and look the entry point up again)."""
    global _installed, _looked_up
    with _lock:
        _installed, _looked_up = services, services is not None


def _from_entry_point() -> HostServices | None:
    from importlib.metadata import entry_points

    for ep in entry_points(group=ENTRY_POINT_GROUP):
        factory = ep.load()
        services: HostServices | None = factory()
        return services
    return None


def services() -> HostServices | None:
    """The installed services, or the entry point's (looked up once per process), or None."""
    global _installed, _looked_up
    with _lock:
        if not _looked_up:
            _looked_up = True
            try:
                _installed = _from_entry_point()
            except Exception:  # noqa: BLE001 - a broken host leaves the engine usable without connections
                _installed = None
        return _installed


def get_connection(conn_id: str) -> Connection:
    """The connection ``conn_id`` from the host; the host's own error propagates (it names the problem)."""
    found = services()
    if found is None:
        raise HostUnavailableError(
            f"connection {conn_id!r} cannot be looked up here: no host (Airflow) is installed in this environment; "
            f"install the provider with Airflow, or use settings that need no connection"
        )
    return found.get_connection(conn_id)


def mask_secret(value: str | None) -> None:
    """Hide ``value`` in the host's logs, where the host can; never a reason to fail."""
    if not value:
        return
    found = services()
    if found is None:
        return
    try:
        found.mask_secret(value)
    except Exception:  # noqa: BLE001 - masking is a second line of defence, never a reason to fail
        pass
