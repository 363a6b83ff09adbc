"""Build ``dag.test()``'s in-process Execution API for the one version its client speaks.

``dag.test()`` runs every task through Airflow's task runner, which talks to
an Execution API app served inside the same process (``InProcessExecutionAPI``,
a Cadwyn app).  The first request builds that app's routers for *every*
API version Airflow still serves to older remote workers: nine versions in
Airflow 3.3, most of an empty-input ``dj-airflow run``'s start-up
(docs/benchmarks.md, "Start-up").

In a ``dj-airflow run`` process the only client is this process's own task
runner, and it sends exactly one version header (the Task SDK's
``API_VERSION``, the newest).  So :func:`build_for_own_client_only` builds the
cached in-process app once, before ``dag.test()`` asks for it, from a version
bundle holding that one version: the same routes, models and handlers the
full app serves for that header, without the eight older copies.

It changes nothing when it cannot be sure it is equivalent: if the Task SDK's
version is not Airflow's newest, if the app was already built, or if
Airflow's internals moved (an import fails), it returns False and
``dag.test()`` builds the full app as usual.  Only the CLI calls it; the
Airflow scheduler, API server and remote workers never run this code.
"""

from __future__ import annotations

import logging

log = logging.getLogger(__name__)


def build_for_own_client_only() -> bool:
    """Pre-build the process's in-process Execution API with only the client's version.

    Returns True when the one-version app was built (and is what every
    later ``dag.test()`` task in this process uses), False when nothing was changed.
    """
    try:
        from airflow.api_fastapi.execution_api import versions
        from airflow.api_fastapi.execution_api.routes import execution_api_router
        from airflow.sdk.api.datamodels._generated import API_VERSION
        from airflow.sdk.execution_time.supervisor import in_process_api_server
        from cadwyn import HeadVersion, Version, VersionBundle
        from cadwyn.route_generation import _DELETED_ROUTE_TAG
    except ImportError as exc:  # Airflow's layout changed: keep its own behaviour
        log.debug("in-process Execution API left as Airflow builds it: %s", exc)
        return False
    full_bundle = versions.bundle
    newest = str(full_bundle.versions[0].value)
    if newest != API_VERSION:
        log.debug("Task SDK speaks %s, the API's newest is %s: full app kept", API_VERSION, newest)
        return False
    if in_process_api_server.cache_info().currsize:  # built already (a second run in this process)
        return False
    # The newest version's own changes describe how to serve the version *before*
    # it; with no older version to serve, the bundle's one version carries none.
    # Routes that only older versions serve (Cadwyn tags them deleted) are left
    # out too: the newest version never serves them, and with no older version
    # to restore them in, Cadwyn would refuse to build.
    all_routes = execution_api_router.routes
    versions.bundle = VersionBundle(HeadVersion(), Version(newest))
    execution_api_router.routes = [r for r in all_routes if _DELETED_ROUTE_TAG not in getattr(r, "tags", ())]
    try:
        # The cached property builds the app now; it copies the routes it is given.
        in_process_api_server().app  # noqa: B018
    finally:
        versions.bundle = full_bundle
        execution_api_router.routes = all_routes
    return True
