"""``image_blur_mapper`` against fixtures produced by the reference Data-Juicer 1.6.1.

Fixtures live in ``image_blur/`` and come from its ``regenerate.sh`` (DJ's op run in its own venv,
one sample at a time, over the corpus ``filters_image/corpus.py`` builds from images installed
packages ship); this module builds the same corpus and uses only our package.  The rows are read as
a job reads them (``read_partition``: relative paths made absolute), then ``apply_op`` runs the op
with ``skip_op_error``, on the whole table and in chunks of 5, its files written into a folder as the
engine binds one.  Per row: every output image is either the input path (not blurred) or a file whose
decoded pixels equal those of the file DJ wrote (sha256 of the RGB pixels, and the size and
extension); ``__dj__source_file__`` is DJ's; a row DJ fails on fails here.

``p`` is 1 or 0 in every variant: DJ draws a random number per image, this op a hash (see the op's
docstring), and at those two values both blur every image or none.  The one difference, on purpose:
a truncated image fails its row here, where DJ, whose import makes Pillow fill a truncated image in,
blurs what it decoded.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from airflow_provider_dj.engine.execution.op_runner import apply_op
from airflow_provider_dj.ops.mappers.image_blur import SOURCE_FILE_COLUMN
from airflow_provider_dj.ops.registry import create_op, get_op_class
from tests.conformance.filters_image import corpus
from tests.conformance.image_tables import job_tables, read_jsonl

FIX = Path(__file__).parent / "image_blur"
VARIANTS = json.loads((FIX / "variants.json").read_text(encoding="utf-8"))
SETS = {"rows": "", "bad": "bad_"}
CASES = [(s, v, args) for s in SETS for v, args in VARIANTS.items()]

pytestmark = pytest.mark.skipif(
    bool(corpus.missing_sources()), reason=f"the shipped images are not installed: {corpus.missing_sources()}"
)


@pytest.fixture(scope="module")
def tables(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, pa.Table]]:
    """Each set's rows as a job reads them (tests/conformance/image_tables.py)."""
    return job_tables(tmp_path_factory.mktemp("blur_corpus"))


def _pixels(path: str) -> dict:
    from PIL import Image

    with Image.open(path) as img:
        rgb = np.asarray(img.convert("RGB"))
    return {
        "pixels": hashlib.sha256(rgb.tobytes()).hexdigest(),
        "size": [rgb.shape[1], rgb.shape[0]],
        "ext": Path(path).suffix,
    }


def _normal(value: object, folder: Path) -> object:
    """DJ's paths with the corpus folder put back and normalised (``bad/../media``: see filters_image)."""
    if value is None:
        return None
    text = json.dumps(value).replace(corpus.PLACEHOLDER, str(folder))
    return [os.path.normpath(p) for p in json.loads(text)]


@pytest.mark.parametrize("chunk", [None, 5], ids=["one_chunk", "chunks_of_5"])
@pytest.mark.parametrize("set_name,variant,args", CASES, ids=[f"{SETS[s]}{v}" for s, v, _ in CASES])
def test_blur_matches_data_juicer(tmp_path, tables, set_name, variant, args, chunk) -> None:
    folder, table = tables[set_name]
    if chunk:
        table = pa.Table.from_batches(table.to_batches(max_chunksize=chunk), table.schema)
    get_op_class("image_blur_mapper").validate_args(args)
    op = create_op("image_blur_mapper", args)
    op.bind_media_dir(str(tmp_path / "media"))
    outcome = apply_op(op, 0, table, skip_op_error=True)
    failed = {}
    if outcome.failed_rows is not None:
        failed = dict(zip(outcome.failed_rows.column("id").to_pylist(), outcome.failed_reasons))
    out = {r["id"]: r for r in outcome.table.to_pylist()}
    inputs = {r["id"]: r for r in table.to_pylist()}
    expected = read_jsonl(FIX / "expected" / f"image_blur_mapper__{SETS[set_name]}{variant}.jsonl")
    assert [e["id"] for e in expected] == sorted(inputs)
    written = set()
    for exp in expected:
        i = exp["id"]
        names = [os.path.basename(p) for p in inputs[i].get("images") or []]
        if "truncated.jpg" in names and exp["error"] is None:  # DJ decoded it; we refuse it, naming it
            assert i in failed and "is truncated" in failed[i] and "truncated.jpg" in failed[i], failed.get(i)
            continue
        if exp["error"] is not None:
            assert i in failed and i not in out and "ImageReadError" in failed[i], (exp, failed.get(i))
            continue
        assert i not in failed, failed[i]
        row = out[i]
        assert row[SOURCE_FILE_COLUMN] == _normal(exp["source_file"], folder), (exp, row)
        if exp["images"] is None or exp["images"] == []:
            assert row["images"] == inputs[i].get("images"), row
            continue
        got = []
        for new, old in zip(row["images"], inputs[i]["images"], strict=True):
            if new == old:
                got.append({"same": True})
            else:
                assert os.path.dirname(new) == str(tmp_path / "media")
                got.append(_pixels(new))
                written.add(os.path.basename(new))
        assert got == exp["images"], (i, got, exp["images"])
    # Only the files the kept rows name were written, each once (a repeated image shares one file),
    # besides those of rows that failed after one of their images was blurred.
    named = op.media_named(outcome.table)
    assert set(named) == written
    for name, seal in named.items():
        assert (tmp_path / "media" / name).stat().st_size == seal["bytes"]


def test_fixtures_cover_blurred_and_untouched_images_and_the_bad_inputs() -> None:
    p1 = read_jsonl(FIX / "expected" / "image_blur_mapper__gaussian_p1.jsonl")
    p0 = read_jsonl(FIX / "expected" / "image_blur_mapper__gaussian_p0.jsonl")
    assert sum("pixels" in im for r in p1 for im in r["images"] or ()) >= 10
    assert all(im == {"same": True} for r in p0 for im in r["images"] or ())
    errors = {r["error"] for r in read_jsonl(FIX / "expected" / "image_blur_mapper__bad_gaussian_p1.jsonl")}
    assert {"FileNotFoundError", "UnidentifiedImageError", None} <= errors
