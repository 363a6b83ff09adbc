"""Partition boundaries (invariant 3) and reading exactly one partition's rows."""

from __future__ import annotations

import gzip
import json
from types import SimpleNamespace

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_provider_dj.engine.input.partitioning import (
    InputChangedError,
    InputTypeConflictError,
    PartitioningError,
    choose_partition_count,
    plan_partitions,
    read_partition,
    row_boundaries,
)


@given(total=st.integers(min_value=1, max_value=5000), parts=st.integers(min_value=1, max_value=300))
@settings(max_examples=300, deadline=None)
def test_boundaries_cover_all_rows_exactly_with_sizes_within_one(total, parts):
    if parts > total:
        with pytest.raises(PartitioningError, match=f"only {total} rows"):
            row_boundaries(total, parts)
        return
    b = row_boundaries(total, parts)
    assert len(b) == parts
    assert b[0][0] == 0 and b[-1][1] == total
    assert all(b[i][1] == b[i + 1][0] for i in range(len(b) - 1))  # contiguous: no gaps, no overlaps
    sizes = [e - s for s, e in b]
    assert min(sizes) >= 1  # no empty partitions
    assert max(sizes) - min(sizes) <= 1


def test_zero_partitions_is_an_error_and_empty_input_has_none():
    with pytest.raises(PartitioningError):
        row_boundaries(10, 0)
    assert row_boundaries(0, 3) == []
    assert row_boundaries(0, 0) == []


def _cfg(**kw):
    base = dict(mode="manual", num_of_partitions=None, size=None, target_size_mb=256, max_size_mb=None)
    base.update(kw)
    return SimpleNamespace(**base)


def test_partition_count_modes():
    assert choose_partition_count(_cfg(num_of_partitions=5), 100, 10_000)[0] == 5
    assert choose_partition_count(_cfg(size=30), 100, 10_000)[0] == 4
    assert choose_partition_count(_cfg(), 100, 10_000)[0] == 4  # Data-Juicer's manual default
    # auto: 1 KB rows, 1 MB target -> 1024 rows per partition
    assert choose_partition_count(_cfg(mode="auto", target_size_mb=1), 10_000, 10_000 * 1024)[0] == 10
    # auto never exceeds the text modality's 50k-rows cap
    assert choose_partition_count(_cfg(mode="auto", target_size_mb=10_000), 200_000, 200_000 * 10)[0] == 4


def _write_jsonl(path, rows, blank_lines=False, final_newline=True):
    lines = [json.dumps(r) for r in rows]
    text = ("\n\n" if blank_lines else "\n").join(lines) + ("\n" if final_newline else "")
    path.write_text(text)
    return str(path)


ROWS = [{"id": i, "text": f"row {i} " + "x" * (i % 7)} for i in range(103)]


@pytest.mark.parametrize("blank_lines,final_newline", [(False, True), (True, True), (False, False)])
def test_jsonl_partitions_read_back_exact_rows(tmp_path, blank_lines, final_newline):
    path = _write_jsonl(tmp_path / "in.jsonl", ROWS, blank_lines, final_newline)
    info = plan_partitions(path, _cfg(num_of_partitions=6))
    assert info["total_rows"] == 103 and info["num_partitions"] == 6
    got = []
    for p in info["partitions"]:
        t = read_partition(info, p["partition_id"])
        assert t.num_rows == p["num_rows"] == p["end_row"] - p["start_row"]
        got.extend(t.column("id").to_pylist())
    assert got == list(range(103))


def test_strings_that_look_like_dates_are_read_back_as_the_same_strings(tmp_path):
    """Arrow's JSON reader infers timestamps from date-like strings; a partition must hold the text as written,
    at any depth, or the export would change "2026-11-30" into "2026-11-30T00:00:00"."""
    rows = [
        {
            "text": f"row {i}",
            "day": f"2026-11-{i + 10}",
            "meta": {"seen": f"2026-11-{i + 10} 03:00:00", "n": i},
            "tags": [f"2026-01-0{i + 1}"],
        }
        for i in range(6)
    ]
    path = _write_jsonl(tmp_path / "dates.jsonl", rows)
    info = plan_partitions(path, _cfg(num_of_partitions=2))
    tables = [read_partition(info, p["partition_id"]) for p in info["partitions"]]
    assert [t.schema.field("day").type for t in tables] == [pa.string(), pa.string()]
    assert [r for t in tables for r in t.to_pylist()] == rows


