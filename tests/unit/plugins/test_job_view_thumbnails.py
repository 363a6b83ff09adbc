"""The job view's thumbnails of a removed row's images: what it serves, scaled, and what it refuses.

A real job: the shipped image-text demo recipe (``dags/recipes/demo_images.yaml``) run in this
process over a copy of its data (so a test may remove or swap an image), its job tagged with a DAG
as the validate task tags it.  The app is the plugin's own FastAPI app behind the stand-in auth
manager of ``test_job_view_app.py``; no browser.
"""

from __future__ import annotations

import io
import os
import shutil
import sys
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from airflow_provider_dj import settings
from airflow_provider_dj.engine import run_job
from airflow_provider_dj.engine.jobdir.events import EventLog
from airflow_provider_dj.engine.observe import why
from airflow_provider_dj.plugins import auth
from airflow_provider_dj.plugins.app import create_app
from tests.unit.plugins.conftest import DAG_ID, RUN_ID
from tests.unit.plugins.test_job_view_app import FakeAuthManager

Image = pytest.importorskip("PIL.Image")

REPO = Path(__file__).resolve().parents[3]
RECIPES = REPO / "dags" / "recipes"
JOB = "images"
ALICE = {"Authorization": "Bearer alice"}
# Input rows of the demo (dags/recipes/data/demo_images.jsonl) and what became of them.
KEPT, DUPLICATE, TINY_ICON, LARGE_PHOTO = 0, 2, 3, 5


@pytest.fixture(scope="module")
def job(tmp_path_factory) -> dict:
    tmp = tmp_path_factory.mktemp("thumbs")
    shutil.copytree(RECIPES / "data" / "images", tmp / "data" / "images")
    shutil.copy(RECIPES / "data" / "demo_images.jsonl", tmp / "data" / "demo_images.jsonl")
    overrides = {
        "dataset_path": str(tmp / "data" / "demo_images.jsonl"),
        "export_path": str(tmp / "out.jsonl"),
        "work_dir": str(tmp / "work"),
    }
    result = run_job(str(RECIPES / "demo_images.yaml"), overrides=overrides, job_id=JOB, workers=1)
    defaults = {"airflow_dag_id": DAG_ID, "airflow_run_id": RUN_ID}
    EventLog(result.job_dir, JOB, writer="validate", defaults=defaults).emit("job_start", status="new", partitions=2)
    return {"dir": result.job_dir, "work": str(tmp / "work"), "images": tmp / "data" / "images", "tmp": tmp}


@pytest.fixture
def client(job, monkeypatch) -> TestClient:
    monkeypatch.setattr(auth, "_auth_manager", lambda: FakeAuthManager())
    monkeypatch.setenv("DJ_WORK_DIR", job["work"])
    monkeypatch.setenv("DJ_STATE_DIR", str(job["tmp"] / "state"))
    return TestClient(create_app(), root_path="/dj-jobs")


def _thumb(client, row: int, **params):
    return client.get(f"/api/job/{JOB}/thumbnail", params={"row": row, **params}, headers=ALICE)


def _decoded(response) -> Image.Image:
    return Image.open(io.BytesIO(response.content))


def test_why_names_the_thumbnails_of_a_filtered_image_row_with_its_reason(client):
    w = client.get(f"/api/job/{JOB}/why", params={"row": TINY_ICON}, headers=ALICE).json()
    assert (w["fate"], w["op_name"]) == ("filtered", "image_shape_filter")
    assert "min_width=64" in w["reason"]
    assert w["thumbnails"] == [{"name": "pin_small.png", "path": f"/thumbnail?row={TINY_ICON}&image=0"}]
    kept = client.get(f"/api/job/{JOB}/why", params={"row": KEPT}, headers=ALICE).json()
    assert kept["fate"] == "kept" and kept["thumbnails"] == []


