"""Who is calling the job view, and may they read this DAG?

Airflow mounts a plugin's FastAPI app under the api-server but does not
protect it: without these checks anyone who reaches the port could read a
job's samples.  The caller is identified exactly as Airflow's own API
does it: the JWT the UI holds in its ``_token`` cookie (the tab is an
iframe on the same origin, so the browser sends it), or an
``Authorization: Bearer`` header (scripts, tests).  The token is checked
by the configured auth manager, and access by
``is_authorized_dag(method="GET", access_entity=RUN)`` for the job's DAG.

401: no token, or one the auth manager refuses (expired, bad signature,
revoked).  403: a valid user who may not read that DAG.
"""

from __future__ import annotations

from fastapi import HTTPException, Request, status

COOKIE_NAME = "_token"  # airflow.api_fastapi.auth.managers.base_auth_manager.COOKIE_NAME_JWT_TOKEN


def _auth_manager():
    from airflow.api_fastapi.app import get_auth_manager

    return get_auth_manager()


def token_from_request(request: Request) -> str | None:
    header = request.headers.get("authorization") or ""
    scheme, _, value = header.partition(" ")
    if scheme.lower() == "bearer" and value.strip():
        return value.strip()
    return request.cookies.get(COOKIE_NAME) or None


async def current_user(request: Request):
    """The authenticated user, or HTTP 401."""
    from jwt import InvalidTokenError

    token = token_from_request(request)
    if not token:
        raise HTTPException(status.HTTP_401_UNAUTHORIZED, "Not authenticated: log in to Airflow first")
    try:
        return await _auth_manager().get_user_from_token(token)
    except InvalidTokenError as exc:  # ExpiredSignatureError is one
        raise HTTPException(status.HTTP_401_UNAUTHORIZED, f"Invalid or expired token ({type(exc).__name__})") from None
    except HTTPException as exc:
        raise HTTPException(status.HTTP_401_UNAUTHORIZED, str(exc.detail)) from None


def _team_name(dag_id: str) -> str | None:
    """The DAG's team in multi-team mode (what Airflow's own DAG routes pass), else None."""
    try:
        from airflow.configuration import conf
        from airflow.models.dag import DagModel

        if not conf.getboolean("core", "multi_team", fallback=False):
            return None

        return DagModel.get_team_name(dag_id)
    except Exception:  # noqa: BLE001 - no team support configured: the DAG belongs to no team
        return None


def require_dag_read(user, dag_id: str | None) -> None:
    """HTTP 403 unless ``user`` may read DAG ``dag_id``'s runs (a job of no known DAG: the check for any DAG)."""
    from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity, DagDetails

    am = _auth_manager()
    if dag_id is None:  # no DAG named in the job's events: the check for runs of any DAG
        allowed = am.is_authorized_dag(method="GET", access_entity=DagAccessEntity.RUN, details=None, user=user)
    else:
        allowed = am.is_authorized_dag(
            method="GET",
            access_entity=DagAccessEntity.RUN,
            details=DagDetails(id=dag_id, team_name=_team_name(dag_id)),
            user=user,
        )
    if not allowed:
        raise HTTPException(status.HTTP_403_FORBIDDEN, f"Not allowed to read DAG {dag_id!r}")


def readable_dag_ids(user) -> set[str]:
    return set(_auth_manager().get_authorized_dag_ids(user=user, method="GET"))
