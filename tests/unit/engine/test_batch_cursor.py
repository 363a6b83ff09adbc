"""Batch cursors of expensive ops (engine/execution/batch_cursor.py): commit, resume, key checks, stop, cleanup.

The ops here are small real Mappers/Filters defined in this file (no model):
what is under test is the engine's batch loop, which is the same for any op.
Nothing is mocked; files are written to a real temporary job directory.
"""

from __future__ import annotations

import json
import logging
import os
from typing import ClassVar

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from airflow_provider_dj.engine.execution import batch_cursor as bc
from airflow_provider_dj.engine.execution.op_runner import apply_op
from airflow_provider_dj.engine.jobdir.events import EventLog, read_events
from airflow_provider_dj.engine.jobdir.faults import FAULT_FILE, InjectedFault, load_faults
from airflow_provider_dj.engine.jobdir.stop_control import StopRequested, request_stop
from airflow_provider_dj.ops.base import STATS_COLUMN, Filter, Mapper

KEY = bc.KEY_COLUMN


class UpperMapper(Mapper):
    """Upper-cases the text; records which input rows each call saw; fails on texts containing 'BOOM'."""

    name = "test_upper_expensive"
    expensive: ClassVar[bool] = True
    default_batch_size: ClassVar[int] = 3

    def __init__(self, **kw) -> None:
        super().__init__(**kw)
        self.seen: list[list[int]] = []

    def process_table(self, table: pa.Table) -> pa.Table:
        self.seen.append(table.column(KEY).to_pylist())
        texts = table.column(self.text_key).to_pylist()
        if any("boom" in t for t in texts):
            raise ValueError("boom in text")
        return table.set_column(
            table.column_names.index(self.text_key),
            self.text_key,
            pa.array([t.upper() for t in texts], type=pa.string()),
        )


class EvenLengthFilter(Filter):
    name = "test_even_length_expensive"
    expensive: ClassVar[bool] = True
    default_batch_size: ClassVar[int] = 4

    def compute_stats(self, table: pa.Table) -> pa.Table:
        lengths = pc.utf8_length(table.column(self.text_key))
        return table.append_column(STATS_COLUMN, pa.StructArray.from_arrays([lengths.combine_chunks()], ["len"]))

    def keep_mask(self, table: pa.Table) -> pa.Array:
        lengths = pc.struct_field(table.column(STATS_COLUMN).combine_chunks(), [0])
        return pc.equal(pc.bit_wise_and(lengths, 1), 0)


class KeyDroppingMapper(UpperMapper):
    name = "test_key_dropping"

    def process_table(self, table):
        return super().process_table(table).drop_columns([KEY])


class KeyShiftingMapper(UpperMapper):
    name = "test_key_shifting"

    def process_table(self, table):
        out = super().process_table(table)
        return out.set_column(out.column_names.index(KEY), KEY, pc.add(out.column(KEY), 1000))


def _table(n: int = 10, start: int = 0) -> pa.Table:
    texts = [f"row {i} " + "x" * (i % 3) for i in range(start, start + n)]
    return pa.table({"text": texts, KEY: pa.array(range(start, start + n), type=pa.int64())})


def _run(job_dir, op, table, *, skip=False, fault=None, events=True, **kw):
    return bc.run_expensive_op(
        op,
        2,
        table,
        job_dir=str(job_dir),
        partition_id=0,
        partition_hash="ph",
        fingerprint="fp",
        skip_op_error=skip,
        events=EventLog(str(job_dir), "job") if events else None,
        fault_spec=fault if fault is not None else load_faults(str(job_dir)),
        **kw,
    )


def _cursor(job_dir, name=UpperMapper.name) -> dict:
    with open(os.path.join(bc.batch_dir(str(job_dir), 2, name, 0), bc.CURSOR_FILE)) as fh:
        return json.load(fh)


def _same(a: pa.Table, b: pa.Table) -> None:
    assert a.to_pylist() == b.to_pylist()
    assert a.schema.names == b.schema.names


