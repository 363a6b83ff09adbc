"""RayHook: where partition work runs.

Resolution order for the cluster address:

1. the Airflow connection (``conn_id``, default ``ray_default``) if it exists:
   its host/port (``ray://host:10001`` for Ray Client, or ``host:6379`` for
   a GCS address), or ``extra.address``; a dashboard (``http://host:8265``,
   or ``extra.dashboard_address``) selects Ray Jobs mode, where each
   partition group runs as a Ray Job (hooks/ray_jobs.py, ``get_jobs_client``);
2. the ``RAY_ADDRESS`` environment variable;
3. otherwise an *embedded* local Ray.

Embedded Ray must not cost a full start-up in every task.  If Ray is
already initialised in this process (``dj-airflow run``, ``dag.test()``),
it is reused.  Otherwise (scheduler tasks, one process per task) the hook
starts one local head node the first time — guarded by a file lock, so
parallel tasks do not start several — records its address under
``DJ_RAY_STATE_DIR`` (default ``~/.cache/airflow-provider-dj``), and every
later task only connects to it (about a second instead of several).  A task
that finds that head dead, or cannot connect to it, replaces it
(hooks/ray_local_head.py).

Only allowlisted connection extras reach ``ray.init`` (never the whole
extra dict): ``namespace``, ``runtime_env``, ``num_cpus`` (embedded only),
``object_store_memory`` (embedded only), ``address``, ``dashboard_address``,
``entrypoint_python`` (Ray Jobs mode): the keys of
``provider_info.RAY_CONN_FIELDS``, which the connection form shows.
"""

from __future__ import annotations

import logging
import os
import time
from typing import Any

from airflow_provider_dj.hooks import ray_in_process
from airflow_provider_dj.hooks.ray_local_head import (  # noqa: F401 - part of this module's API: callers import them from here
    RayConnectionError,
    ensure_local_head,
    local_head_record,
    replace_local_head,
    stop_local_head,
)
from airflow_provider_dj.provider_info import RAY_CONN_FIELDS

log = logging.getLogger(__name__)

# The connection form's conn-fields and this allowlist are one list (provider_info.RAY_CONN_FIELDS), so the
# UI offers exactly the extras that reach Ray.
ALLOWED_EXTRAS = frozenset(RAY_CONN_FIELDS)

try:  # Airflow is optional for the engine; the hook is usable without it in scripts.
    from airflow.sdk.bases.hook import BaseHook  # type: ignore[import-not-found]
except Exception:  # noqa: BLE001 - Airflow's import path differs between versions  # pragma: no cover
    try:
        from airflow.hooks.base import BaseHook  # type: ignore
    except Exception:  # noqa: BLE001 - no Airflow at all: the hook still works in scripts  # pragma: no cover
        BaseHook = object  # type: ignore[misc,assignment]


