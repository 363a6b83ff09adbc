"""The job view's FastAPI app, mounted by Airflow's api-server at ``/dj-jobs``.

Read-only by construction: every route is a GET that reads the job
directory (``plugins/job_data.py``, ``engine/observe/why.py``); nothing here
writes, deletes or signals.  Every route first authenticates the caller
and checks read access to the job's DAG (``plugins/auth.py``): Airflow
does not protect a plugin's app.  Job ids are validated before any path
is built from them (``engine.jobdir.identity.validate_job_id``).

Pages: ``/`` (recent jobs), ``/dag/{dag_id}/run/{run_id}`` (the DAG run's
"Data-Juicer job" tab), ``/dag/{dag_id}/run/{run_id}/task/{task_id}/{map_index}``
(the task instance's tab: the same page opened on its partitions),
``/job/{job_id}``.  JSON: ``/api/job/{job_id}`` and its ``/partition/{p}``,
``/failed``, ``/trace/{op}``, ``/why?row=N`` (with the thumbnails of a removed row's images), and
``/thumbnail?row=N&image=K``: a scaled image of one of them (``plugins/thumbnails.py`` says which
files it will open; never a path from the request).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from importlib import resources
from typing import Annotated, Any

from fastapi import Depends, FastAPI, HTTPException, Query, Request
from fastapi.responses import HTMLResponse, JSONResponse, Response

import airflow_provider_dj.plugins.job_data as job_data
import airflow_provider_dj.plugins.job_lookup as job_lookup
import airflow_provider_dj.plugins.thumbnails as thumbnails
import airflow_provider_dj.plugins.views as views
from airflow_provider_dj.engine.job.status import JobNotFoundError, job_status
from airflow_provider_dj.engine.jobdir.identity import JobIdError, validate_job_id
from airflow_provider_dj.engine.observe import why
from airflow_provider_dj.plugins.auth import current_user, readable_dag_ids, require_dag_read

URL_PREFIX = "/dj-jobs"
#: The authenticated caller (401 otherwise); every route takes it.
UserDep = Annotated[Any, Depends(current_user)]
STATIC_FILES = {"job_view.js": "text/javascript", "job_view.css": "text/css"}
#: A thumbnail's headers: cached by the browser only; an SVG placeholder may not load or run anything.
THUMBNAIL_HEADERS = {
    "Cache-Control": "private, max-age=300",
    "X-Content-Type-Options": "nosniff",
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'",
}


def _root(request: Request) -> str:
    return (request.scope.get("root_path") or "").rstrip("/")


@contextmanager
def _missing_is_404(detail: str | None = None, missing: type[Exception] | tuple = KeyError) -> Iterator[None]:
    """What the block looks up and does not find (``missing``) answers 404 with ``detail``, or the
    error's own message when it names the thing (a row out of range).  One place for what every route
    that reads one part of a job does with a part that is not there."""
    try:
        yield
    except missing as exc:
        raise HTTPException(404, detail if detail is not None else str(exc)) from None


def _job_dir_for(job_id: str, user) -> tuple[str, str | None]:
    """Validate the id, find the job, check the caller may read its DAG; (job_dir, dag_id)."""
    try:
        validate_job_id(job_id)
    except JobIdError as exc:
        raise HTTPException(400, str(exc)) from None
    with _missing_is_404(f"job {job_id!r} not found", JobNotFoundError):
        job_dir = job_lookup.find_job(job_id)
    dag_id = job_lookup.job_dag_id(job_dir)
    require_dag_read(user, dag_id)
    return job_dir, dag_id


def _focus(job_dir: str, task_id: str | None, map_index: int | None) -> set[int] | None:
    if task_id is None or map_index is None or map_index < 0:
        return None
    for g in job_data.read_plan_doc(job_dir).get("execution_groups", []):
        if g.get("airflow_map_index") == map_index:
            return set(g["partition_ids"])
    return None


def create_app() -> FastAPI:
    """The job view's FastAPI app: its HTML pages, then its JSON API."""
    app = FastAPI(title="Data-Juicer job view", docs_url=None, redoc_url=None, openapi_url=None)
    _add_page_routes(app)
    _add_api_routes(app)
    return app


def _add_page_routes(app: FastAPI) -> None:
    """The static files and the HTML pages: the job list, a DAG run's or task's job, a job by id."""

    @app.get("/static/{name}")
    def static(name: str, user: UserDep) -> Response:
        if name not in STATIC_FILES:
            raise HTTPException(404, "no such file")
        data = resources.files("airflow_provider_dj.plugins").joinpath("static", name).read_bytes()
        return Response(data, media_type=STATIC_FILES[name], headers={"Cache-Control": "private, max-age=300"})

    @app.get("/", response_class=HTMLResponse)
    def jobs(request: Request, user: UserDep) -> str:
        allowed = readable_dag_ids(user)
        listed = []
        for j in job_lookup.recent_job_list():
            if j["dag_id"] not in allowed:
                continue
            st = job_status(j["job_dir"])
            prog = st.get("progress") or {}
            listed.append(
                dict(
                    j,
                    status=st["status"],
                    progress=f"{prog.get('partitions_final', 0)}/{prog.get('partitions_total', 0)}",
                )
            )
        return views.jobs_page(listed, root=_root(request), static=_root(request) + "/static")

    @app.get("/dag/{dag_id}/run/{run_id}", response_class=HTMLResponse)
    def run_page(request: Request, dag_id: str, run_id: str, user: UserDep):
        return _run_page(request, user, dag_id, run_id)

    @app.get("/dag/{dag_id}/run/{run_id}/task/{task_id}/{map_index}", response_class=HTMLResponse)
    def task_page(request: Request, dag_id: str, run_id: str, task_id: str, map_index: int, user: UserDep):
        return _run_page(request, user, dag_id, run_id, task_id, map_index)

    @app.get("/job/{job_id}", response_class=HTMLResponse)
    def job_page(request: Request, job_id: str, user: UserDep):
        job_dir, dag_id = _job_dir_for(job_id, user)
        view = job_data.job_overview(job_dir, dag_id=dag_id)
        return views.job_page(view, api=f"{_root(request)}/api/job/{view['job_id']}", static=_root(request) + "/static")


