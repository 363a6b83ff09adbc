"""Planning keeps every 1,024th row's byte offset of an uncompressed JSONL file (engine/input/indexing.py);
the others are found by reading forward.  Every row's offset must be exactly the one a full index gives,
blank and whitespace-only lines (not rows) and a last line without a newline included."""

from __future__ import annotations

import os

import pytest

from airflow_provider_dj.engine.input import indexing
from airflow_provider_dj.engine.input.indexing import RowStarts, index_jsonl
from airflow_provider_dj.engine.input.sources import InputFile
from tests.unit.engine.ragged_jsonl import write_ragged_jsonl


def _write(path, rows: int, seed: int = 0) -> None:
    write_ragged_jsonl(path, rows, seed, max_chars=300)


def _index(path, stride: int, monkeypatch) -> InputFile:
    monkeypatch.setattr(indexing, "ROW_STRIDE", stride)
    f = InputFile(path=str(path), format="jsonl", compression=None, size=os.path.getsize(path))
    index_jsonl(f)
    return f


@pytest.mark.parametrize("stride", [7, 1024])
def test_sampled_offsets_give_every_rows_exact_start(tmp_path, monkeypatch, stride):
    path = tmp_path / "in.jsonl"
    _write(path, 2000)
    full = _index(path, 1, monkeypatch)
    sampled = _index(path, stride, monkeypatch)
    assert isinstance(sampled.row_starts, RowStarts) and len(sampled.row_starts.sampled) == -(-2001 // stride)
    assert (sampled.num_rows, sampled.stream_len) == (full.num_rows, full.stream_len) == (2001, full.stream_len)
    assert [sampled.row_starts[r] for r in range(full.num_rows + 1)] == [int(x) for x in full.row_starts]
    with pytest.raises(IndexError):
        sampled.row_starts[full.num_rows + 1]
