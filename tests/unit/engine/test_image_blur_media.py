"""The media files ``image_blur_mapper`` writes: committed with the checkpoint that names them,
exported beside the export, never orphaned by a crash or a resume, removed by retention.

Whole jobs run in this process (``prepare_job`` + ``run_segment`` + ``export_job``, or ``run_job``)
over real images installed packages ship (``media_corpus.py``).  "No orphan" is checked the same
way everywhere: every file under the job's media folders is named by a committed checkpoint's
accounting (through its ``media_manifest``), and every file of the export's media folder by an exported row.
"""

from __future__ import annotations

import glob
import json
import os
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("PIL")

from airflow_provider_dj.engine.config.recipe import load_recipe
from airflow_provider_dj.engine.execution.segment_runner import run_segment
from airflow_provider_dj.engine.job.export import export_job
from airflow_provider_dj.engine.job.setup import prepare_job
from airflow_provider_dj.engine.jobdir import lock as job_lock
from airflow_provider_dj.engine.jobdir.events import read_events
from airflow_provider_dj.engine.jobdir.faults import FAULT_FILE, InjectedFault
from airflow_provider_dj.engine.output.media import export_media_dir
from airflow_provider_dj.ops.kernels.images import open_image
from airflow_provider_dj.ops.mappers.image_blur import SOURCE_FILE_COLUMN, blur_filter
from tests.helpers_compare import assert_same_bytes
from tests.unit.engine.media_corpus import copy_images, write_rows

RECIPE = """\
project_name: blur_unit
dataset_path: {data}
export_path: {out}
work_dir: {work}
partition: {{mode: manual, num_of_partitions: 2}}
checkpoint: {{strategy: every_op}}
skip_op_error: {skip}
max_failed_ratio: 1
intermediate_storage: {{retention_policy: {retention}}}
process:
  - image_blur_mapper: {{p: 1.0, blur_type: gaussian, radius: 2}}
  - image_shape_filter: {{min_width: 40}}
"""
BLUR = "image_blur_mapper"


@pytest.fixture
def images(tmp_path) -> list[Path]:
    return copy_images(tmp_path / "images", 3)


def _rows(images: list[Path], extra: list[dict] | None = None) -> list[dict]:
    rows = [
        {"text": "one", "images": [str(images[0])]},
        {"text": "two", "images": [str(images[1]), str(images[2])]},
        {"text": "none", "images": []},
        {"text": "the same twice", "images": [str(images[0]), str(images[0])]},
        {"text": "three", "images": [str(images[2])]},
    ]
    return rows + (extra or [])


def _job(tmp_path, name: str, rows: list[dict], *, skip: bool = True, retention: str = "keep_all") -> dict:
    data = write_rows(tmp_path / "in" / "rows.jsonl", rows)
    rpath = tmp_path / f"{name}.yaml"
    out = tmp_path / "out" / "result.jsonl"
    rpath.write_text(
        RECIPE.format(data=data, out=out, work=tmp_path / "work", skip=str(skip).lower(), retention=retention)
    )
    prepared = prepare_job(load_recipe(rpath), job_id=name, airflow_run_id=f"{name}_run1")
    job_lock.release(prepared.job_dir, f"{name}_run1")
    return {"dir": prepared.job_dir, "recipe": rpath, "out": str(out)}


def _run_all(job: dict) -> dict:
    for pid in range(2):
        run_segment(job["dir"], 0, pid)
    return export_job(job["dir"])


def _exported(job: dict) -> list[dict]:
    return [json.loads(line) for line in Path(job["out"]).read_text().splitlines()]


def _media_files(job_dir: str) -> set[str]:
    """Every file (hidden ones too) under the job's media folders, relative to the job directory."""
    root = os.path.join(job_dir, "checkpoints")
    out = set()
    for folder in glob.glob(os.path.join(root, "media_op_*")):
        for dirpath, _, names in os.walk(folder):
            out |= {os.path.relpath(os.path.join(dirpath, n), job_dir) for n in names}
    return out


def _committed_media(job_dir: str) -> set[str]:
    """The media manifests the accounting of any committed checkpoint marker names, and the files
    they list (relative to the job directory)."""
    named = set()
    for marker in glob.glob(os.path.join(job_dir, "checkpoints", "checkpoint_op_*", "*.commit.json")):
        for entry in json.loads(Path(marker).read_text())["accounting"]:
            seal = entry.get("media_manifest")
            if seal:
                manifest = json.loads(Path(job_dir, seal["path"]).read_text())
                named |= {seal["path"]} | {f"{manifest['dir']}/{f['name']}" for f in manifest["files"]}
    return named


def _assert_no_orphans(job: dict) -> None:
    files = _media_files(job["dir"])
    assert files and files == _committed_media(job["dir"])
    folder = export_media_dir(job["out"])
    named = {p for r in _exported(job) for p in r.get("images") or ()}
    assert {os.path.join(folder, n) for n in os.listdir(folder)} == named


def _blurred_pixels(path: Path) -> np.ndarray:
    return np.asarray(open_image(str(path)).convert("RGB").filter(blur_filter("gaussian", 2)))


