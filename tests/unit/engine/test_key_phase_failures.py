"""A global op's key phase and rows it cannot read: ``image_deduplicator`` on missing, non-image and
truncated files (engine/execution/key_rows.py).

With ``skip_op_error`` such a row is set aside in ``failed/`` with the reason naming the file,
counted as the op's failure (not a duplicate) and in lineage as failed, never exported, and the other rows are deduplicated
exactly as without it -- whatever the partitioning, in one process or with the sharded global step.
Without ``skip_op_error`` the job fails, naming the file.  Real jobs in this process, no Ray.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_provider_dj.engine import run_job
from airflow_provider_dj.engine.execution import global_shards
from airflow_provider_dj.engine.execution.key_rows import compute_keys
from airflow_provider_dj.engine.input.task_map import run_in_process
from airflow_provider_dj.engine.observe.lineage import DUPLICATE, FAILED
from airflow_provider_dj.engine.storage.global_op_state import KEY_ERROR_COLUMN, KEYS_COLUMN
from airflow_provider_dj.ops.kernels.images import ImageReadError
from airflow_provider_dj.ops.registry import create_op
from tests.unit.engine.media_corpus import copy_images, shipped_images

pytest.importorskip("PIL")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    """Rows naming real images, their copies, a non-image and a truncated JPEG (paths relative)."""
    root = tmp_path_factory.mktemp("key_failures")
    images = copy_images(root / "images", count=len(shipped_images()))
    for p in list(images):
        shutil.copyfile(p, p.with_name(p.stem + "_copy" + p.suffix))
    jpeg = next(p for p in images if p.suffix == ".jpg")
    (root / "images" / "notes.jpg").write_text("not an image, a text file\n")
    (root / "images" / "cut.jpg").write_bytes(jpeg.read_bytes()[: jpeg.stat().st_size // 2])
    names = [p.name for p in images]
    rows = []
    for i, name in enumerate(names):
        rows.append({"id": len(rows), "images": [f"images/{name}"]})
        if i == 1:
            rows.append({"id": len(rows), "images": ["images/notes.jpg"]})
        rows.append({"id": len(rows), "images": [f"images/{Path(name).stem}_copy{Path(name).suffix}"]})
        if i == 2:
            rows.append({"id": len(rows), "images": [f"images/{names[0]}", "images/cut.jpg"]})
        rows.append({"id": len(rows), "text": "no image"})
    (root / "rows.jsonl").write_text("".join(json.dumps({"text": "t", **r}) + "\n" for r in rows))
    return root


def _bad_ids(root: Path) -> dict[int, str]:
    rows = [json.loads(line) for line in (root / "rows.jsonl").read_text().splitlines()]
    return {
        r["id"]: Path(r["images"][-1]).name
        for r in rows
        if any("notes" in p or "cut" in p for p in r.get("images", []))
    }


def _run(tmp_path: Path, corpus: Path, monkeypatch, name: str, partitions: int, shards: int = 0, skip: bool = True):
    monkeypatch.setenv("DJ_GLOBAL_STEP_SHARDS", str(shards))
    monkeypatch.setattr(global_shards, "default_task_runner", lambda: run_in_process)
    recipe = tmp_path / f"{name}.yaml"
    recipe.write_text(
        f"project_name: {name}\ndataset_path: {corpus / 'rows.jsonl'}\nexport_path: {tmp_path / name}.jsonl\n"
        f"work_dir: {tmp_path / 'work'}\nskip_op_error: {str(skip).lower()}\n"
        f"partition:\n  mode: manual\n  num_of_partitions: {partitions}\n"
        "process:\n  - image_deduplicator: {method: phash}\n"
    )
    return run_job(str(recipe), workers=1, job_id=name)


def test_unreadable_images_fail_their_rows_whatever_the_partitioning(tmp_path, corpus, monkeypatch) -> None:
    bad = _bad_ids(corpus)
    assert len(bad) == 2
    exports = {}
    for partitions, shards in ((1, 0), (3, 0), (3, 2)):
        name = f"p{partitions}_s{shards}"
        _run(tmp_path, corpus, monkeypatch, name, partitions, shards)
        exports[name] = [json.loads(line)["id"] for line in (tmp_path / f"{name}.jsonl").read_text().splitlines()]
        failed = [
            json.loads(line)
            for f in sorted((tmp_path / "work" / name / "failed").rglob("*.jsonl"))
            for line in f.read_text().splitlines()
        ]
        assert sorted(r["id"] for r in failed) == sorted(bad), name
        for r in failed:
            assert bad[r["id"]] in r["__dj__error__"] and r["__dj__error_type__"] == "ImageReadError", r
        lineage = pa.concat_tables(
            [pq.read_table(f) for f in sorted((tmp_path / "work" / name / "lineage").rglob("*.parquet"))],
            promote_options="permissive",
        )
        fates = dict(zip(lineage.column("input_row").to_pylist(), lineage.column("fate").to_pylist()))
        assert sorted(r for r, fate in fates.items() if fate == FAILED) == sorted(bad), name  # ids are input rows
        # Every duplicate names the row it repeats, in a partition with failed rows too.
        dup_of = [d for d, fate in zip(lineage.column("dup_of_row").to_pylist(), fates.values()) if fate == DUPLICATE]
        assert dup_of and None not in dup_of, name
        summary = json.loads((tmp_path / "work" / name / "job_summary.json").read_text())
        text = json.dumps(summary)
        assert '"failed": 2' in text, text[:2000]
    assert len(set(map(tuple, exports.values()))) == 1, exports
    kept = exports["p1_s0"]
    assert not set(kept) & set(bad)
    assert len(kept) == len(shipped_images()) * 2  # each image once, and every row without images


def test_without_skip_op_error_the_job_fails_naming_the_file(tmp_path, corpus, monkeypatch) -> None:
    with pytest.raises(Exception, match="notes.jpg|cut.jpg"):
        _run(tmp_path, corpus, monkeypatch, "strict", 2, skip=False)


def test_key_phase_isolates_missing_files_row_by_row(corpus) -> None:
    """The op raises ImageReadError naming the path; the key phase keys the other rows as without it."""
    rows = [{"images": [str(p)]} for p in sorted((corpus / "images").glob("*.png"))]
    rows.insert(1, {"images": [str(corpus / "images" / "gone.png")]})
    table = pa.Table.from_pylist(rows)
    op = create_op("image_deduplicator", {})
    with pytest.raises(ImageReadError, match="gone.png"):
        op.compute_hash(table)
    keys = compute_keys(op, table, [(0, table.num_rows)], skip_op_error=True)
    errors = keys.column(KEY_ERROR_COLUMN).to_pylist()
    assert [e is not None for e in errors] == [i == 1 for i in range(len(rows))]
    assert "gone.png" in errors[1] and "does not exist" in errors[1]
    assert keys.column(KEYS_COLUMN).is_null().to_pylist() == [i == 1 for i in range(len(rows))]
    good = table.take([i for i in range(len(rows)) if i != 1])
    assert keys.column(KEYS_COLUMN).drop_null().to_pylist() == op.compute_hash(good).to_pylist()
    plain = compute_keys(op, good, [(0, good.num_rows)], skip_op_error=True)
    assert plain.column_names == [KEYS_COLUMN]
