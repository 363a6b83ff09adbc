"""The native image filters (ops/filters/image.py): arguments, the decision, stats reuse and bad input.

Data-Juicer's own results on the same images are the conformance fixtures
(tests/conformance/test_conformance_filters_image.py); these tests pin what those cannot show: what
validation refuses, how a bad image reaches ``failed/`` (or fails the op) through ``apply_op`` and
through a whole in-process job, and that narrowing a failed batch reads no file twice.  Real
images installed packages ship (tests/conformance/filters_image/corpus.py); no Airflow, no Ray."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pyarrow as pa
import pytest

from airflow_provider_dj.engine.execution.op_runner import apply_op
from airflow_provider_dj.ops.base import STATS_COLUMN, OpArgumentError, OpFatalError
from airflow_provider_dj.ops.columns import INPUT_ROW_COLUMN
from airflow_provider_dj.ops.filters import image as fi
from airflow_provider_dj.ops.kernels.images import ImageFieldError, ImageReadError
from airflow_provider_dj.ops.registry import create_op, get_op_class
from airflow_provider_dj.ops.stats import set_stat
from tests.conformance.filters_image import corpus

pytestmark = pytest.mark.skipif(
    bool(corpus.missing_sources()), reason=f"the shipped images are not installed: {corpus.missing_sources()}"
)
OPS = ("image_shape_filter", "image_size_filter", "image_aspect_ratio_filter")


@pytest.fixture(scope="module")
def media(tmp_path_factory) -> Path:
    return corpus.build_media(tmp_path_factory.mktemp("filters"))


def table_of(media: Path, lists: list) -> pa.Table:
    return pa.Table.from_pylist(
        [
            {"id": i, "text": f"row {i}", "images": None if v is None else [str(media / n) for n in v]}
            for i, v in enumerate(lists)
        ]
    )


def decide(name: str, args: dict, table: pa.Table) -> tuple[list, list]:
    get_op_class(name).validate_args(args)
    op = create_op(name, args)
    with_stats = op.compute_stats(table)
    return with_stats.column(STATS_COLUMN).to_pylist(), op.keep_mask(with_stats).to_pylist()


# -- arguments -------------------------------------------------------------------


def test_the_ops_take_data_juicers_arguments_and_defaults():
    shape = get_op_class("image_shape_filter").own_args()
    assert [a for a in shape if a != "text_key"][:5] == [
        "min_width",
        "max_width",
        "min_height",
        "max_height",
        "any_or_all",
    ]
    assert shape["max_width"].default == sys.maxsize and shape["min_width"].default == 1
    size = get_op_class("image_size_filter").own_args()
    assert (size["min_size"].default, size["max_size"].default) == ("0", "1TB")
    ratio = get_op_class("image_aspect_ratio_filter").own_args()
    assert (ratio["min_ratio"].default, ratio["max_ratio"].default) == (0.333, 3.0)
    for name in OPS:
        args = get_op_class(name).own_args()
        assert args["any_or_all"].default == "any" and args["image_key"].default == "images"
        assert {"min_closed_interval", "max_closed_interval", "reversed_range"} <= set(args)
        assert get_op_class(name).input_fields({}, "text") == {}  # a row without images is kept, not failed


@pytest.mark.parametrize(
    "name,args,key,message",
    [
        ("image_shape_filter", {"any_or_all": "most"}, "any_or_all", "must be 'any' or 'all'"),
        ("image_size_filter", {"max_size": "10XB"}, "max_size", "unknown size unit 'xb'"),
        ("image_size_filter", {"min_size": "KB"}, "min_size", "does not contain numbers"),
        ("image_size_filter", {"min_size": 1024}, "min_size", "must be str"),
        ("image_aspect_ratio_filter", {"min_ratio": "wide"}, "min_ratio", "must be float"),
        ("image_shape_filter", {"image_bytes_key": "b"}, "image_bytes_key", "has no argument"),
    ],
)
def test_validation_refuses_bad_arguments_before_any_task(name, args, key, message):
    with pytest.raises(OpArgumentError) as ei:
        get_op_class(name).validate_args(args)
    assert ei.value.key == key and message in str(ei.value)


def test_without_pillow_validation_names_the_extra_and_the_size_filter_still_runs(monkeypatch):
    import importlib.util

    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "PIL" else real_find_spec(name, *a)
    )
    for name in ("image_shape_filter", "image_aspect_ratio_filter", "image_deduplicator"):
        with pytest.raises(OpArgumentError) as ei:
            get_op_class(name).validate_args({})
        assert f"{name} needs Pillow" in str(ei.value) and "airflow-provider-dj[image]" in str(ei.value)
    get_op_class("image_size_filter").validate_args({})  # file sizes only: no Pillow needed


@pytest.mark.parametrize(
    "text,size",
    [("0", 0), ("1024", 1024), ("1KB", 1024), ("1kib", 1024), ("2MiB", 2 << 20), ("1TB", 1 << 40), ("1.5KB", 15 << 10)],
)
def test_sizes_parse_as_data_juicer_parses_them(text, size):
    assert fi.size_to_bytes(text) == size  # "1.5KB": DJ keeps the digits only, so 15 KB


# -- the decision ------------------------------------------------------------------


def test_rows_without_images_are_kept_with_empty_stats(media):
    table = table_of(media, [None, [], ["pin_32.png"]])
    stats, keep = decide("image_shape_filter", {"min_width": 1000}, table)
    assert keep == [True, True, False]
    assert stats[:2] == [{"image_width": [], "image_height": []}] * 2
    no_field = pa.table({"text": ["a", "b"]})
    for name in OPS:
        assert decide(name, {"reversed_range": True}, no_field)[1] == [True, True]


def test_any_or_all_decides_over_a_rows_images(media):
    table = table_of(media, [["pin_32.png", "china.jpg"], ["china.jpg", "flower.jpg"], ["pin_32.png"]])
    assert decide("image_shape_filter", {"min_width": 100}, table)[1] == [True, True, False]
    assert decide("image_shape_filter", {"min_width": 100, "any_or_all": "all"}, table)[1] == [False, True, False]


def test_reversed_shape_needs_width_and_height_both_outside(media):
    """DJ negates each of the two range tests: a 640x427 image is outside [100, 500] in width only."""
    table = table_of(media, [["china.jpg"], ["pin_32.png"], ["china_rot6.jpg"]])
    args = {"min_width": 100, "max_width": 500, "min_height": 100, "max_height": 500, "reversed_range": True}
    assert decide("image_shape_filter", args, table)[1] == [False, True, False]


def test_bounds_are_closed_unless_opened(media):
    table = table_of(media, [["pin_100.png"], ["china.jpg"]])
    assert decide("image_aspect_ratio_filter", {"min_ratio": 1.0, "max_ratio": 1.0}, table)[1] == [True, False]
    opened = {"min_ratio": 1.0, "max_ratio": 2.0, "min_closed_interval": False}
    assert decide("image_aspect_ratio_filter", opened, table)[1] == [False, True]
    size = (media / "pin_100.png").stat().st_size
    assert decide("image_size_filter", {"max_size": str(size)}, table)[1] == [True, False]
    assert decide("image_size_filter", {"max_size": str(size), "max_closed_interval": False}, table)[1] == [
        False,
        False,
    ]


def test_a_ratio_is_pythons_quotient(media):
    stats, _ = decide("image_aspect_ratio_filter", {}, table_of(media, [["china.jpg", "china_rot6.jpg"]]))
    assert stats[0]["aspect_ratios"] == [640 / 427, 427 / 640]


def test_huge_size_bounds_compare_as_unbounded_integers(media):
    table = table_of(media, [["pin_32.png"]])
    assert decide("image_size_filter", {"min_size": "1YB"}, table)[1] == [False]
    assert decide("image_size_filter", {"max_size": "1YB", "max_closed_interval": False}, table)[1] == [True]


def test_existing_stats_are_reused_and_missing_ones_computed(media):
    table = table_of(media, [["gone.jpg"], ["pin_32.png"]])  # row 0's file is gone: its stats must not be read
    known = pa.array([[7], None], pa.list_(pa.int64()))
    table = set_stat(set_stat(table, "image_width", known), "image_height", pa.array([[9], None], pa.list_(pa.int64())))
    stats, keep = decide("image_shape_filter", {"min_width": 8}, table)
    assert stats == [{"image_width": [7], "image_height": [9]}, {"image_width": [32], "image_height": [32]}]
    assert keep == [False, True]


# -- bad input ------------------------------------------------------------------------


def test_a_bad_image_sets_its_row_aside_with_the_path_named(media):
    table = table_of(media, [["pin_32.png"], ["truncated.jpg"], ["china.jpg"], ["not_image.jpg"], ["gone.jpg"]])
    out = apply_op(create_op("image_shape_filter", {}), 0, table, skip_op_error=True)
    assert out.table.column("id").to_pylist() == [0, 2]
    assert out.failed_rows.column("id").to_pylist() == [1, 3, 4]
    assert out.accounting["failed"] == 3 and out.accounting["rows_out"] == 2
    for reason, (name, problem) in zip(
        out.failed_reasons,
        [("truncated.jpg", "is truncated"), ("not_image.jpg", "is not an image file"), ("gone.jpg", "does not exist")],
    ):
        assert reason.startswith(f"ImageReadError: image '{media / name}' {problem}"), reason


def test_without_skip_op_error_a_bad_image_fails_the_op_naming_the_row_and_the_path(media):
    table = table_of(media, [["pin_32.png"], ["not_image.jpg"]])
    table = table.append_column(INPUT_ROW_COLUMN, pa.array([40, 41], pa.int64()))  # as the engine reads rows
    with pytest.raises(ImageReadError) as ei:
        apply_op(create_op("image_aspect_ratio_filter", {}), 0, table, skip_op_error=False)
    assert str(ei.value).startswith(f"input row 41: image '{media / 'not_image.jpg'}' is not an image file")
    bad_field = pa.table({"text": ["a"], "images": ["x.jpg"], INPUT_ROW_COLUMN: [7]})
    with pytest.raises(ImageFieldError, match="^input row 7: field 'images' must be a list"):
        apply_op(create_op("image_shape_filter", {}), 0, bad_field, skip_op_error=False)


def test_the_size_filter_reads_only_sizes_as_data_juicer_does(media):
    table = table_of(media, [["truncated.jpg"], ["not_image.jpg"], ["gone.jpg"]])
    out = apply_op(create_op("image_size_filter", {}), 0, table, skip_op_error=True)
    assert out.table.column("id").to_pylist() == [0, 1]
    assert out.failed_reasons == [f"ImageReadError: image '{media / 'gone.jpg'}' does not exist"]


@pytest.mark.parametrize("value", ["media/a.jpg", [""], [3]])
def test_a_field_that_is_not_a_list_of_paths_fails_its_row_naming_the_field(media, value):
    if value == [""]:  # a list of strings with an empty one, beside a good row
        table = pa.Table.from_pylist(
            [{"text": "ok", "pics": [str(media / "pin_32.png")]}, {"text": "bad", "pics": value}]
        )
    else:  # a column of another type (strings, lists of numbers)
        table = pa.table({"text": ["bad"], "pics": [value]})
    out = apply_op(create_op("image_shape_filter", {"image_key": "pics"}), 0, table, skip_op_error=True)
    assert len(out.failed_reasons) == 1 and out.table.column("text").to_pylist() == ["ok"] * (value == [""])
    assert out.failed_reasons[0].startswith("ImageFieldError: field 'pics' must be a list of image file paths")


def test_narrowing_a_failed_batch_reads_each_file_once(media, monkeypatch):
    reads: list[str] = []
    real = fi.image_size

    def counting(path):
        reads.append(os.path.basename(path))
        return real(path)

    monkeypatch.setattr(fi, "image_size", counting)
    names = ["pin_32.png", "pin_100.png", "china.jpg", "flower.jpg", "not_image.jpg", "china_rot6.jpg", "gone.jpg"]
    table = table_of(media, [[n] for n in names] * 3)
    out = apply_op(create_op("image_shape_filter", {}), 0, table, skip_op_error=True)
    assert out.accounting["failed"] == 6
    assert sorted(reads) == sorted(names)


def test_image_bytes_in_the_rows_fail_the_op_rather_than_being_ignored(media):
    table = table_of(media, [["pin_32.png"]]).append_column("image_bytes", pa.array([[b"\x89PNG"]]))
    with pytest.raises(OpFatalError, match="'image_bytes', which the native op does not read"):
        apply_op(create_op("image_shape_filter", {}), 0, table, skip_op_error=True)
    as_text = table_of(media, [["pin_32.png"]]).append_column("image_bytes", pa.array([["aGVsbG8="]]))
    assert decide("image_shape_filter", {}, as_text)[1] == [True]  # DJ ignores what is not bytes, as here


# -- a whole job ------------------------------------------------------------------------


def test_a_job_exports_the_kept_rows_and_sets_the_bad_one_aside(media, tmp_path):
    from airflow_provider_dj.engine.config.recipe import load_recipe
    from airflow_provider_dj.engine.job.setup import prepare_job
    from airflow_provider_dj.engine.runner.local import run_prepared_job

    rel = os.path.relpath(media, tmp_path)
    rows = [
        {"text": "photo", "images": [f"{rel}/china.jpg"]},
        {"text": "icon", "images": [f"{rel}/pin_32.png"]},
        {"text": "broken", "images": [f"{rel}/truncated.jpg"]},
        {"text": "none", "images": []},
    ]
    (tmp_path / "d.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    recipe = tmp_path / "r.yaml"
    recipe.write_text(
        f"dataset_path: {tmp_path / 'd.jsonl'}\nexport_path: {tmp_path / 'out.jsonl'}\nwork_dir: {tmp_path / 'w'}\n"
        "skip_op_error: true\nmax_failed_ratio: 0.5\npartition: {mode: manual, num_of_partitions: 2}\n"
        "process:\n  - image_shape_filter: {min_width: 100}\n"
    )
    job = prepare_job(load_recipe(recipe), job_id="img")
    summary = run_prepared_job(job).summary
    exported = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert [r["text"] for r in exported] == ["photo", "none"]
    assert exported[0]["images"] == [str(media / "china.jpg")]  # absolute, as Data-Juicer exports it
    failed_dir = Path(job.job_dir) / "failed"
    failed = [json.loads(line) for f in sorted(failed_dir.rglob("*.jsonl")) for line in f.read_text().splitlines()]
    assert [r["text"] for r in failed] == ["broken"]
    assert f"ImageReadError: input row 2: image '{media / 'truncated.jpg'}' is truncated" in json.dumps(failed[0])
    assert summary["export"]["rows"] == 2
