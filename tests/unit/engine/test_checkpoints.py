"""Checkpoints are absent or complete (invariant 1): torn ones are ignored and recomputed."""

from __future__ import annotations

import json
import os

import pyarrow as pa
import pytest

from airflow_provider_dj.engine.config.recipe import load_recipe
from airflow_provider_dj.engine.execution.global_ops import resolve_global_op
from airflow_provider_dj.engine.execution.segment_runner import run_segment
from airflow_provider_dj.engine.job.export import export_job
from airflow_provider_dj.engine.job.setup import prepare_job
from airflow_provider_dj.engine.jobdir.events import read_events
from airflow_provider_dj.engine.storage.checkpoints import CheckpointStore, StorageFormat
from airflow_provider_dj.testing.sample_corpus import write_corpus
from tests.helpers_compare import assert_same_bytes

T = pa.table({"text": ["a", "bb", "ccc"], "n": [1, 2, 3]})


@pytest.mark.parametrize(
    "fmt",
    [
        StorageFormat("parquet", "snappy"),
        StorageFormat("parquet", "zstd"),
        StorageFormat("arrow", "zstd"),
        StorageFormat("arrow", "none"),
        StorageFormat("jsonl", "gzip"),
        StorageFormat("jsonl", "zstd"),
        StorageFormat("jsonl", "none"),
    ],
)
def test_round_trip_in_every_format(tmp_path, fmt):
    s = CheckpointStore(str(tmp_path), fmt)
    s.save(op_index=0, op_name="m", partition_id=3, table=T, partition_hash="h", fingerprint="f", accounting=[])
    got = s.load_valid(0, "m", 3, "h", "f")
    assert got is not None and got.table.to_pylist() == T.to_pylist()
    assert s.data_path(0, "m", 3).endswith(f"partition_00003.{fmt.extension}")


def _saved(tmp_path):
    s = CheckpointStore(str(tmp_path))
    s.save(
        op_index=1,
        op_name="m",
        partition_id=0,
        table=T,
        partition_hash="h",
        fingerprint="f",
        accounting=[{"op_index": 0}],
    )
    return s


