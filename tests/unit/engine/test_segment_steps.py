"""The steps of ``run_segment``, one at a time: resume point, start state, global mask, ops, key phase.

Real engine, real files, no Airflow and no Ray: a job is prepared and partly run in-process, then a
single step is called on its job directory and its result is checked row by row.
"""

from __future__ import annotations

import json
import os

import pyarrow.compute as pc
import pytest

from airflow_provider_dj.engine.config.recipe import load_recipe
from airflow_provider_dj.engine.execution.global_ops import resolve_global_op
from airflow_provider_dj.engine.execution.segment_context import PartitionState, SegmentContext
from airflow_provider_dj.engine.execution.segment_runner import checkpoint_after_op, key_phase, run_ops, run_segment
from airflow_provider_dj.engine.execution.segment_start import (
    MissingUpstreamStateError,
    apply_global_mask,
    completed_output_rows,
    load_keep_mask,
    load_mask_base,
    resume_from_checkpoint,
    start_without_checkpoint,
)
from airflow_provider_dj.engine.job.setup import prepare_job
from airflow_provider_dj.engine.jobdir.events import read_events
from airflow_provider_dj.engine.jobdir.progress_log import PartitionProgressLog
from airflow_provider_dj.engine.storage.checkpoints import CheckpointStore
from airflow_provider_dj.engine.storage.global_op_state import KEYS_COLUMN, keys_store, mask_store
from airflow_provider_dj.engine.storage.resume_point import (
    INPUT_ROW_COLUMN,
    checkpoint_candidates,
    last_committed_checkpoint,
    load_latest_checkpoint,
    read_input_rows,
)
from airflow_provider_dj.testing.sample_corpus import write_corpus

# ops 0-2 form segment 0 (keys of op 3 at its end), segment 1 applies op 3's mask and runs op 4.
PROCESS = """process:
  - clean_email_mapper:
  - whitespace_normalization_mapper:
  - words_num_filter: {min_num: 5, max_num: 2000}
  - document_deduplicator: {lowercase: true}
  - text_length_filter: {min_len: 300}
"""
ROWS, PARTS = 120, 2


def _job(tmp_path, name: str, strategy: str) -> str:
    data = write_corpus(str(tmp_path / "in.jsonl"), ROWS, seed=7)
    recipe = tmp_path / f"{name}.yaml"
    recipe.write_text(
        f"dataset_path: {data}\nexport_path: {tmp_path / name}.jsonl\nwork_dir: {tmp_path / 'work'}\n"
        f"partition: {{mode: manual, num_of_partitions: {PARTS}}}\ncheckpoint: {{strategy: {strategy}}}\n{PROCESS}"
    )
    return prepare_job(load_recipe(recipe), job_id=name).job_dir


@pytest.fixture
def every_op(tmp_path):
    return _job(tmp_path, "every", "every_op")


def _plog(sc: SegmentContext) -> PartitionProgressLog:
    return PartitionProgressLog(sc.job_dir, sc.partition_id, segment=sc.segment_index)


def _input_lines(tmp_path) -> list[dict]:
    with open(tmp_path / "in.jsonl", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh]


def _remove_marker(job_dir: str, op_index: int, op_name: str, pid: int) -> None:
    os.remove(CheckpointStore(job_dir).marker_path(op_index, op_name, pid))


# -- resume point --------------------------------------------------------------------
def test_candidates_are_the_points_in_range_latest_first_never_below_op_0():
    assert checkpoint_candidates([0, 2, 4, 5], highest=4, lowest=1) == [4, 2]
    assert checkpoint_candidates([0, 2, 4, 5], highest=5) == [5, 4, 2, 0]
    assert checkpoint_candidates({0, 2}, highest=2, lowest=-1) == [2, 0]  # a segment starting at op 0
    assert checkpoint_candidates([3], highest=2) == []


