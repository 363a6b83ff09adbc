"""The shipped image-text demo, with an op that writes image files, through a real Airflow (dag.test) and a
real local Ray: its partitions run in Ray workers, which write the blurred images into the job directory
beside their checkpoints, and the export task copies them next to the export.  The DAG's export and its
images are the engine's in-process run's, byte for byte."""

from __future__ import annotations

import json
import os

import pytest

from airflow_provider_dj.engine.output.media import export_media_dir
from tests.helpers_compare import assert_same_bytes
from tests.integration.conftest import read_jsonl

pytestmark = pytest.mark.integration

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEMO = os.path.join(REPO, "dags", "recipes", "demo_images.yaml")


def _recipe(tmp_path, name: str) -> str:
    """The demo recipe (its shipped rows and images, read in place) with its outputs under ``tmp_path``
    and a blur of every kept image appended."""
    text = open(DEMO).read()
    text = text.replace("project_name: dj_demo_images", f"project_name: {name}")
    text = text.replace(
        "dataset_path: data/demo_images.jsonl", f"dataset_path: {REPO}/dags/recipes/data/demo_images.jsonl"
    )
    text = text.replace(
        "export_path: ../../demo_output/demo_images_clean.jsonl", f"export_path: {tmp_path}/{name}.jsonl"
    )
    text = text.replace("work_dir: ../../demo_output/jobs", f"work_dir: {tmp_path}/work")
    assert str(tmp_path) in text and REPO in text, "the demo recipe's paths changed: update this test"
    text += "  - image_blur_mapper:\n      p: 1.0\n      radius: 2\n"
    path = tmp_path / f"{name}.yaml"
    path.write_text(text)
    return str(path)


def _images_by_row(export: str) -> list[tuple[str, list[bytes]]]:
    """Each exported row's text and the bytes of the images it names (which must lie in the export's media
    folder; the demo keeps one row without images)."""
    media = export_media_dir(export)
    out = []
    for row in read_jsonl(export):
        assert all(p.startswith(media + os.sep) for p in row["images"]), row
        images = [open(p, "rb").read() for p in row["images"]]
        sources = [open(p, "rb").read() for p in row["__dj__source_file__"]]
        assert len(sources) == len(images) and all(a != b for a, b in zip(images, sources)), row  # blurred copies
        out.append((row["text"], images))
    return out


def test_image_ops_and_their_written_files_through_the_dag_match_the_engine(tmp_path, run_dag):
    from airflow_provider_dj.engine import run_job

    recipe = _recipe(tmp_path, "it_images")
    dr = run_dag(recipe, {"job_id": "images"}, retries=0)
    assert str(dr.state).split(".")[-1].lower() == "success"
    export = str(tmp_path / "it_images.jsonl")
    reference = run_job(recipe, job_id="images_ref", workers=1, overrides={"export_path": str(tmp_path / "ref.jsonl")})

    ours, engine = _images_by_row(export), _images_by_row(reference.export_path)
    assert len(ours) == 6 and sum(1 for _, images in ours if images) == 5  # the demo's export: one row without images
    assert [t for t, _ in ours] == [t for t, _ in engine]
    for (text, got), (_, want) in zip(ours, engine):
        for a, b in zip(got, want, strict=True):
            assert_same_bytes(a, b, f"a blurred image of the row {text[:40]!r} differs from the engine's")
    summary = json.load(open(tmp_path / "work" / "images" / "job_summary.json"))
    blur = summary["ops"][-1]
    assert blur["op_name"] == "image_blur_mapper" and blur["rows_in"] == blur["rows_out"] == 6