def test_the_export_names_blurred_copies_in_its_media_folder(tmp_path, images) -> None:
    job = _job(tmp_path, "clean", _rows(images))
    summary = _run_all(job)
    rows = _exported(job)
    folder = export_media_dir(job["out"])
    assert folder == str(tmp_path / "out" / "result_media")
    assert summary["export"]["media"]["dir"] == folder and summary["export"]["media"]["files"] == 3
    by_text = {r["text"]: r for r in rows}
    assert by_text["none"]["images"] == [] and by_text["none"][SOURCE_FILE_COLUMN] == []
    for row in rows:
        assert len(row["images"]) == len(row[SOURCE_FILE_COLUMN])
        for new, src in zip(row["images"], row[SOURCE_FILE_COLUMN]):
            assert os.path.dirname(new) == folder and src in {str(p) for p in images}
            ext = os.path.splitext(src)[1]
            assert new.endswith(ext)
            got = np.asarray(open_image(new))
            if ext == ".png":  # lossless: the pixels are the blur's exactly
                assert np.array_equal(got, _blurred_pixels(Path(src)))
            else:  # JPEG: the file is the blur's pixels encoded as Pillow's save encodes them
                assert got.shape == _blurred_pixels(Path(src)).shape
    assert by_text["the same twice"]["images"][0] == by_text["the same twice"]["images"][1]
    _assert_no_orphans(job)
    # The copies are hard links of the committed files (one file system here).
    committed = {p for p in _committed_media(job["dir"]) if not p.endswith(".json")}
    for name in os.listdir(folder):
        sources = [os.path.join(job["dir"], p) for p in committed if os.path.basename(p) == name]
        assert any(os.path.samefile(os.path.join(folder, name), s) for s in sources)


def test_a_crash_before_the_commit_then_a_resume_exports_the_same_bytes_without_orphans(tmp_path, images) -> None:
    clean = _job(tmp_path / "a", "blur", _rows(images))
    _run_all(clean)
    clean_bytes = Path(clean["out"]).read_bytes()
    clean_media = {
        n: (Path(export_media_dir(clean["out"])) / n).read_bytes() for n in os.listdir(export_media_dir(clean["out"]))
    }

    job = _job(tmp_path / "b", "blur", _rows(images))
    Path(job["dir"], FAULT_FILE).write_text(
        json.dumps([{"point": "checkpoint_mid_write", "partition_id": 0, "op_index": 0, "store": "checkpoint_op"}])
    )
    with pytest.raises(InjectedFault):
        run_segment(job["dir"], 0, 0)
    # The files are written, the checkpoint naming them is not committed; a killed writer's temporary
    # file and a stray file of an earlier try lie beside them.
    folder = Path(job["dir"], "checkpoints", f"media_op_000_{BLUR}", "partition_00000")
    assert any(folder.iterdir()) and not _committed_media(job["dir"])
    # The manifest was written before the checkpoint; no committed marker names it yet.
    assert folder.with_suffix(".json").exists()
    (folder / ".x.jpg.tmp-123456789abc").write_bytes(b"torn")
    (folder / "stray_0123.jpg").write_bytes(b"an earlier try's file")
    for pid in range(2):
        run_segment(job["dir"], 0, pid)
    export_job(job["dir"])
    assert_same_bytes(
        Path(job["out"]).read_bytes(), clean_bytes.replace(str(tmp_path / "a").encode(), str(tmp_path / "b").encode())
    )
    folder_b = export_media_dir(job["out"])
    assert {n: (Path(folder_b) / n).read_bytes() for n in os.listdir(folder_b)} == clean_media
    _assert_no_orphans(job)


def test_a_killed_run_then_run_job_resume_leaves_no_orphans(tmp_path, images) -> None:
    """The same through the public entry point: the job dies mid-partition (after the blur, before
    its checkpoint commits) and ``run_job`` resumes it."""
    from airflow_provider_dj.engine import run_job

    data = write_rows(tmp_path / "in" / "rows.jsonl", _rows(images))
    rpath = tmp_path / "r.yaml"
    out = tmp_path / "out" / "result.jsonl"
    rpath.write_text(RECIPE.format(data=data, out=out, work=tmp_path / "work", skip="true", retention="keep_all"))
    job_dir = tmp_path / "work" / "killed"
    job_dir.mkdir(parents=True)
    (job_dir / FAULT_FILE).write_text(
        json.dumps([{"point": "checkpoint_mid_write", "partition_id": 1, "op_index": 0, "store": "checkpoint_op"}])
    )
    with pytest.raises(Exception):  # noqa: B017 - the injected fault, however the runner wraps it
        run_job(str(rpath), job_id="killed", workers=1)
    run_job(str(rpath), job_id="killed", workers=1, resume="killed")
    _assert_no_orphans({"dir": str(job_dir), "out": str(out)})