def _add_api_routes(app: FastAPI) -> None:
    """The JSON API the pages read: a job, a partition, failed samples, traces and why a row went."""

    @app.get("/api/job/{job_id}")
    def job_json(job_id: str, user: UserDep):
        job_dir, dag_id = _job_dir_for(job_id, user)
        return JSONResponse(job_data.job_overview(job_dir, dag_id=dag_id))

    @app.get("/api/job/{job_id}/partition/{partition_id}")
    def partition_json(job_id: str, partition_id: int, user: UserDep):
        job_dir, _ = _job_dir_for(job_id, user)
        with _missing_is_404(f"job {job_id} has no partition {partition_id}"):
            return JSONResponse(job_data.partition_detail(job_dir, partition_id))

    @app.get("/api/job/{job_id}/failed")
    def failed_json(
        job_id: str,
        user: UserDep,
        partition: Annotated[int | None, Query(ge=0)] = None,
        offset: Annotated[int, Query(ge=0)] = 0,
        limit: Annotated[int, Query(ge=1, le=job_data.MAX_FAILED_PAGE_SIZE)] = job_data.FAILED_PAGE_SIZE,
    ):
        job_dir, _ = _job_dir_for(job_id, user)
        return JSONResponse(job_data.failed_samples(job_dir, partition, offset=offset, limit=limit))

    @app.get("/api/job/{job_id}/trace/{op_index}")
    def trace_json(job_id: str, op_index: int, user: UserDep):
        job_dir, _ = _job_dir_for(job_id, user)
        with _missing_is_404(f"job {job_id} has no op {op_index}"):
            return JSONResponse(job_data.trace_samples(job_dir, op_index))

    @app.get("/api/job/{job_id}/why")
    def why_json(job_id: str, row: Annotated[int, Query(ge=0)], user: UserDep):
        job_dir, _ = _job_dir_for(job_id, user)
        with _missing_is_404(missing=why.RowOutOfRangeError):
            answer = why.why_row(job_dir, row)
        answer["thumbnails"] = thumbnails.thumbnail_paths(job_dir, answer)
        return JSONResponse(answer)

    @app.get("/api/job/{job_id}/thumbnail")
    def thumbnail(
        job_id: str,
        row: Annotated[int, Query(ge=0)],
        user: UserDep,
        image: Annotated[int, Query(ge=0)] = 0,
        size: Annotated[int, Query(ge=thumbnails.MIN_SIZE, le=thumbnails.MAX_SIZE)] = thumbnails.DEFAULT_SIZE,
    ) -> Response:
        job_dir, _ = _job_dir_for(job_id, user)
        with _missing_is_404(missing=LookupError):  # no such row, a kept row, no such image
            path, refused = thumbnails.image_file(job_dir, row, image)
        if refused:
            raise HTTPException(403, refused)
        data, media_type, placeholder = thumbnails.render(path, size)
        headers = dict(THUMBNAIL_HEADERS)
        if placeholder:
            headers["X-DJ-Thumbnail"] = f"placeholder: {placeholder}"
        return Response(data, media_type=media_type, headers=headers)


def _run_page(request: Request, user, dag_id: str, run_id: str, task_id=None, map_index=None) -> HTMLResponse:
    """The job page of a DAG run (focused on a partition task's partitions when one is named); a 404
    page when the run has no job directory yet."""
    require_dag_read(user, dag_id)
    static = _root(request) + "/static"
    found = job_lookup.find_job_for_run(dag_id, run_id)
    if found is None:
        return HTMLResponse(
            views.message_page(
                "No Data-Juicer job yet",
                f"DAG run {run_id} of {dag_id} has no job directory yet: its validate task has not run "
                f"(or this DAG is not a Data-Juicer recipe).",
                static=static,
            ),
            status_code=404,
        )
    job_dir, found_by = found
    view = job_data.job_overview(job_dir, dag_id=dag_id, run_id=run_id)
    note = None
    if task_id is not None and not str(task_id).startswith("partitions_seg"):
        note = f"Task {task_id} is not a partition task: the whole job is shown."
    return HTMLResponse(
        views.job_page(
            view,
            api=f"{_root(request)}/api/job/{view['job_id']}",
            static=static,
            focus=_focus(job_dir, task_id, map_index),
            note=note,
            found_by=found_by,
        )
    )