def test_mapper_in_batches_equals_plain_apply_and_commits_each_batch(tmp_path):
    table = _table(10)
    outcome = _run(tmp_path, UpperMapper(), table)
    plain = apply_op(UpperMapper(), 2, table, False)
    _same(outcome.table, plain.table)
    assert {k: v for k, v in outcome.accounting.items() if k != "duration_s"} == {
        k: v for k, v in plain.accounting.items() if k != "duration_s"
    }
    cur = _cursor(tmp_path)
    assert [(b["start"], b["end"]) for b in cur["batches"]] == [(0, 3), (3, 6), (6, 9), (9, 10)]
    assert cur["next_row"] == 10 and cur["num_batches"] == 4 and cur["batch_size"] == 3
    files = sorted(os.listdir(bc.batch_dir(str(tmp_path), 2, UpperMapper.name, 0)))
    assert files == [
        "batch_000000.arrow",
        "batch_000001.arrow",
        "batch_000002.arrow",
        "batch_000003.arrow",
        "cursor.json",
    ]
    commits = read_events(str(tmp_path), "batch_commit")
    assert [e["batch"] for e in commits] == [0, 1, 2, 3]
    assert [e["rows_done"] for e in commits] == [3, 6, 9, 10]
    assert all(e["rows_total"] == 10 for e in commits)


def test_crash_after_batch_resumes_from_cursor_and_recomputes_only_the_rest(tmp_path):
    table = _table(10)
    with open(tmp_path / FAULT_FILE, "w") as fh:
        json.dump([{"point": "batch_commit", "op_index": 2, "batch": 1, "kind": "raise"}], fh)
    first = UpperMapper()
    with pytest.raises(InjectedFault):
        _run(tmp_path, first, table)
    assert first.seen == [[0, 1, 2], [3, 4, 5]]
    assert _cursor(tmp_path)["next_row"] == 6
    second = UpperMapper()
    outcome = _run(tmp_path, second, table)
    assert second.seen == [[6, 7, 8], [9]]  # batches 0 and 1 came from disk
    _same(outcome.table, apply_op(UpperMapper(), 2, table, False).table)
    resumes = read_events(str(tmp_path), "batch_resume")
    assert len(resumes) == 1 and resumes[0]["committed_batches"] == 2 and resumes[0]["next_row"] == 6


def test_cursor_for_a_different_input_is_discarded_with_a_reason(tmp_path, caplog):
    _run(tmp_path, UpperMapper(), _table(10))
    other = _table(10).set_column(0, "text", pa.array([f"changed {i}" for i in range(10)]))
    op = UpperMapper()
    with caplog.at_level(logging.WARNING, logger=bc.__name__):
        outcome = _run(tmp_path, op, other)
    assert len(op.seen) == 4  # everything recomputed, nothing mixed in
    assert outcome.table.column("text").to_pylist() == [f"CHANGED {i}" for i in range(10)]
    assert "input_hash" in caplog.text and "different input" in caplog.text


def test_cursor_is_bound_to_the_batch_size(tmp_path, caplog):
    _run(tmp_path, UpperMapper(), _table(10))
    op = UpperMapper(batch_size=5)
    with caplog.at_level(logging.WARNING, logger=bc.__name__):
        outcome = _run(tmp_path, op, _table(10))
    assert op.seen == [[0, 1, 2, 3, 4], [5, 6, 7, 8, 9]]
    assert "batch_size" in caplog.text
    _same(outcome.table, apply_op(UpperMapper(), 2, _table(10), False).table)