@pytest.mark.parametrize("damage", ["changed", "missing", "manifest_changed", "manifest_missing"])
def test_a_damaged_media_file_rejects_its_checkpoints_and_is_recomputed(tmp_path, images, damage) -> None:
    job = _job(tmp_path, "damaged", _rows(images))
    for pid in range(2):
        run_segment(job["dir"], 0, pid)
    suffix = "partition_00001.json" if damage.startswith("manifest") else "partition_00001/"
    [victim] = sorted(p for p in _committed_media(job["dir"]) if suffix in p)[:1]
    path = Path(job["dir"], victim)
    original = path.read_bytes()
    if damage.endswith("missing"):
        path.unlink()
    else:
        path.write_bytes(original[:-1] + bytes([original[-1] ^ 1]))
    res = run_segment(job["dir"], 0, 1)
    assert res.resumed_from_op == -1 and res.ops_run == [0, 1]  # both checkpoints named the file
    rejected = read_events(job["dir"], "checkpoint_rejected")
    assert rejected and all(str(path) in e["error_message"] for e in rejected)
    assert_same_bytes(path.read_bytes(), original, "the image is written again, byte for byte")
    export_job(job["dir"])
    _assert_no_orphans(job)


@pytest.mark.parametrize("policy", ["cleanup_all", "keep_failed_only"])
def test_retention_removes_the_media_files_with_their_checkpoints(tmp_path, images, policy) -> None:
    # One row fails (a file that is not an image, in partition 1): keep_failed_only keeps that partition.
    bad = tmp_path / "images" / "not_image.jpg"
    bad.write_text("not an image")
    job = _job(tmp_path, "retained", _rows(images, [{"text": "bad", "images": [str(bad)]}]), retention=policy)
    _run_all(job)
    left = _media_files(job["dir"])
    # What planning recorded (partitioning_info and each partition's input media digests) stays: a resume
    # proves the input with it.  Every checkpoint folder, the ops' media among them, goes.
    kept = {os.path.join(job["dir"], "checkpoints", "media_digests", "")}
    if policy == "cleanup_all":
        assert left == set() and set(glob.glob(os.path.join(job["dir"], "checkpoints", "*", ""))) == kept
    else:
        assert left and all("partition_00001" in p for p in left)
        removed = glob.glob(os.path.join(job["dir"], "checkpoints", "*", "partition_00000*"))
        assert [p for p in removed if not p.startswith(tuple(kept))] == []
    # The export keeps its own copies.
    for row in _exported(job):
        for p in row["images"]:
            assert open_image(p).size


def test_unreadable_images_fail_their_rows_and_leave_no_file(tmp_path, images) -> None:
    folder = tmp_path / "images"
    (folder / "not_image.jpg").write_text("a caption, not a JPEG file\n")
    (folder / "truncated.jpg").write_bytes(images[0].read_bytes()[: images[0].stat().st_size // 2])
    extra = [
        {"text": "not an image", "images": [str(folder / "not_image.jpg")]},
        # A good image beside a truncated one: the row fails, so the good image's blurred copy,
        # written before the truncated one was read, is not committed and is removed.
        {"text": "good and truncated", "images": [str(images[1]), str(folder / "truncated.jpg")]},
    ]
    # Two rows each, so the truncated row is in partition 1 alone with the copy of images[1] unused there.
    rows = [
        {"text": "one", "images": [str(images[0])]},
        {"text": "none", "images": []},
        *extra,
    ]
    job = _job(tmp_path, "bad", rows)
    _run_all(job)
    assert [r["text"] for r in _exported(job)] == ["one", "none"]
    failed = [
        json.loads(line)
        for f in glob.glob(os.path.join(job["dir"], "failed", f"op_000_{BLUR}", "*.jsonl"))
        for line in Path(f).read_text().splitlines()
    ]
    reasons = {r["text"]: r["__dj__error__"] if "__dj__error__" in r else json.dumps(r) for r in failed}
    assert set(reasons) == {"not an image", "good and truncated"}
    assert "not_image.jpg" in reasons["not an image"] and "truncated" in reasons["good and truncated"]
    assert all(os.path.basename(images[1]).split(".")[0] not in p for p in _media_files(job["dir"]))
    _assert_no_orphans(job)


def test_without_skip_op_error_an_unreadable_image_fails_the_job_naming_it(tmp_path, images) -> None:
    bad = tmp_path / "images" / "not_image.jpg"
    bad.write_text("not an image")
    job = _job(tmp_path, "strict", _rows(images, [{"text": "bad", "images": [str(bad)]}]), skip=False)
    run_segment(job["dir"], 0, 0)
    with pytest.raises(Exception, match="not_image.jpg"):
        run_segment(job["dir"], 0, 1)


def test_the_parallel_export_parts_name_the_same_copies(tmp_path, images) -> None:
    """A Ray worker's part file (``output/parts.py``) names the export's copies, as the in-process export does."""
    from airflow_provider_dj.engine.output.parts import write_part

    job = _job(tmp_path, "parts", _rows(images))
    _run_all(job)
    parts = b"".join(Path(write_part(job["dir"], pid)["path"]).read_bytes() for pid in range(2))
    assert_same_bytes(parts, Path(job["out"]).read_bytes())