class RayHook(BaseHook):  # type: ignore[misc]
    """Reach the Ray a job runs on: embedded, a cluster's GCS address, or Ray Jobs mode's dashboard.

    :param ray_conn_id: the Airflow connection naming the cluster (none, or one without an address:
        the embedded local head).
    :param in_process_cpus: set by ``dj-airflow run``: CPUs of its private in-process Ray.
    """

    conn_name_attr = "ray_conn_id"
    default_conn_name = "ray_default"
    conn_type = "ray"
    hook_name = "Ray"

    def __init__(
        self, ray_conn_id: str | None = default_conn_name, *, in_process_cpus: int | None = None, **kwargs: Any
    ) -> None:
        if BaseHook is not object:
            super().__init__(**kwargs)
        self.ray_conn_id = ray_conn_id
        # `dj-airflow run` (operators/local_run.py): this process's private Ray with these CPUs.
        self.in_process_cpus = in_process_cpus

    # -- configuration -------------------------------------------------------
    def _connection_settings(self) -> dict[str, Any]:
        if not self.ray_conn_id or BaseHook is object:
            return {}
        try:
            conn = self.get_connection(self.ray_conn_id)
        except Exception:  # noqa: BLE001 - connection not defined: fall through to env / embedded
            return {}
        extra = conn.extra_dejson or {}
        unknown = sorted(set(extra) - ALLOWED_EXTRAS)
        if unknown:
            log.warning("ignoring unsupported Ray connection extras %s (allowed: %s)", unknown, sorted(ALLOWED_EXTRAS))
        settings = {k: v for k, v in extra.items() if k in ALLOWED_EXTRAS}
        if conn.host and "address" not in settings:
            host = conn.host
            if "://" not in host and conn.port:
                host = f"{host}:{conn.port}"
            elif conn.port and host.count(":") < 2:
                host = f"{host}:{conn.port}"
            settings["address"] = host
        return settings

    def resolve(self) -> dict[str, Any]:
        """{'mode': 'cluster'|'embedded'|'jobs', 'address': ..., 'init_kwargs': {...}} without connecting.

        ``jobs`` (Ray Jobs mode, hooks/ray_jobs.py): the connection names a dashboard
        (``dashboard_address``, or an ``http(s)://`` address); partition groups are submitted there as
        Ray Jobs, and ``dashboard_address`` says where.  Its ``address`` (a GCS address, or None: the
        embedded Ray) is where the steps that stay in the worker reach Ray."""
        from airflow_provider_dj.hooks.ray_jobs import is_dashboard_address

        settings = self._connection_settings()
        address = settings.pop("address", None) or os.environ.get("RAY_ADDRESS") or None
        dashboard = settings.pop("dashboard_address", None)
        python = settings.pop("entrypoint_python", None) or "python"
        if not dashboard and is_dashboard_address(address):
            dashboard, address = address, None
        init_kwargs: dict[str, Any] = {}
        if settings.get("namespace"):
            init_kwargs["namespace"] = settings["namespace"]
        if settings.get("runtime_env"):
            init_kwargs["runtime_env"] = settings["runtime_env"]
        embedded = {k: settings[k] for k in ("num_cpus", "object_store_memory") if k in settings}
        if dashboard:
            mode = {"mode": "jobs", "dashboard_address": dashboard}
        else:
            mode = {"mode": "cluster" if address else "embedded"}
        mode["entrypoint_python"] = python  # what a Ray Job's driver runs with (Ray Jobs mode only)
        if address:
            return {**mode, "address": address, "init_kwargs": init_kwargs}
        return {**mode, "address": None, "init_kwargs": init_kwargs, "embedded": embedded}

    def get_jobs_client(self):
        """Ray Jobs mode's client (hooks/ray_jobs.RayJobsClient); raises RayDashboardUnreachableError
        naming the address when the dashboard does not answer, and RayConnectionError when the
        connection names no dashboard."""
        from airflow_provider_dj.hooks.ray_jobs import RayJobsClient

        cfg = self.resolve()
        if cfg["mode"] != "jobs":
            raise RayConnectionError(
                f"the Ray connection {self.ray_conn_id!r} names no dashboard: set its host to http://<head>:8265 "
                f"or its extra dashboard_address for Ray Jobs mode"
            )
        kwargs = cfg["init_kwargs"]
        return RayJobsClient(
            cfg["dashboard_address"],
            runtime_env=kwargs.get("runtime_env"),
            namespace=kwargs.get("namespace"),
            python=cfg["entrypoint_python"],
        )

    # -- connecting ----------------------------------------------------------
    def get_client(self):
        """Return the ``ray`` module, connected.  Cheap when already connected."""
        cfg = self.resolve()
        if cfg["mode"] != "cluster" and not cfg["address"]:
            # Ray 2.5x+ turns token auth on for `ray start` whenever
            # ~/.ray/auth_token exists, and reads the mode when `ray` is first
            # imported: set it before the import so the head we start and
            # every task connecting to it agree.
            os.environ.setdefault("RAY_AUTH_MODE", "token")
        import ray

        if cfg["mode"] == "cluster" and ray_in_process.started_in_background():
            # `dj-airflow run` started its private cluster before it could see
            # the connection: a configured cluster address wins.
            ray_in_process.abandon()
        if ray.is_initialized():
            return ray
        t0 = time.perf_counter()
        if cfg["mode"] == "jobs":
            # Ray Jobs mode: partition groups run on the cluster as Ray Jobs; what a task does in the
            # worker itself (a parallel export's parts, a GPU probe) uses the connection's GCS address
            # when it has one, else the embedded Ray.
            cfg = dict(cfg, mode="cluster" if cfg["address"] else "embedded")
        if cfg["mode"] == "cluster":
            log.info("connecting to Ray cluster at %s", cfg["address"])
            ray.init(address=cfg["address"], ignore_reinit_error=True, log_to_driver=True, **cfg["init_kwargs"])
        elif self.in_process_cpus:
            # `dj-airflow run`: every task runs in this one process, so a private
            # in-process cluster, which the CLI starts in the background at
            # launch when the input has rows (hooks/ray_in_process.py); without
            # that, the first task that needs Ray starts it.
            log.info("using the private in-process Ray cluster of this run")
            ray_in_process.ensure_started(int(self.in_process_cpus), cfg["init_kwargs"])
        else:
            _connect_embedded(ray, cfg.get("embedded", {}), cfg["init_kwargs"])
        log.info("Ray ready in %.2fs", time.perf_counter() - t0)
        return ray

    def test_connection(self) -> tuple[bool, str]:
        try:
            ray = self.get_client()
            return True, f"connected; cluster resources: {ray.cluster_resources()}"
        except Exception as exc:  # noqa: BLE001 - depends on the cluster  # pragma: no cover
            return False, str(exc)


def _connect_embedded(ray, embedded: dict[str, Any], init_kwargs: dict[str, Any]) -> None:
    """Connect to the shared embedded head; a connect that fails replaces that head once.

    ``ensure_local_head`` already replaced a head it found dead; this covers one that looked alive
    and still refused the driver (Ray gives up after about a minute)."""
    address = ensure_local_head(**embedded)
    record = local_head_record()
    log.info("connecting to the embedded local Ray head at %s", address)
    try:
        ray.init(address=address, ignore_reinit_error=True, log_to_driver=True, **init_kwargs)
        return
    except (ConnectionError, TimeoutError) as exc:
        if record is None or record.get("address") != address:
            raise
        why = f"connecting to it failed: {exc}"
    try:
        ray.shutdown()  # what the failed init set up in this process
    except Exception:  # noqa: BLE001 - nothing was set up
        pass
    address = replace_local_head(record, why, **embedded)
    log.info("connecting to the embedded local Ray head at %s", address)
    ray.init(address=address, ignore_reinit_error=True, log_to_driver=True, **init_kwargs)