def test_truncated_file_is_ignored(tmp_path):
    s = _saved(tmp_path)
    path = s.data_path(1, "m", 0)
    data = open(path, "rb").read()
    open(path, "wb").write(data[: len(data) // 2])
    assert s.load_valid(1, "m", 0, "h", "f") is None


def test_same_size_corruption_is_ignored(tmp_path):
    s = _saved(tmp_path)
    path = s.data_path(1, "m", 0)
    data = bytearray(open(path, "rb").read())
    data[len(data) // 2] ^= 0xFF
    open(path, "wb").write(bytes(data))
    assert s.load_valid(1, "m", 0, "h", "f") is None


def test_missing_commit_marker_means_absent(tmp_path):
    s = _saved(tmp_path)
    os.remove(s.marker_path(1, "m", 0))
    assert s.load_valid(1, "m", 0, "h", "f") is None
    assert not s.is_committed(1, "m", 0, "h", "f")


def test_checkpoint_of_other_input_or_pipeline_is_ignored(tmp_path):
    s = _saved(tmp_path)
    assert s.load_valid(1, "m", 0, "other-hash", "f") is None
    assert s.load_valid(1, "m", 0, "h", "other-pipeline") is None
    assert s.load_valid(1, "m", 0, "h", "f") is not None


def test_no_temp_files_left_after_save(tmp_path):
    s = _saved(tmp_path)
    assert sorted(os.listdir(os.path.dirname(s.data_path(1, "m", 0)))) == [
        "partition_00000.commit.json",
        "partition_00000.parquet",
    ]


RECIPE = """\
project_name: torn
dataset_path: {data}
export_path: {out}
partition: {{mode: manual, num_of_partitions: 2}}
checkpoint: {{strategy: every_op}}
process:
  - clean_email_mapper:
  - whitespace_normalization_mapper:
  - words_num_filter: {{min_num: 5}}
  - document_deduplicator:
"""


def _run_all(job_dir, n_parts):
    for pid in range(n_parts):
        run_segment(job_dir, 0, pid)
    resolve_global_op(job_dir, 3)
    for pid in range(n_parts):
        run_segment(job_dir, 1, pid)
    return export_job(job_dir)


def test_torn_checkpoint_is_recomputed_by_the_runner_and_export_unchanged(tmp_path):
    data = write_corpus(str(tmp_path / "in.jsonl"), 200, seed=3)
    (tmp_path / "r.yaml").write_text(RECIPE.format(data=data, out=tmp_path / "out.jsonl"))
    recipe = load_recipe(tmp_path / "r.yaml")
    job = prepare_job(recipe, job_id="j1")
    first = _run_all(job.job_dir, 2)
    clean_bytes = (tmp_path / "out.jsonl").read_bytes()

    store = CheckpointStore(job.job_dir)
    # tear the final checkpoint of op 2 for partition 1 and remove op 1's marker
    p2 = store.data_path(2, "words_num_filter", 1)
    open(p2, "wb").write(open(p2, "rb").read()[:100])
    os.remove(store.marker_path(1, "whitespace_normalization_mapper", 1))
    result = run_segment(job.job_dir, 0, 1)
    assert result.resumed_from_op == 0  # op 0's checkpoint is still valid; 1 and 2 recomputed
    assert result.ops_run == [1, 2]
    second = _run_all(job.job_dir, 2)
    assert_same_bytes((tmp_path / "out.jsonl").read_bytes(), clean_bytes)
    assert second["export"]["checksum_xxh3_128"] == first["export"]["checksum_xxh3_128"]
    marker = json.load(open(store.marker_path(2, "words_num_filter", 1)))
    assert marker["op_index"] == 2 and marker["partition_hash"]  # records what it follows and derives from


def test_finished_partition_does_no_work(tmp_path):
    data = write_corpus(str(tmp_path / "in.jsonl"), 50, seed=3)
    (tmp_path / "r.yaml").write_text(RECIPE.format(data=data, out=tmp_path / "out.jsonl"))
    job = prepare_job(load_recipe(tmp_path / "r.yaml"), job_id="j2")
    _run_all(job.job_dir, 2)
    n_before = len(read_events(job.job_dir, "op_start"))
    r = run_segment(job.job_dir, 1, 0)
    assert r.skipped and r.ops_run == []
    assert len(read_events(job.job_dir, "op_start")) == n_before


# -- delta checkpoints: a filter's or keep mask's output stored against the checkpoint before it --------------

BASE = pa.table({"text": ["a", "bb", "ccc", "dddd"], "meta": [1, 2, 3, 4]})


def _delta_chain(tmp_path, fmt=None):
    s = CheckpointStore(str(tmp_path), fmt or StorageFormat())
    s.save(op_index=0, op_name="m", partition_id=0, table=BASE, partition_hash="h", fingerprint="f0", accounting=[])
    stats = pa.table({"__dj__stats__": pa.array([{"len": 1}, {"len": 2}, {"len": 3}, {"len": 4}])})
    keep = pa.array([True, False, True, True])
    out1 = BASE.append_column("__dj__stats__", stats.column(0)).filter(keep)
    s.save_delta(
        op_index=1,
        op_name="f",
        partition_id=0,
        keep=keep,
        columns=stats,
        out_columns=out1.column_names,
        out_rows=out1.num_rows,
        base_op_index=0,
        base_op_name="m",
        base_fingerprint="f0",
        partition_hash="h",
        fingerprint="f1",
        accounting=[{"op_index": 1}],
    )
    keep2 = pa.array([False, True, True])
    out2 = out1.filter(keep2)
    s.save_delta(
        op_index=2,
        op_name="d",
        partition_id=0,
        keep=keep2,
        columns=pa.table({}),
        out_columns=out2.column_names,
        out_rows=out2.num_rows,
        base_op_index=1,
        base_op_name="f",
        base_fingerprint="f1",
        partition_hash="h",
        fingerprint="f2",
        accounting=[],
    )
    return s, out1, out2


@pytest.mark.parametrize("fmt", [StorageFormat("parquet", "snappy"), StorageFormat("arrow", "none")])
def test_delta_checkpoints_rebuild_the_exact_table_through_a_chain(tmp_path, fmt):
    s, out1, out2 = _delta_chain(tmp_path, fmt)
    got1 = s.load_valid(1, "f", 0, "h", "f1")
    got2 = s.load_valid(2, "d", 0, "h", "f2")
    assert got1.table.to_pylist() == out1.to_pylist() and got1.table.column_names == out1.column_names
    assert got2.table.to_pylist() == [
        {"text": "ccc", "meta": 3, "__dj__stats__": {"len": 3}},
        {"text": "dddd", "meta": 4, "__dj__stats__": {"len": 4}},
    ]
    marker = json.load(open(s.marker_path(2, "d", 0)))
    assert marker["delta"]["base_op_index"] == 1 and marker["num_rows"] == 2
    # the delta files hold no text: only keep flags (and the stats the filter set)
    stored = [fmt.decode(open(s.data_path(i, n, 0), "rb").read()).column_names for i, n in ((1, "f"), (2, "d"))]
    assert stored == [["__dj__stats__", "__dj__delta_keep__"], ["__dj__delta_keep__"]]


def test_a_delta_is_invalid_once_its_base_is_torn_or_gone(tmp_path):
    s, _, _ = _delta_chain(tmp_path)
    path = s.data_path(0, "m", 0)
    data = open(path, "rb").read()
    open(path, "wb").write(data[:-5])  # the base, two links down, is torn
    assert s.load_valid(1, "f", 0, "h", "f1") is None
    assert s.load_valid(2, "d", 0, "h", "f2") is None
    s2, _, _ = _delta_chain(tmp_path / "again")
    os.remove(s2.marker_path(1, "f", 0))  # the middle link was never committed
    assert s2.load_valid(2, "d", 0, "h", "f2") is None
    assert s2.load_valid(0, "m", 0, "h", "f0") is not None  # what is still valid still loads


def test_a_delta_whose_row_count_does_not_match_its_base_is_ignored(tmp_path):
    s, _, _ = _delta_chain(tmp_path)
    marker_path = s.marker_path(2, "d", 0)
    marker = json.load(open(marker_path))
    marker["delta"]["base_rows"] = 7
    open(marker_path, "w").write(json.dumps(marker))
    assert s.load_valid(2, "d", 0, "h", "f2") is None


def test_a_mapper_checkpoint_stores_only_the_rows_it_changed(tmp_path):
    from airflow_provider_dj.engine.execution.op_runner import mapper_delta

    n = 1000
    base = pa.table(
        {
            "text": [f"row {i} " + "x" * 200 for i in range(n)],
            "meta": list(range(n)),
            "note": ["keep"] * n,
            "__dj__input_row__": list(range(n)),
        }
    )
    text = base.column("text").to_pylist()
    text[3], text[500] = "mail removed", None  # a changed value and a value the op cleared
    notes = base.column("note").to_pylist()
    notes[7] = "edited"
    out = (
        base.set_column(0, "text", pa.array(text))
        .set_column(2, "note", pa.array(notes))
        .append_column("lang", pa.array(["en"] * n))
    )
    delta = mapper_delta(base, out)
    assert delta is not None and delta.keep.to_pylist() == [True] * n
    assert delta.columns.column("__dj__delta_set__text").to_pylist().count(True) == 2
    assert "meta" not in delta.columns.column_names  # passed through: not stored
    assert delta.columns.nbytes < base.nbytes // 10

    s = CheckpointStore(str(tmp_path))
    s.save(op_index=0, op_name="m0", partition_id=0, table=base, partition_hash="h", fingerprint="f0", accounting=[])
    s.save_delta(
        op_index=1,
        op_name="m1",
        partition_id=0,
        keep=delta.keep,
        columns=delta.columns,
        out_columns=out.column_names,
        out_rows=out.num_rows,
        base_op_index=0,
        base_op_name="m0",
        base_fingerprint="f0",
        partition_hash="h",
        fingerprint="f1",
        accounting=[],
    )
    got = s.load_valid(1, "m1", 0, "h", "f1").table
    assert got.column_names == out.column_names and got.to_pylist() == out.to_pylist()
    assert os.path.getsize(s.data_path(1, "m1", 0)) < os.path.getsize(s.data_path(0, "m0", 0)) // 10


def test_no_mapper_delta_when_rows_moved_or_most_data_changed():
    from airflow_provider_dj.engine.execution.op_runner import mapper_delta

    base = pa.table({"text": ["a" * 50, "b" * 50, "c" * 50], "__dj__input_row__": [0, 1, 2]})
    assert mapper_delta(base, base.take([2, 1, 0])) is None  # same count, other rows
    assert mapper_delta(base, base.set_column(0, "text", pa.array(["A" * 50, "B" * 50, "C" * 50]))) is None
    unchanged = mapper_delta(base, base)
    assert unchanged is not None and unchanged.columns.num_columns == 0


def test_delta_checkpoints_can_be_turned_off(tmp_path, monkeypatch):
    assert CheckpointStore(str(tmp_path)).supports_delta
    assert not CheckpointStore(str(tmp_path), StorageFormat("jsonl", "none")).supports_delta
    monkeypatch.setenv("DJ_DELTA_CHECKPOINTS", "0")
    assert not CheckpointStore(str(tmp_path)).supports_delta


def test_delta_and_whole_checkpoints_read_back_the_same_tables(tmp_path, monkeypatch):
    from airflow_provider_dj.engine.storage.context import read_checkpoint

    data = write_corpus(str(tmp_path / "in.jsonl"), 300, seed=5)
    jobs = {}
    for mode in ("1", "0"):
        monkeypatch.setenv("DJ_DELTA_CHECKPOINTS", mode)
        (tmp_path / f"r{mode}.yaml").write_text(RECIPE.format(data=data, out=tmp_path / f"out{mode}.jsonl"))
        jobs[mode] = prepare_job(load_recipe(tmp_path / f"r{mode}.yaml"), job_id=f"d{mode}").job_dir
        _run_all(jobs[mode], 2)
    assert_same_bytes((tmp_path / "out1.jsonl").read_bytes(), (tmp_path / "out0.jsonl").read_bytes())
    deltas = 0
    for op_index, name in enumerate(
        ["clean_email_mapper", "whitespace_normalization_mapper", "words_num_filter", "document_deduplicator"]
    ):
        for pid in (0, 1):
            whole, delta = read_checkpoint(jobs["0"], op_index, pid), read_checkpoint(jobs["1"], op_index, pid)
            assert whole is not None and whole.to_pylist() == delta.to_pylist()
            assert "delta" not in json.load(open(CheckpointStore(jobs["0"]).marker_path(op_index, name, pid)))
            deltas += "delta" in json.load(open(CheckpointStore(jobs["1"]).marker_path(op_index, name, pid)))
    assert deltas >= 4  # the filter's and the dedup's at least
