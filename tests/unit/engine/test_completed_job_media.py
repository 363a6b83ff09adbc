"""A completed job's re-run checks the media files its export names, as it checks the export file.

``image_blur_mapper`` writes blurred copies that the export places in ``<export stem>_media/``
(engine/output/media.py).  A re-run of the completed job (``run_job`` again, ``verify_completed_export``)
re-checks each of those copies against the record the export sealed in its summary; one deleted or
changed since is refused by path, like a changed export file, and nothing is rewritten.  The shipped
image demo's rows with a blur of every kept image appended (as tests/integration/test_multimodal_dag.py
runs it under Airflow), run by the engine in this process.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest

from airflow_provider_dj.core.errors import DJError
from airflow_provider_dj.engine import run_job
from airflow_provider_dj.engine.job.completed_export import verify_completed_export
from airflow_provider_dj.engine.jobdir.layout import EXPORT_MEDIA_RECORD, JOB_SUMMARY
from airflow_provider_dj.engine.output.errors import ExportMismatchError
from airflow_provider_dj.engine.output.media import export_media_dir
from tests.helpers_compare import assert_same_bytes

pytest.importorskip("PIL")

REPO = Path(__file__).resolve().parents[3]
DEMO = REPO / "dags" / "recipes" / "demo_images.yaml"


def _recipe(tmp_path: Path) -> Path:
    """The demo recipe over its shipped rows, outputs under ``tmp_path``, every kept image blurred."""
    text = DEMO.read_text()
    text = text.replace(
        "dataset_path: data/demo_images.jsonl", f"dataset_path: {REPO}/dags/recipes/data/demo_images.jsonl"
    )
    text = text.replace("export_path: ../../demo_output/demo_images_clean.jsonl", f"export_path: {tmp_path}/out.jsonl")
    text = text.replace("work_dir: ../../demo_output/jobs", f"work_dir: {tmp_path}/work")
    assert str(tmp_path) in text and str(REPO) in text, "the demo recipe's paths changed: update this test"
    path = tmp_path / "demo_blur.yaml"
    path.write_text(text + "  - image_blur_mapper:\n      p: 1.0\n      radius: 2\n")
    return path


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


@pytest.fixture
def job(tmp_path) -> dict:
    recipe = _recipe(tmp_path)
    result = run_job(str(recipe), job_id="blur", workers=1)
    export = tmp_path / "out.jsonl"
    media = Path(export_media_dir(str(export)))
    rows = [json.loads(line) for line in export.read_text().splitlines()]
    named = sorted({p for r in rows for p in r["images"]})
    # The demo keeps 6 rows, 5 with an image (4 distinct ones), each blurred into the export's media folder.
    assert len(rows) == 6 and sum(1 for r in rows if r["images"]) == 5 and len(named) == 4
    assert all(Path(p).parent == media for p in named)
    return {
        "recipe": recipe,
        "dir": Path(result.job_dir),
        "export": export,
        "media": media,
        "named": named,
        "export_bytes": export.read_bytes(),
    }


def _rerun(job: dict):
    return run_job(str(job["recipe"]), job_id="blur", workers=1)


def test_the_export_records_its_media_copies_and_a_rerun_checks_them(job) -> None:
    summary = json.loads((job["dir"] / JOB_SUMMARY).read_text())
    record = summary["export"]["media"]["record"]
    assert record["path"] == EXPORT_MEDIA_RECORD
    files = json.loads((job["dir"] / EXPORT_MEDIA_RECORD).read_text())["files"]
    assert [f["path"] for f in files] == job["named"] == sorted(str(p) for p in job["media"].iterdir())
    for f in files:
        assert f["bytes"] == os.path.getsize(f["path"])
        assert os.path.samefile(f["source"], f["path"])  # hard-linked from the job directory's committed copy
        assert str(job["dir"]) in f["source"]
    assert _rerun(job).already_complete
    assert verify_completed_export(str(job["dir"]))["integrity_problems"] == []


@pytest.mark.parametrize("damage", ["deleted", "replaced", "changed_in_place"])
def test_a_missing_or_changed_media_copy_is_refused_naming_it(job, damage) -> None:
    victim = Path(job["named"][1])
    files = {f["path"]: f for f in json.loads((job["dir"] / EXPORT_MEDIA_RECORD).read_text())["files"]}
    source = files[str(victim)]["source"]
    if damage == "deleted":
        victim.unlink()
        problem = "it is missing"
    elif damage == "replaced":  # a new file of another size in its place: the job directory's copy is intact
        tmp = victim.with_suffix(".new")
        tmp.write_bytes(victim.read_bytes() + b"\0")
        os.replace(tmp, victim)
        problem = f"it has {files[str(victim)]['bytes'] + 1} bytes, {files[str(victim)]['bytes']} were committed"
    else:  # one byte flipped through the hard link: the job directory's copy changed with it
        with open(victim, "r+b") as fh:
            fh.seek(100)
            byte = fh.read(1)
            fh.seek(100)
            fh.write(bytes([byte[0] ^ 0xFF]))
        problem = "its xxh3 is"
    before = _snapshot(job["media"])
    with pytest.raises(ExportMismatchError) as ei:
        _rerun(job)
    message = str(ei.value)
    assert isinstance(ei.value, DJError)
    assert re.search(
        rf"job blur completed, but a media file of its export {re.escape(str(job['export']))} is not what the "
        rf"export placed there: {re.escape(str(victim))}: {re.escape(problem)}",
        message,
    ), message
    assert message.endswith("nothing was rewritten: restore it or start a new job")
    intact = f"the job directory's copy {source} is intact: copy it back"
    assert (intact in message) == (damage != "changed_in_place"), message
    # Nothing was rewritten: the export and its media folder are as the damage left them.
    assert_same_bytes(job["export"].read_bytes(), job["export_bytes"], "the export after the refusal")
    assert _snapshot(job["media"]) == before
    with pytest.raises(ExportMismatchError, match=re.escape(str(victim))):
        verify_completed_export(str(job["dir"]))
    if damage != "changed_in_place":  # restored as the message says: the re-run verifies again
        shutil.copyfile(source, victim)
        assert _rerun(job).already_complete


def test_a_changed_record_of_the_media_copies_is_refused_naming_it(job) -> None:
    record = job["dir"] / EXPORT_MEDIA_RECORD
    record.write_text(record.read_text().replace('"bytes": ', '"bytes": 1', 1))
    with pytest.raises(
        ExportMismatchError, match=re.escape(f"{record} (the record of the export's media files): it has")
    ):
        _rerun(job)
    record.unlink()
    with pytest.raises(
        ExportMismatchError, match=re.escape(f"{record} (the record of the export's media files): it is missing")
    ):
        _rerun(job)


def test_a_job_exported_before_the_record_is_still_verified_by_its_export_file(job) -> None:
    """A summary written before this check has no record: its export file is verified, its copies are not."""
    path = job["dir"] / JOB_SUMMARY
    summary = json.loads(path.read_text())
    del summary["export"]["media"]["record"]
    path.write_text(json.dumps(summary))
    Path(job["named"][0]).unlink()
    assert _rerun(job).already_complete
    job["export"].write_bytes(job["export_bytes"] + b"{}\n")
    with pytest.raises(ExportMismatchError, match="changed since"):
        _rerun(job)
