"""``image_blur_mapper`` on its own: arguments, the deterministic choice of images, idempotent files.

Its pixels against Data-Juicer's: tests/conformance/test_conformance_image_blur.py; its files in a
job (commit, export, resume, retention): tests/unit/engine/test_image_blur_media.py.
"""

from __future__ import annotations

import os

import pyarrow as pa
import pytest

pytest.importorskip("PIL")

from airflow_provider_dj.ops.base import OpArgumentError
from airflow_provider_dj.ops.mappers.image_blur import SOURCE_FILE_COLUMN, ImageWriteError, decision_value
from airflow_provider_dj.ops.registry import create_op, get_op_class
from tests.unit.engine.media_corpus import copy_images


@pytest.fixture
def images(tmp_path):
    return [str(p) for p in copy_images(tmp_path / "src", 3)]


def _op(tmp_path, sub: str = "media", **args):
    op = create_op("image_blur_mapper", args)
    op.bind_media_dir(str(tmp_path / sub))
    return op


@pytest.mark.parametrize(
    "args,key",
    [({"blur_type": "median"}, "blur_type"), ({"radius": -1}, "radius"), ({"p": "high"}, "p")],
)
def test_bad_arguments_are_refused_at_validation_naming_the_key(args, key) -> None:
    with pytest.raises(OpArgumentError) as err:
        get_op_class("image_blur_mapper").validate_args(args)
    assert err.value.key == key


def test_a_rerun_writes_the_same_files_with_the_same_bytes(tmp_path, images) -> None:
    table = pa.table({"text": ["a", "b"], "images": [[images[0]], [images[1], images[2]]]})
    first = _op(tmp_path, p=1.0).process_table(table)
    snapshot = {n: (tmp_path / "media" / n).read_bytes() for n in os.listdir(tmp_path / "media")}
    second = _op(tmp_path, p=1.0).process_table(table)  # a retry: a fresh instance, the same folder
    assert first.equals(second)
    assert {n: (tmp_path / "media" / n).read_bytes() for n in os.listdir(tmp_path / "media")} == snapshot
    assert first.column(SOURCE_FILE_COLUMN).to_pylist() == [[images[0]], [images[1], images[2]]]


def test_which_images_are_blurred_depends_on_their_bytes_and_grows_with_p(tmp_path, images) -> None:
    table = pa.table({"images": [[p] for p in images]})
    chosen = {}
    for p in (0.0, 0.3, 0.7, 1.0):
        out = _op(tmp_path, f"m{p}", p=p).process_table(table).column("images").to_pylist()
        chosen[p] = {i for i, (row, src) in enumerate(zip(out, images)) if row != [src]}
    assert chosen[0.0] == set() and chosen[1.0] == set(range(len(images)))
    assert chosen[0.0] <= chosen[0.3] <= chosen[0.7] <= chosen[1.0]
    value = decision_value("0" * 32, "gaussian", 2)
    assert 0 <= value < 1 and value == decision_value("0" * 32, "gaussian", 2.0)
    assert value != decision_value("0" * 32, "box", 2)


def test_media_named_lists_only_the_files_the_output_names(tmp_path, images) -> None:
    op = _op(tmp_path, p=1.0)
    out = op.process_table(pa.table({"images": [[images[0]], [images[1]]]}))
    named = op.media_named(out.slice(0, 1))
    assert list(named) == [os.path.basename(out.column("images")[0][0].as_py())]
    [seal] = named.values()
    assert seal["bytes"] == os.path.getsize(out.column("images")[0][0].as_py())


def test_a_source_pillow_cannot_save_as_fails_its_row(tmp_path, images) -> None:
    odd = tmp_path / "src" / "photo.unknownext"
    odd.write_bytes(open(images[0], "rb").read())
    with pytest.raises(ImageWriteError, match="photo.unknownext"):
        _op(tmp_path, p=1.0).process_table(pa.table({"images": [[str(odd)]]}))


def test_rows_holding_image_bytes_are_refused(tmp_path, images) -> None:
    from airflow_provider_dj.ops.base import OpFatalError

    table = pa.table({"images": [[images[0]]], "image_bytes": [[b"\x89PNG"]]})
    with pytest.raises(OpFatalError, match="image_bytes"):
        _op(tmp_path, p=1.0).process_table(table)