def test_torn_batch_file_is_recomputed_from_that_batch_on(tmp_path, caplog):
    table = _table(10)
    _run(tmp_path, UpperMapper(), table)
    path = os.path.join(bc.batch_dir(str(tmp_path), 2, UpperMapper.name, 0), "batch_000002.arrow")
    with open(path, "r+b") as fh:
        fh.truncate(os.path.getsize(path) // 2)
    op = UpperMapper()
    with caplog.at_level(logging.WARNING, logger=bc.__name__):
        outcome = _run(tmp_path, op, table)
    assert op.seen == [[6, 7, 8], [9]]
    assert "batch 2" in caplog.text and "torn" in caplog.text
    _same(outcome.table, apply_op(UpperMapper(), 2, table, False).table)


def test_filter_batches_keep_stats_and_match_plain_apply(tmp_path):
    table = _table(11)
    outcome = _run(tmp_path, EvenLengthFilter(), table)
    plain = apply_op(EvenLengthFilter(), 2, table, False)
    _same(outcome.table, plain.table)
    assert 0 < outcome.table.num_rows < 11
    assert STATS_COLUMN in outcome.table.column_names
    assert outcome.accounting["filtered"] == plain.accounting["filtered"] == 11 - plain.table.num_rows
    cur = _cursor(tmp_path, EvenLengthFilter.name)
    assert sum(b["filtered"] for b in cur["batches"]) == plain.accounting["filtered"]


def test_skip_op_error_rows_are_isolated_per_batch_and_survive_a_resume(tmp_path):
    table = _table(10).set_column(0, "text", pa.array([f"t{i}" if i not in (4, 8) else "boom" for i in range(10)]))
    with open(tmp_path / FAULT_FILE, "w") as fh:
        json.dump([{"point": "batch_commit", "batch": 1, "kind": "raise"}], fh)
    with pytest.raises(InjectedFault):
        _run(tmp_path, UpperMapper(), table, skip=True)
    outcome = _run(tmp_path, UpperMapper(), table, skip=True)
    plain = apply_op(UpperMapper(), 2, table, True)
    _same(outcome.table, plain.table)
    assert outcome.failed_rows.column(KEY).to_pylist() == [4, 8]  # row 4 from disk, row 8 computed now
    assert outcome.failed_reasons == plain.failed_reasons == ["ValueError: boom in text"] * 2
    assert outcome.accounting["failed"] == 2 and outcome.accounting["rows_out"] == 8


@pytest.mark.parametrize(
    "op_cls, message",
    [
        (KeyDroppingMapper, "has no '__dj__input_row__' column"),
        (KeyShiftingMapper, "is not one of the batch's input rows"),
    ],
)
def test_output_row_without_a_valid_key_is_an_error_never_an_insert(tmp_path, op_cls, message):
    with pytest.raises(bc.BatchKeyError, match=message):
        _run(tmp_path, op_cls(), _table(6))
    assert not os.path.exists(os.path.join(bc.batch_dir(str(tmp_path), 2, op_cls.name, 0), bc.CURSOR_FILE))


def test_null_key_is_an_error(tmp_path):
    class NullKey(UpperMapper):
        name = "test_null_key"

        def process_table(self, table):
            out = super().process_table(table)
            return out.set_column(out.column_names.index(KEY), KEY, pa.nulls(out.num_rows, pa.int64()))

    with pytest.raises(bc.BatchKeyError, match="null"):
        _run(tmp_path, NullKey(), _table(4))


def test_stop_request_takes_effect_after_the_committed_batch(tmp_path):
    class StopAfterFirst(UpperMapper):
        def process_table(self, table):
            out = super().process_table(table)
            request_stop(self.job_dir_for_test, requested_by="test")  # arrives while batch 0 is in flight
            return out

    op = StopAfterFirst()
    op.job_dir_for_test = str(tmp_path)
    with pytest.raises(StopRequested):
        _run(tmp_path, op, _table(10))
    assert len(op.seen) == 1
    cur = _cursor(tmp_path)
    assert len(cur["batches"]) == 1 and cur["next_row"] == 3  # the batch in flight was committed, not lost


def test_discard_superseded_removes_only_this_partitions_batches_up_to_the_op(tmp_path):
    job = str(tmp_path)
    for op_index, name, pid in [(1, "a", 0), (2, "b", 0), (3, "c", 0), (2, "b", 1)]:
        os.makedirs(bc.batch_dir(job, op_index, name, pid))
    removed = bc.discard_superseded(job, 0, 2)
    assert sorted(os.path.basename(os.path.dirname(p)) for p in removed) == ["op_001_a", "op_002_b"]
    assert os.path.isdir(bc.batch_dir(job, 3, "c", 0)) and os.path.isdir(bc.batch_dir(job, 2, "b", 1))
    assert not os.path.exists(bc.batch_dir(job, 2, "b", 0))


def test_bad_batch_size_is_rejected_before_any_work(tmp_path):
    op = UpperMapper(batch_size=0)
    with pytest.raises(bc.BatchSizeError, match="positive integer"):
        _run(tmp_path, op, _table(4))
    assert op.seen == []