def test_input_rows_carry_their_input_row_numbers(tmp_path, every_op):
    sc = SegmentContext(every_op, 0, 1)
    table = read_input_rows(sc.ctx, 1)
    start, end = sc.part["start_row"], sc.part["end_row"]
    assert table.column(INPUT_ROW_COLUMN).to_pylist() == list(range(start, end))
    assert table.column("text").to_pylist() == [r["text"] for r in _input_lines(tmp_path)[start:end]]


def test_latest_valid_checkpoint_wins_and_a_broken_later_one_is_skipped(every_op):
    run_segment(every_op, 0, 0)
    sc = SegmentContext(every_op, 0, 0)
    k, loaded = load_latest_checkpoint(sc.store, sc.plan, 0, sc.phash, highest=2)
    assert k == 2 and loaded.table.num_rows == completed_output_rows(sc)
    assert last_committed_checkpoint(sc.store, sc.plan, 0, sc.phash) == 2
    _remove_marker(every_op, 2, "words_num_filter", 0)
    k, loaded = load_latest_checkpoint(sc.store, sc.plan, 0, sc.phash, highest=2)
    assert k == 1 and loaded.table.num_rows == sc.part["num_rows"]  # mappers keep every row
    assert load_latest_checkpoint(sc.store, sc.plan, 0, sc.phash, highest=2, lowest=2) is None
    assert last_committed_checkpoint(sc.store, sc.plan, 0, sc.phash) == 1
    assert last_committed_checkpoint(sc.store, sc.plan, 1, SegmentContext(every_op, 0, 1).phash) == -1


def test_done_check_gives_the_committed_output_rows_only_when_the_keys_are_committed_too(every_op):
    sc = SegmentContext(every_op, 0, 0)
    assert completed_output_rows(sc) is None
    result = run_segment(every_op, 0, 0)
    assert completed_output_rows(SegmentContext(every_op, 0, 0)) == result.rows_out
    os.remove(keys_store(every_op).marker_path(3, "document_deduplicator", 0))
    assert completed_output_rows(SegmentContext(every_op, 0, 0)) is None


def test_resume_step_starts_after_the_checkpoint_with_its_rows_and_accounting(every_op):
    run_segment(every_op, 0, 0)
    _remove_marker(every_op, 2, "words_num_filter", 0)
    sc = SegmentContext(every_op, 0, 0)
    state = resume_from_checkpoint(sc, _plog(sc))
    assert (state.op_index, state.committed) == (1, 1)
    assert [a["op_index"] for a in state.accounting] == [0, 1]
    assert state.table.column(INPUT_ROW_COLUMN).to_pylist() == list(range(0, sc.part["num_rows"]))
    resumes = read_events(every_op, "partition_resume")
    assert [(e["partition_id"], e["resumed_after_op"]) for e in resumes] == [(0, 1)]


def test_without_a_checkpoint_segment_0_starts_from_the_input_rows(every_op):
    sc = SegmentContext(every_op, 0, 1)
    assert resume_from_checkpoint(sc, _plog(sc)) is None
    state = start_without_checkpoint(sc, _plog(sc))
    assert (state.op_index, state.committed, state.accounting) == (-1, None, [])
    assert state.table.column(INPUT_ROW_COLUMN).to_pylist() == list(range(sc.part["start_row"], sc.part["end_row"]))


# -- global mask ----------------------------------------------------------------------
def _through_global_phase(job_dir: str) -> None:
    for pid in range(PARTS):
        run_segment(job_dir, 0, pid)
    resolve_global_op(job_dir, 3)


