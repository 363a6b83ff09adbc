"""The image kernel (ops/kernels/images.py): images opened and measured as Data-Juicer 1.6.1's
``load_image`` gives them, and every unreadable file one ``ImageReadError`` naming it.

Real images installed packages ship (tests/conformance/filters_image/corpus.py builds the corpus:
scikit-learn's photographs, Airflow's icons, EXIF-rotated copies and the bad files); in-process."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from airflow_provider_dj.core.errors import DJError
from airflow_provider_dj.ops.kernels import images
from tests.conformance.filters_image import corpus

pytestmark = pytest.mark.skipif(
    bool(corpus.missing_sources()), reason=f"the shipped images are not installed: {corpus.missing_sources()}"
)


@pytest.fixture(scope="module")
def media(tmp_path_factory) -> Path:
    return corpus.build_media(tmp_path_factory.mktemp("kernel"))


def test_images_open_in_rgb_at_their_size(media):
    for name, size in [("china.jpg", (640, 427)), ("pin_100.png", (100, 100)), ("pin_32.png", (32, 32))]:
        img = images.open_image(str(media / name))
        assert (img.mode, img.size) == ("RGB", size)  # the PNG icons are RGBA on disk


def test_an_exif_orientation_is_applied_as_datasets_decode_applies_it(media):
    from PIL import Image

    upright = np.asarray(images.open_image(str(media / "china.jpg")))
    rot6 = images.open_image(str(media / "china_rot6.jpg"))
    assert rot6.size == (427, 640)
    assert np.array_equal(np.asarray(rot6), np.asarray(Image.fromarray(upright).transpose(Image.Transpose.ROTATE_270)))
    rot3 = images.open_image(str(media / "flower_rot3.jpg"))
    assert rot3.size == (640, 427)
    assert np.array_equal(np.asarray(rot3), np.asarray(images.open_image(str(media / "flower.jpg")))[::-1, ::-1])


def test_sizes_from_the_header_equal_the_decoded_images(media):
    names = ["china.jpg", "flower.jpg", "china_rot6.jpg", "flower_rot3.jpg", "pin_100.png", "pin_32.png"]
    paths = [str(media / n) for n in names]
    widths, heights = images.image_sizes(paths + paths[:2])
    assert list(zip(widths, heights)) == [images.open_image(p).size for p in paths + paths[:2]]
    assert images.image_size(str(media / "china_rot6.jpg")) == (427, 640)


@pytest.mark.parametrize(
    "name,problem",
    [
        ("gone.jpg", "does not exist"),
        ("not_image.jpg", "is not an image file Pillow can read"),
        ("truncated.jpg", "is truncated"),
        (".", "is a directory"),
    ],
)
def test_an_unusable_file_is_one_error_naming_it(media, name, problem):
    path = str(media / name)
    for read in (images.open_image, images.image_size):
        with pytest.raises(images.ImageReadError) as ei:
            read(path)
        assert isinstance(ei.value, DJError) and ei.value.path == path
        assert str(ei.value).startswith(f"image {path!r} {problem}")
        assert ei.value.__cause__ is None and ei.value.__suppress_context__  # no PIL traceback attached


def test_the_error_survives_pickling_as_ray_carries_it(media):
    import pickle

    err = images.ImageReadError("/d/x.jpg", "does not exist").at_row(12)
    back = pickle.loads(pickle.dumps(err))
    assert (type(back), str(back), back.path, back.row) == (type(err), str(err), "/d/x.jpg", 12)


def test_a_truncated_png_is_refused_too(media, tmp_path):
    data = (media / "pin_100.png").read_bytes()
    cut = tmp_path / "cut.png"
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(images.ImageReadError, match="is truncated"):
        images.image_size(str(cut))


def test_truncation_is_refused_whatever_pillows_global_flag_says(media, monkeypatch):
    from PIL import ImageFile

    monkeypatch.setattr(ImageFile, "LOAD_TRUNCATED_IMAGES", True)  # what importing data_juicer does
    with pytest.raises(images.ImageReadError, match="is truncated"):
        images.open_image(str(media / "truncated.jpg"))
    assert ImageFile.LOAD_TRUNCATED_IMAGES is True  # restored


def test_decodes_in_parallel_threads_all_refuse_truncation_and_restore_the_flag(media, monkeypatch):
    from concurrent.futures import ThreadPoolExecutor

    from PIL import ImageFile

    monkeypatch.setattr(ImageFile, "LOAD_TRUNCATED_IMAGES", True)

    def outcome(name):
        try:
            return images.image_size(str(media / name))
        except images.ImageReadError as exc:
            return exc.problem.split(" (")[0]

    names = ["truncated.jpg", "china.jpg", "pin_100.png"] * 8
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(outcome, names))
    assert got == ["is truncated", (640, 427), (100, 100)] * 8
    assert ImageFile.LOAD_TRUNCATED_IMAGES is True


def test_file_size_is_the_files_bytes_and_names_a_missing_one(media):
    assert images.file_size(str(media / "pin_32.png")) == (media / "pin_32.png").stat().st_size
    assert images.file_size(str(media / "not_image.jpg")) > 0  # a size needs no image
    with pytest.raises(images.ImageReadError, match="gone.jpg' does not exist"):
        images.file_size(str(media / "gone.jpg"))


@pytest.mark.parametrize("value,paths", [(None, []), ([], []), ("", []), (["a.jpg", "b/c.png"], ["a.jpg", "b/c.png"])])
def test_row_image_paths_accepts_lists_of_paths_and_nothing(value, paths):
    assert images.row_image_paths(value, "images") == paths


@pytest.mark.parametrize("value", ["a.jpg", ["a.jpg", ""], [None], [1], {"path": "a.jpg"}, 3])
def test_row_image_paths_refuses_anything_else_naming_the_field(value):
    with pytest.raises(images.ImageFieldError) as ei:
        images.row_image_paths(value, "pics")
    assert str(ei.value).startswith("field 'pics' must be a list of image file paths")
    assert repr(value)[:20] in str(ei.value)


def test_without_pillow_the_error_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "PIL", None)
    with pytest.raises(images.ImageSupportMissingError, match=r"airflow-provider-dj\[image\]"):
        images.open_image("x.jpg")


def test_registering_the_ops_imports_no_pillow():
    code = (
        "import sys\n"
        "from airflow_provider_dj.ops.registry import get_op_class\n"
        "get_op_class('image_shape_filter').validate_args({'min_width': 10})\n"
        "assert 'PIL' not in sys.modules, sorted(m for m in sys.modules if m.startswith('PIL'))\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
