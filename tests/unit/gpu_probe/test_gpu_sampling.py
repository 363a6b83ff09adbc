"""Probe sampling: head, offset, shuffle (seeded blocks), cost proportional to the sample."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_provider_dj.engine.preflight import sampling
from airflow_provider_dj.engine.preflight.sampling import EmptySampleError, read_sample


@pytest.fixture
def big_jsonl(tmp_path):
    path = tmp_path / "big.jsonl"
    with open(path, "w") as fh:
        for i in range(20000):
            fh.write(json.dumps({"id": i, "text": f"row {i} " + "x" * 40}) + "\n")
            if i % 997 == 0:
                fh.write("\n")  # blank lines are not rows
    return str(path)


def test_head_reads_first_rows_only(big_jsonl):
    s = read_sample(big_jsonl, 50)
    assert s.table.column("id").to_pylist() == list(range(50))
    assert s.origin["mode"] == "head"
    assert s.origin["bytes_read"] < 200_000  # one 64 KiB read, not the ~1.2 MB file


def test_offset_skips_leading_rows(big_jsonl):
    s = read_sample(big_jsonl, 10, offset=1500)
    assert s.table.column("id").to_pylist() == list(range(1500, 1510))
    assert s.origin["mode"] == "offset" and not s.warnings


def test_offset_past_the_end_is_a_clear_error(big_jsonl):
    with pytest.raises(EmptySampleError, match="gpu_probe_sample_offset=999999"):
        read_sample(big_jsonl, 10, offset=999999)


def test_shuffle_is_seeded_random_blocks_and_cheap(big_jsonl, monkeypatch):
    monkeypatch.setattr(sampling, "JSONL_BLOCK_BYTES", 8 << 10)
    a = read_sample(big_jsonl, 40, shuffle=True, seed=7)
    b = read_sample(big_jsonl, 40, shuffle=True, seed=7)
    c = read_sample(big_jsonl, 40, shuffle=True, seed=8)
    ids = a.table.column("id").to_pylist()
    assert ids == b.table.column("id").to_pylist()
    assert ids != c.table.column("id").to_pylist()
    assert ids != list(range(40)) and len(ids) == 40 and len(set(ids)) == 40
    assert a.origin["blocks"] and a.origin["blocks_total"] > 100
    assert a.origin["bytes_read"] < 300_000  # a few blocks, not the whole file


def test_shuffle_with_offset_warns_and_ignores_offset(big_jsonl):
    s = read_sample(big_jsonl, 10, offset=100, shuffle=True, seed=1)
    assert any("offset=100 is ignored" in w for w in s.warnings)
    assert s.origin["mode"] == "shuffle"


def test_parquet_head_offset_and_shuffle(tmp_path):
    path = str(tmp_path / "d.parquet")
    pq.write_table(
        pa.table({"id": list(range(1000)), "text": [f"t{i}" for i in range(1000)]}), path, row_group_size=100
    )
    assert read_sample(path, 5, offset=250).table.column("id").to_pylist() == [250, 251, 252, 253, 254]
    head = read_sample(path, 30)
    assert head.origin["row_groups_read"] == 1
    shuf = read_sample(path, 30, shuffle=True, seed=3)
    assert shuf.origin["row_groups_read"] == 1 and shuf.table.num_rows == 30
    assert shuf.origin["blocks"][0]["row_group"] == shuf.table.column("id")[0].as_py() // 100
