"""Planning by parallel tasks (engine/input/indexing.py, engine/input/task_map.py): a JSONL file indexed in
chunks, by tasks on threads or one by one, gives every row the byte offset a one-pass index gives, the same
partitioning_info (boundaries, segments, content hashes), and the same error, naming the same line and
byte, when the defect lies in a middle chunk."""

from __future__ import annotations

import os

import pytest

from airflow_provider_dj.engine.config.recipe import PartitionConfig
from airflow_provider_dj.engine.input import indexing
from airflow_provider_dj.engine.input.indexing import RowStarts, index_jsonl
from airflow_provider_dj.engine.input.partitioning import plan_partitions
from airflow_provider_dj.engine.input.sources import InputError, InputFile
from airflow_provider_dj.engine.input.task_map import run_in_process, run_on_threads
from tests.unit.engine.ragged_jsonl import write_ragged_jsonl


def _write(path, rows: int, seed: int = 0) -> None:
    write_ragged_jsonl(path, rows, seed, max_chars=120)


def _file(path) -> InputFile:
    return InputFile(path=str(path), format="jsonl", compression=None, size=os.path.getsize(path))


def _one_pass(path, monkeypatch) -> list[int]:
    """Every row's start and the stream's end from a one-chunk index keeping every row's offset."""
    with monkeypatch.context() as m:
        m.setattr(indexing, "ROW_STRIDE", 1)
        f = _file(path)
        index_jsonl(f, run_in_process, 1 << 30)
    return [int(x) for x in f.row_starts]


@pytest.mark.parametrize("run", [run_in_process, run_on_threads], ids=["in_process", "threads"])
@pytest.mark.parametrize("chunk", [50, 4096, 65_537])
def test_an_index_built_in_chunks_gives_every_rows_exact_start(tmp_path, monkeypatch, chunk, run):
    path = tmp_path / "in.jsonl"
    _write(path, 300 if chunk == 50 else 3000)
    expected = _one_pass(path, monkeypatch)
    monkeypatch.setattr(indexing, "ROW_STRIDE", 7)
    f = _file(path)
    index_jsonl(f, run, chunk)
    assert isinstance(f.row_starts, RowStarts)
    assert len(f.row_starts.first_rows) > 2, "the file was not cut into chunks: the test would prove nothing"
    assert f.num_rows == len(expected) - 1 and f.stream_len == expected[-1] == os.path.getsize(path)
    assert [f.row_starts[r] for r in range(f.num_rows + 1)] == expected


def test_a_chunk_boundary_inside_a_long_line_and_at_a_line_start(tmp_path, monkeypatch):
    """A split point inside a line longer than the chunk, and one exactly at a line start, both give whole
    lines to one task each; a file with no newline at all is one chunk."""
    path = tmp_path / "long.jsonl"
    rows = ['{"t": "%s"}' % ("x" * n) for n in (10, 5000, 3, 4085, 1, 20000, 7)]
    path.write_text("\n".join(rows) + "\n")
    expected = _one_pass(path, monkeypatch)
    for chunk in (4096, 100, 5011, 16):
        f = _file(path)
        index_jsonl(f, run_on_threads, chunk)
        assert [f.row_starts[r] for r in range(f.num_rows + 1)] == expected, chunk
    one = tmp_path / "one.jsonl"
    one.write_text('{"t": "%s"}' % ("y" * 3000))
    f = _file(one)
    index_jsonl(f, run_on_threads, 64)
    assert (f.num_rows, f.row_starts[0], f.row_starts[1]) == (1, 0, os.path.getsize(one))


@pytest.mark.parametrize(
    "bad, words",
    [(b'{"text": "caf\xe9"}\n', ["not valid UTF-8", "iconv"]), (b"[1, 2]\n", ["is not a JSON object", "[1, 2]"])],
    ids=["not_utf8", "not_an_object"],
)
def test_a_defect_in_a_middle_chunk_is_named_as_a_one_pass_index_names_it(tmp_path, bad, words):
    path = tmp_path / "bad.jsonl"
    good = b'{"text": "fine enough"}\n'
    path.write_bytes(good * 500 + bad + good * 500)
    messages = []
    for run, chunk in ((run_in_process, 1 << 30), (run_on_threads, 1000)):
        with pytest.raises(InputError) as e:
            index_jsonl(_file(path), run, chunk)
        messages.append(str(e.value))
    assert messages[0] == messages[1]
    at = 500 * len(good)
    assert "line 501 " in messages[0] and f"(byte {at + (13 if bad.startswith(b'{') else 0)})" in messages[0]
    assert all(w in messages[0] for w in words) and str(path) in messages[0]


def test_the_plan_is_the_same_whichever_tasks_build_it(tmp_path, monkeypatch):
    """Boundaries, segments, content hashes and row counts equal between one-by-one planning in one chunk and
    threaded planning in small chunks, over several files (JSONL and Parquet)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    d = tmp_path / "in"
    d.mkdir()
    for i in range(3):
        _write(d / f"a{i}.jsonl", 700 + 50 * i, seed=i)
    cfg = PartitionConfig(mode="manual", num_of_partitions=7)
    plans = []
    for run, chunk_mb in ((run_in_process, 1024), (run_on_threads, 0)):
        monkeypatch.setattr(indexing, "_chunk_bytes_setting", lambda mb=chunk_mb: (mb << 20) if mb else 3000)
        info = plan_partitions(str(d), cfg, None, run)
        info.pop("timing"), info.pop("checksum_xxh3_128")  # the seal covers the timing
        plans.append(info)
    assert plans[0] == plans[1] and plans[0]["total_rows"] == 3 * 700 + 150 + 3
    pdir = tmp_path / "pq"
    pdir.mkdir()
    for i in range(3):
        pq.write_table(
            pa.table({"text": [f"r{i}-{j}" for j in range(40 + i)]}), pdir / f"p{i}.parquet", row_group_size=9
        )
    a, b = (plan_partitions(str(pdir), cfg, None, run) for run in (run_in_process, run_on_threads))
    for info in (a, b):
        info.pop("timing"), info.pop("checksum_xxh3_128")
    assert a == b and a["total_rows"] == 123
