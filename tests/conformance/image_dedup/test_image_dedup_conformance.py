"""image_deduplicator and its hash kernel against Data-Juicer 1.6.1 and imagededup, on real images.

The fixtures come from ``regenerate.sh`` here (DJ's venv, with imagededup); this module uses only our
package.  The corpus (``corpus.py``) is rebuilt in a temporary folder from the images installed
packages ship, and each file's bytes are checked against the recorded SHA-256 first, so the hashes
are compared on the very pixels the reference saw.  Compared exactly: each file's four hashes, each
row's concatenated hash string, and the rows kept -- by the op over slices, and by whole jobs in this
process with 1, 3 and 7 partitions and with the sharded global step.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from airflow_provider_dj.engine import run_job
from airflow_provider_dj.engine.execution import global_shards
from airflow_provider_dj.engine.input.task_map import run_in_process
from airflow_provider_dj.engine.jobdir.layout import GLOBAL_SHARDS_DIR
from airflow_provider_dj.ops.kernels.image_hash import METHODS, image_hashes
from airflow_provider_dj.ops.kernels.images import open_image
from airflow_provider_dj.ops.kernels.keys import first_occurrence_mask
from airflow_provider_dj.ops.registry import create_op, get_op_class
from tests.unit.engine.media_corpus import shipped_images

pytest.importorskip("PIL")

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
import corpus  # noqa: E402

EXPECTED = HERE / "expected"
IMAGES = json.loads((EXPECTED / "images.json").read_text())
ROWS = [json.loads(line) for line in (EXPECTED / "rows.jsonl").read_text().splitlines()]
ARGS = json.loads((HERE / "variants.json").read_text())


def _expected(variant: str) -> dict:
    """DJ's output for a variant: its arguments, each row's ``imagehash`` and the kept rows' ids."""
    lines = [json.loads(line) for line in (EXPECTED / f"image_deduplicator__{variant}.jsonl").read_text().splitlines()]
    assert [r["id"] for r in lines] == [r["id"] for r in ROWS]
    return {
        "args": ARGS[variant],
        "imagehash": [r["imagehash"] for r in lines],
        "kept": [r["id"] for r in lines if r["kept"]],
    }


VARIANTS = {name: _expected(name) for name in sorted(ARGS)}


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    """The corpus's folder: ``images/`` and ``rows.jsonl`` (paths relative to it, as a user writes them)."""
    root = tmp_path_factory.mktemp("image_dedup")
    files = corpus.build_images(root / "images", shipped_images())
    changed = sorted(n for n in IMAGES if files.get(n) != IMAGES[n]["sha256"])
    assert not changed and set(files) == set(IMAGES), (
        f"the corpus files differ from the reference's ({changed or sorted(set(files) ^ set(IMAGES))}): "
        "another Pillow or other shipped images; run tests/conformance/image_dedup/regenerate.sh"
    )
    assert corpus.build_rows(files) == ROWS
    (root / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    return root


def _absolute(rows: list[dict], root: Path) -> list[dict]:
    return [{**r, "images": [str(root / p) for p in r["images"]]} if r.get("images") else r for r in rows]


@pytest.mark.parametrize("method", METHODS)
def test_hash_kernel_is_imagededup_bit_for_bit(dataset: Path, method: str) -> None:
    names = sorted(IMAGES)
    got = image_hashes((open_image(str(dataset / "images" / n)) for n in names), method)
    assert dict(zip(names, got)) == {n: IMAGES[n][method] for n in names}


def test_corpus_has_near_duplicates_and_flat_images() -> None:
    """The reference itself: near copies that phash matches, and distinct flat images that hash alike
    (scipy's exact zeros), so the tests above cover both."""
    ph = {n: v["phash"] for n, v in IMAGES.items()}
    assert ph["s2_q40.jpg"] == ph["s2_gray.png"] and ph["s2_q40.jpg"] != ph["s2_flip.png"]
    assert len({ph[f"s{i}_flat.png"] for i in range(4)}) == 1
    assert len({v["whash"] for v in IMAGES.values()}) > 15


@pytest.mark.parametrize("slices", [3])
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_op_matches_data_juicer(dataset: Path, variant: str, slices: int) -> None:
    want = VARIANTS[variant]
    get_op_class("image_deduplicator").validate_args(want["args"])
    op = create_op("image_deduplicator", want["args"])
    table = pa.Table.from_pylist(_absolute(ROWS, dataset))
    assert op.image_hash_strings(table) == want["imagehash"]
    bounds = np.linspace(0, table.num_rows, slices + 1).astype(int)
    keys = [op.compute_hash(table.slice(a, b - a)) for a, b in zip(bounds[:-1], bounds[1:])]
    kept = [r["id"] for r, k in zip(ROWS, first_occurrence_mask(keys)) if k]
    assert kept == want["kept"]


def _job(tmp_path: Path, dataset: Path, monkeypatch, args: dict, partitions: int, shards: int = 0) -> list[int]:
    monkeypatch.setenv("DJ_GLOBAL_STEP_SHARDS", str(shards))
    monkeypatch.setattr(global_shards, "default_task_runner", lambda: run_in_process)
    name = f"p{partitions}_s{shards}"
    recipe = tmp_path / f"{name}.yaml"
    recipe.write_text(
        f"project_name: {name}\ndataset_path: {dataset / 'rows.jsonl'}\nexport_path: {tmp_path / name}.jsonl\n"
        f"work_dir: {tmp_path / 'work'}\npartition:\n  mode: manual\n  num_of_partitions: {partitions}\n"
        f"process:\n  - image_deduplicator: {json.dumps(args)}\n"
    )
    run_job(str(recipe), workers=1, job_id=name)
    assert bool(list((tmp_path / "work" / name / GLOBAL_SHARDS_DIR).glob("*"))) == bool(shards)
    return [json.loads(line)["id"] for line in (tmp_path / f"{name}.jsonl").read_text().splitlines()]


@pytest.mark.parametrize(
    "variant,layouts",
    [("phash", ((1, 0), (3, 0), (7, 0), (7, 3))), ("phash_text", ((7, 3),))],
    ids=["phash", "phash_text"],
)
def test_job_matches_data_juicer_whatever_the_partitioning(tmp_path, dataset, monkeypatch, variant, layouts) -> None:
    """(partitions, key shards; 0: the one-process step) -> DJ's kept rows, in input order."""
    want = VARIANTS[variant]
    for partitions, shards in layouts:
        assert _job(tmp_path, dataset, monkeypatch, want["args"], partitions, shards) == want["kept"], (
            partitions,
            shards,
        )
