"""Ops on slices of a partition: exact results, halving instead of row by row, capacity errors.

The slice bound is made tiny here (``DJ_OP_SLICE_MB``) so that slicing happens on a few hundred rows;
the real bound (256 MiB) matters on partitions past Arrow's 2 GiB string limit, which
bench/ exercises on a real one (docs/benchmarks.md, "Partitions past 2 GiB").
"""

from __future__ import annotations

import math

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from airflow_provider_dj import settings
from airflow_provider_dj.engine.execution.op_runner import apply_op
from airflow_provider_dj.engine.execution.table_slices import byte_slices, concat_in_order
from airflow_provider_dj.ops.base import Mapper
from airflow_provider_dj.ops.registry import create_op
from tests.unit.engine.recipe_helpers import small_recipe


@pytest.fixture
def tiny_slices(monkeypatch):
    """Slices of at most 2 KiB of text."""
    monkeypatch.setenv("DJ_OP_SLICE_MB", str(2048 / (1 << 20)))
    settings.reset()
    yield 2048
    settings.reset()


def _texts(n: int) -> list[str]:
    return [f"row {i} mail me at user{i}@example.com   and   {'word ' * (i % 17)}end" for i in range(n)]


def test_slices_cover_every_row_in_order_within_the_bound():
    table = pa.table({"text": ["x" * (i % 50) for i in range(1000)], "id": list(range(1000))})
    slices = byte_slices(table, "text", max_bytes=300)
    assert [s[0] for s in slices] == [0] + [sum(s[1] for s in slices[:k]) for k in range(1, len(slices))]
    assert sum(length for _, length in slices) == 1000
    sizes = pc.binary_length(table.column("text")).to_pylist()
    for offset, length in slices:
        assert sum(sizes[offset : offset + length]) <= 300
        if offset + length < 1000:  # each slice is as long as the bound allows
            assert sum(sizes[offset : offset + length + 1]) > 300
    assert byte_slices(table, "text", max_bytes=1 << 30) == [(0, 1000)]
    assert byte_slices(table.slice(0, 0), "text", max_bytes=1) == []


def test_a_row_larger_than_the_bound_is_a_slice_of_its_own():
    table = pa.table({"text": ["a" * 10, "b" * 500, "c" * 10, "d" * 10]})
    assert byte_slices(table, "text", max_bytes=100) == [(0, 1), (1, 1), (2, 2)]


def test_concat_in_order_keeps_order_for_tables_and_arrays():
    t = pa.table({"a": [1, 2, 3, 4]})
    assert concat_in_order([t.slice(0, 1), t.slice(1, 3)]).column("a").to_pylist() == [1, 2, 3, 4]
    arr = pa.array([5, 6, 7])
    assert concat_in_order([arr.slice(0, 2), arr.slice(2)]).to_pylist() == [5, 6, 7]


@pytest.mark.parametrize(
    ("name", "args"),
    [
        ("clean_email_mapper", {}),
        ("whitespace_normalization_mapper", {}),
        ("words_num_filter", {"min_num": 8, "max_num": 20}),
        ("text_length_filter", {"min_len": 60}),
    ],
)
def test_an_op_on_slices_gives_the_whole_tables_result(tiny_slices, name, args):
    table = pa.table({"text": _texts(600), "__dj__input_row__": pa.array(range(600), pa.int64())})
    assert len(byte_slices(table, "text")) > 10
    sliced = apply_op(create_op(name, args), 3, table, skip_op_error=False)
    settings.reset()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DJ_OP_SLICE_MB", "1024")
        settings.reset()
        whole = apply_op(create_op(name, args), 3, table, skip_op_error=False)
    assert sliced.table.to_pylist() == whole.table.to_pylist()
    strip = {k: v for k, v in sliced.accounting.items() if k != "duration_s"}
    assert strip == {k: v for k, v in whole.accounting.items() if k != "duration_s"}
    assert sliced.failed_rows is None


class CapacityBoundMapper(Mapper):
    """Uppercases text, but raises ArrowCapacityError on more than ``limit`` rows at once (as a
    kernel does past 2 GiB), and a ValueError on any row that holds 'BAD'."""

    name = "capacity_bound_mapper_for_tests"

    def __init__(self, limit: int, **kw) -> None:
        super().__init__(**kw)
        self.limit, self.calls = limit, 0

    def process_table(self, table):
        self.calls += 1
        if table.num_rows > self.limit:
            raise pa.ArrowCapacityError("Result might not fit in a 32bit utf8 array, convert to large_utf8")
        texts = table.column("text")
        if pc.any(pc.match_substring(texts, "BAD")).as_py():
            raise ValueError("a BAD sample")
        return table.set_column(table.column_names.index("text"), "text", pc.utf8_upper(texts))


