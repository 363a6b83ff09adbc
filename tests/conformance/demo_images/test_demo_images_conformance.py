"""The shipped image-text demo recipe, run by the engine in this process, against Data-Juicer 1.6.1.

``dags/recipes/demo_images.yaml`` runs as it ships (only its export path and work dir moved into the
test's folder) on the local executor: no Airflow, no Ray.  Its export must equal, row for row and in
order, what Data-Juicer's own executor exported from the same rows and the same committed images
(``expected/export.jsonl``, written by ``regenerate.sh`` here).  Both write each row's image paths
absolute (joined to the dataset file's folder); the checkout's root is written ``{REPO}`` in both
before they are compared, so the test passes wherever the repository is checked out.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from airflow_provider_dj.engine import run_job
from airflow_provider_dj.engine.observe.why import why_row

pytest.importorskip("PIL")

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
RECIPE = ROOT / "dags" / "recipes" / "demo_images.yaml"
DATASET = ROOT / "dags" / "recipes" / "data" / "demo_images.jsonl"
PLACEHOLDER = "{REPO}"


def _portable(line: str) -> dict:
    """A row with the checkout's root written ``{REPO}`` (as ``generate.py`` writes DJ's rows)."""
    return json.loads(line.replace(json.dumps(str(ROOT))[1:-1], PLACEHOLDER))


def _read(path: Path) -> list[dict]:
    return [_portable(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


@pytest.fixture(scope="module")
def demo(tmp_path_factory) -> dict:
    tmp = tmp_path_factory.mktemp("demo_images")
    overrides = {"export_path": str(tmp / "out.jsonl"), "work_dir": str(tmp / "work")}
    result = run_job(str(RECIPE), overrides=overrides, job_id="demo-images", workers=1)
    return {"result": result, "export": tmp / "out.jsonl"}


def test_export_is_data_juicers_row_for_row(demo) -> None:
    want = _read(HERE / "expected" / "export.jsonl")
    got = _read(demo["export"])
    assert [r["id"] for r in got] == [r["id"] for r in want]
    assert got == want
    assert all(p.startswith(PLACEHOLDER + "/dags/recipes/data/images/") for r in got for p in r["images"])


def test_each_op_drops_the_row_the_recipe_says(demo) -> None:
    """The demo shows every op at work: one row each for the text filter and the three image filters,
    one duplicate image; and a row repeating a filtered row's image is kept (it is no duplicate of an
    exported row)."""
    ops = {o["op_name"]: o for o in demo["result"].summary["ops"]}
    removed = {name: o["filtered"] + o["duplicates"] for name, o in ops.items()}
    assert removed == {
        "whitespace_normalization_mapper": 0,
        "text_length_filter": 1,
        "image_shape_filter": 1,
        "image_aspect_ratio_filter": 1,
        "image_size_filter": 1,
        "image_deduplicator": 1,
    }
    ids = [json.loads(line)["id"] for line in DATASET.read_text(encoding="utf-8").splitlines()]
    job_dir = demo["result"].job_dir
    fates = {
        ids[r]: (w["fate"], w["op_name"])
        for r in range(len(ids))
        if (w := why_row(job_dir, r))["fate"] not in ("kept", "changed")
    }
    assert fates == {
        "img-02": ("duplicate", "image_deduplicator"),
        "img-03": ("filtered", "image_shape_filter"),
        "img-04": ("filtered", "image_aspect_ratio_filter"),
        "img-05": ("filtered", "image_size_filter"),
        "img-06": ("filtered", "text_length_filter"),
    }


def test_the_demo_images_are_committed_small_and_named_relative() -> None:
    """Rows name images relative to the dataset file, so the recipe runs from any checkout; the
    images are small enough to ship."""
    rows = [json.loads(line) for line in DATASET.read_text(encoding="utf-8").splitlines()]
    named = {p for r in rows for p in r["images"]}
    assert named and all(not Path(p).is_absolute() for p in named)
    files = [DATASET.parent / p for p in named]
    assert all(f.is_file() and f.stat().st_size < 100_000 for f in files)