def test_multi_file_directory_and_compressed_inputs(tmp_path):
    d = tmp_path / "in"
    d.mkdir()
    _write_jsonl(d / "a.jsonl", ROWS[:40])
    with gzip.open(d / "b.jsonl.gz", "wt") as fh:
        fh.write("".join(json.dumps(r) + "\n" for r in ROWS[40:70]))
    import zstandard

    (d / "c.jsonl.zst").write_bytes(
        zstandard.ZstdCompressor().compress("".join(json.dumps(r) + "\n" for r in ROWS[70:]).encode())
    )
    (d / "README.md").write_text("not data")
    info = plan_partitions(str(d), _cfg(num_of_partitions=5))
    ids = [i for p in info["partitions"] for i in read_partition(info, p["partition_id"]).column("id").to_pylist()]
    assert ids == list(range(103))
    assert any(len(p["segments"]) > 1 for p in info["partitions"])  # a partition spans two files


def test_parquet_partitions_read_only_their_row_groups(tmp_path):
    t = pa.Table.from_pylist(ROWS)
    pq.write_table(t, tmp_path / "in.parquet", row_group_size=10)
    info = plan_partitions(str(tmp_path / "in.parquet"), _cfg(num_of_partitions=4))
    assert info["algorithm"] == "xxh3_128/arrow-columns-v1"
    ids = [i for p in info["partitions"] for i in read_partition(info, p["partition_id"]).column("id").to_pylist()]
    assert ids == list(range(103))


def test_more_partitions_than_rows_is_an_error_before_work(tmp_path):
    path = _write_jsonl(tmp_path / "in.jsonl", ROWS[:3])
    with pytest.raises(PartitioningError, match="num_of_partitions=4 but the input has only 3 rows"):
        plan_partitions(path, _cfg(num_of_partitions=4))


def test_edited_input_is_detected_when_a_partition_is_read(tmp_path):
    path = _write_jsonl(tmp_path / "in.jsonl", ROWS)
    info = plan_partitions(path, _cfg(num_of_partitions=3))
    rows = list(ROWS)
    rows[50] = dict(rows[50], text="edited " + rows[50]["text"][7:])  # same length, different bytes
    _write_jsonl(tmp_path / "in.jsonl", rows)
    read_partition(info, 0)  # untouched partition still reads
    with pytest.raises(InputChangedError, match="partition 1 .rows 35-69"):
        read_partition(info, 1)


def test_a_partition_spanning_files_that_type_a_field_differently_names_the_field_and_files(tmp_path):
    # The nightly drill's first failure: a growth file with string ids after files with int ids, read into one
    # partition (align: rows), failed with pyarrow's bare "Unable to merge: Field id has incompatible types".
    d = tmp_path / "in"
    d.mkdir()
    (d / "a.jsonl").write_text("".join(json.dumps({"id": i, "text": f"row {i}"}) + "\n" for i in range(4)))
    (d / "b.jsonl").write_text("".join(json.dumps({"id": f"n-{i}", "text": f"new {i}"}) + "\n" for i in range(4)))
    info = plan_partitions(str(d), _cfg(num_of_partitions=1))
    with pytest.raises(InputTypeConflictError) as err:
        read_partition(info, 0)
    msg = str(err.value)
    assert f"'id' is int64 in {d / 'a.jsonl'}, string in {d / 'b.jsonl'}" in msg and "'text'" not in msg
    assert "partition.align: file" in msg
    # Aligned to files, no partition merges the two: each reads back its own rows and types.
    aligned = plan_partitions(str(d), _cfg(num_of_partitions=2, align="file"))
    assert [read_partition(aligned, p).column("id").to_pylist() for p in (0, 1)] == [
        [0, 1, 2, 3],
        ["n-0", "n-1", "n-2", "n-3"],
    ]