@pytest.mark.parametrize("skip", [False, True])
def test_a_capacity_error_halves_the_slice_instead_of_going_row_by_row(skip):
    n = 1000
    table = pa.table({"text": [f"t{i}" for i in range(n)], "id": list(range(n))})
    op = CapacityBoundMapper(limit=64)
    out = apply_op(op, 0, table, skip_op_error=skip)
    assert out.table.column("text").to_pylist() == [f"T{i}" for i in range(n)]
    assert out.accounting["failed"] == 0 and out.failed_rows is None
    # Halving stops at pieces of at most 64 rows: about 2 * n / 32 calls, never one per row.
    assert op.calls <= 2 * math.ceil(n / 32)


def test_a_single_row_too_big_fails_only_under_skip_op_error():
    table = pa.table({"text": ["a", "b"], "id": [0, 1]})
    with pytest.raises(pa.ArrowCapacityError):
        apply_op(CapacityBoundMapper(limit=0), 0, table, skip_op_error=False)
    out = apply_op(CapacityBoundMapper(limit=0), 0, table, skip_op_error=True)
    assert out.failed_rows.column("id").to_pylist() == [0, 1]
    assert out.failed_reasons[0].startswith("ArrowCapacityError: Result might not fit")


def test_bad_rows_are_found_by_halving_in_log_steps():
    n = 4096
    texts = [f"t{i}" for i in range(n)]
    bad = {17, 2048, 4000}
    for i in bad:
        texts[i] = f"BAD {i}"
    table = pa.table({"text": texts, "id": list(range(n))})
    op = CapacityBoundMapper(limit=n)
    out = apply_op(op, 1, table, skip_op_error=True)
    assert out.failed_rows.column("id").to_pylist() == sorted(bad)
    assert out.failed_reasons == ["ValueError: a BAD sample"] * 3
    assert out.table.column("id").to_pylist() == [i for i in range(n) if i not in bad]
    assert out.table.column("text").to_pylist() == [f"T{i}" for i in range(n) if i not in bad]
    a = out.accounting
    assert (a["rows_in"], a["rows_out"], a["failed"]) == (n, n - 3, 3)
    assert op.calls <= 1 + 2 * len(bad) * math.ceil(math.log2(n))  # row by row would be n + 1


def test_without_skip_op_error_a_row_error_is_raised_not_isolated():
    table = pa.table({"text": ["ok", "BAD"], "id": [0, 1]})
    op = CapacityBoundMapper(limit=10)
    with pytest.raises(ValueError, match="BAD"):
        apply_op(op, 0, table, skip_op_error=False)
    assert op.calls == 1


def test_a_job_on_tiny_slices_exports_the_same_bytes(tmp_path, monkeypatch):
    """The spine recipe, including the exact deduplicator's key phase, sliced and not."""
    from airflow_provider_dj.engine import run_job

    spine = (
        "  - clean_email_mapper:\n  - whitespace_normalization_mapper:\n"
        "  - words_num_filter: {min_num: 5, max_num: 2000}\n  - text_length_filter: {min_len: 20}\n"
        "  - document_deduplicator: {lowercase: true}\n"
    )
    recipe = small_recipe(tmp_path, "spine_slices", spine, rows=300, seed=5)
    exports = {}
    for job_id, mb in (("whole", "1024"), ("sliced", str(2048 / (1 << 20)))):
        monkeypatch.setenv("DJ_OP_SLICE_MB", mb)
        settings.reset()
        export = tmp_path / f"{job_id}.jsonl"
        result = run_job(recipe, job_id=job_id, workers=1, overrides={"export_path": str(export)})
        exports[job_id] = export.read_bytes()
        assert 0 < result.rows < 300
    assert exports["sliced"] == exports["whole"]


def test_an_op_that_cannot_run_on_an_empty_table_fails_no_row():
    """After every row of a partition failed, the next op sees an empty table without its text field:
    under skip_op_error nothing more fails (there is no row), as when rows were isolated one by one."""
    empty = pa.table({"id": pa.array([], pa.int64()), "body": pa.array([], pa.string())})
    out = apply_op(create_op("words_num_filter", {"min_num": 1}), 1, empty, skip_op_error=True, needs=("text",))
    assert out.table.num_rows == 0 and out.failed_rows is None and out.failed_reasons == []
    assert out.accounting["failed"] == 0