def test_a_thumbnail_is_the_rows_image_scaled_down(client, job):
    r = _thumb(client, LARGE_PHOTO)  # 640x427, 60 KB: filtered by image_size_filter
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == "image/jpeg" and "x-dj-thumbnail" not in r.headers
    assert r.headers["cache-control"] == "private, max-age=300"
    img = _decoded(r)
    assert (img.format, img.size) == ("JPEG", (160, 107))
    assert len(r.content) < (job["images"] / "temple_large.jpg").stat().st_size / 5
    small = _thumb(client, LARGE_PHOTO, size=64)
    assert _decoded(small).size == (64, 43)
    icon = _thumb(client, TINY_ICON)  # a 32x32 RGBA icon: kept at its size, transparency kept (PNG)
    assert (icon.headers["content-type"], _decoded(icon).format, _decoded(icon).size) == ("image/png", "PNG", (32, 32))
    dup = _thumb(client, DUPLICATE)
    assert dup.status_code == 200 and _decoded(dup).size == (160, 107)


def test_only_removed_rows_images_by_index_and_sizes_within_bounds(client):
    assert _thumb(client, KEPT).status_code == 404  # a kept row: nothing to explain
    assert _thumb(client, TINY_ICON, image=1).status_code == 404  # the row names one image
    assert _thumb(client, 10**6).status_code == 404
    for bad in ({"size": 4096}, {"size": 1}, {"image": -1}, {"image": "../../etc/passwd"}):
        assert _thumb(client, TINY_ICON, **bad).status_code == 422, bad


def test_a_path_in_the_query_string_is_never_opened(client):
    r = _thumb(client, TINY_ICON, path="/etc/passwd", file="../../../../etc/passwd")
    assert r.status_code == 200 and _decoded(r).size == (32, 32)  # the row's own image, nothing else
    r = client.get(f"/api/job/{JOB}/thumbnail/..%2F..%2Fetc%2Fpasswd", headers=ALICE)
    assert r.status_code == 404 and "root:" not in r.text


def test_a_record_naming_a_file_the_job_did_not_plan_is_refused(client, monkeypatch):
    """Lineage and failed/ are files in the work dir: one edited to name another file (here, the
    api-server's own password file) is refused, not opened."""
    answer = why.why_row

    def edited(job_dir, row, **kw):
        out = answer(job_dir, row, **kw)
        out["sample"] = dict(out["sample"], images=["/etc/passwd"])
        return out

    monkeypatch.setattr(why, "why_row", edited)
    r = _thumb(client, TINY_ICON)
    assert r.status_code == 403 and "not a file this job planned" in r.json()["detail"]
    assert "root:" not in r.text


def test_a_symlink_swapped_in_outside_the_allowed_roots_is_refused(client, job, monkeypatch):
    target = job["images"] / "temple_large.jpg"
    outside = job["tmp"] / "outside.jpg"
    shutil.move(target, outside)
    try:
        os.symlink(outside, target)
        monkeypatch.setenv("AIRFLOW__DJ__ALLOWED_ROOTS", str(job["tmp"] / "data"))
        settings.reset()
        r = _thumb(client, LARGE_PHOTO)
        assert r.status_code == 403 and "outside the allowed roots" in r.json()["detail"]
        monkeypatch.setenv("AIRFLOW__DJ__ALLOWED_ROOTS", str(job["tmp"]))
        settings.reset()
        assert _thumb(client, LARGE_PHOTO).status_code == 200
    finally:
        monkeypatch.delenv("AIRFLOW__DJ__ALLOWED_ROOTS")
        settings.reset()
        target.unlink()
        shutil.move(outside, target)


def test_a_missing_file_or_pillow_gives_a_placeholder(client, job, monkeypatch):
    target = job["images"] / "pin_small.png"
    aside = job["tmp"] / "aside.png"
    shutil.move(target, aside)
    try:
        r = _thumb(client, TINY_ICON)
    finally:
        shutil.move(aside, target)
    assert (r.status_code, r.headers["content-type"]) == (200, "image/svg+xml")
    assert r.headers["x-dj-thumbnail"] == "placeholder: the image file is missing"
    assert b"<script" not in r.content and b"the image file is missing" in r.content
    monkeypatch.setitem(sys.modules, "PIL", None)  # ``from PIL import Image`` raises ImportError
    r = _thumb(client, TINY_ICON)
    assert r.headers["x-dj-thumbnail"] == "placeholder: Pillow is not installed on the api-server"


def test_thumbnails_are_read_with_the_jobs_dag_access(client):
    path = f"/api/job/{JOB}/thumbnail?row={TINY_ICON}"
    assert client.get(path).status_code == 401
    r = client.get(path, headers={"Authorization": "Bearer bob"})
    assert r.status_code == 403 and not r.headers["content-type"].startswith("image/")