def test_global_mask_keeps_exactly_the_rows_its_mask_keeps(every_op):
    _through_global_phase(every_op)
    sc = SegmentContext(every_op, 1, 1)
    base = load_mask_base(sc, 3)
    assert (base.op_index, base.committed) == (2, 2)
    keep = load_keep_mask(sc, 3)
    assert len(keep) == base.table.num_rows
    state = apply_global_mask(sc, _plog(sc), base, 3, keep)
    kept = pc.filter(base.table.column(INPUT_ROW_COLUMN), keep).to_pylist()
    assert state.table.column(INPUT_ROW_COLUMN).to_pylist() == kept
    assert (state.op_index, state.committed) == (3, 3)  # every_op: the masked rows are checkpointed at once
    assert state.accounting[-1]["duplicates"] == base.table.num_rows - len(kept)
    assert [a["op_index"] for a in state.accounting] == [0, 1, 2, 3]
    assert sc.result.ops_run == [3]
    saved = CheckpointStore(every_op).load_valid(3, "document_deduplicator", 1, sc.phash, sc.fp(3))
    assert saved.table.column(INPUT_ROW_COLUMN).to_pylist() == kept


def test_a_missing_keep_mask_names_the_global_task_to_clear(every_op):
    _through_global_phase(every_op)
    os.remove(mask_store(every_op).marker_path(3, "document_deduplicator", 0))
    sc = SegmentContext(every_op, 1, 0)
    with pytest.raises(MissingUpstreamStateError, match="global_op3_document_deduplicator"):
        load_keep_mask(sc, 3)
    assert len(load_keep_mask(SegmentContext(every_op, 1, 1), 3)) > 0  # the other partition's mask is untouched


def test_a_missing_previous_segment_output_is_reported_not_recomputed(every_op):
    _through_global_phase(every_op)
    _remove_marker(every_op, 2, "words_num_filter", 0)
    with pytest.raises(MissingUpstreamStateError, match=r"output of op 2 \(words_num_filter\)"):
        load_mask_base(SegmentContext(every_op, 1, 0), 3)


# -- ops, checkpoint policy, key phase ------------------------------------------------
def test_run_ops_from_a_resume_state_gives_the_rows_of_a_full_run(every_op):
    full = run_segment(every_op, 0, 0)
    sc = SegmentContext(every_op, 0, 0)
    expected = sc.store.load_valid(2, "words_num_filter", 0, sc.phash, sc.fp(2)).table
    k, loaded = load_latest_checkpoint(sc.store, sc.plan, 0, sc.phash, highest=0)
    state = run_ops(sc, _plog(sc), PartitionState(loaded.table, list(loaded.marker["accounting"]), k, k))
    assert state.op_index == 2 and sc.result.ops_run == [1, 2]
    assert state.table.num_rows == full.rows_out
    assert state.table.column(INPUT_ROW_COLUMN).to_pylist() == expected.column(INPUT_ROW_COLUMN).to_pylist()
    assert state.table.column("text").to_pylist() == expected.column("text").to_pylist()


def test_checkpoint_policy_skips_ops_that_are_not_points(tmp_path):
    job_dir = _job(tmp_path, "sparse", "every_n_ops")  # n_ops 5: points are only 2 (before the dedup) and 4
    sc = SegmentContext(job_dir, 0, 0)
    assert sorted(sc.points) == [2, 4]
    table = read_input_rows(sc.ctx, 0)
    state = PartitionState(table, [{"op_index": 0}], 0, None)
    assert checkpoint_after_op(sc, state, table, outcome=None) is None
    assert not sc.store.is_committed(0, "clean_email_mapper", 0, sc.phash, sc.fp(0))


def test_key_phase_commits_one_key_per_row_of_the_segment_output(every_op):
    run_segment(every_op, 0, 0)
    sc = SegmentContext(every_op, 0, 0)
    out = sc.store.load_valid(2, "words_num_filter", 0, sc.phash, sc.fp(2)).table
    keys = key_phase(sc, out)
    assert keys.num_rows == out.num_rows
    saved = keys_store(every_op).load_valid(3, "document_deduplicator", 0, sc.phash, sc.fp(3))
    assert saved.table.equals(keys)
    # exact dedup: one fixed-size key per row, and its input row (lineage names the row a duplicate repeats)
    assert keys.column_names == [KEYS_COLUMN, INPUT_ROW_COLUMN]
    assert keys.column(INPUT_ROW_COLUMN).equals(out.column(INPUT_ROW_COLUMN))
