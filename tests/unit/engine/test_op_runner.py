"""Per-sample failure isolation with skip_op_error, and retention after a successful export."""

from __future__ import annotations

import os

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from airflow_provider_dj.engine.execution.op_runner import apply_op
from airflow_provider_dj.ops.base import Filter, Mapper


class ExplodingMapper(Mapper):
    """Uppercases text, but raises on any batch containing 'boom' (a bad sample)."""

    name = "exploding_mapper_for_tests"

    def process_table(self, table):
        texts = table.column("text")
        if pc.any(pc.match_substring(texts, "boom")).as_py():
            raise ValueError("cannot process a sample containing 'boom'")
        return table.set_column(table.column_names.index("text"), "text", pc.utf8_upper(texts))


class EmptyKeepFilter(Filter):
    name = "keep_non_empty_for_tests"

    def compute_stats(self, table):
        return table

    def keep_mask(self, table):
        return pc.greater(pc.utf8_length(table.column("text")), 0)


T = pa.table({"id": [0, 1, 2, 3], "text": ["a", "boom here", "c", ""]})


def test_failing_rows_are_isolated_and_counted_when_skipping():
    out = apply_op(ExplodingMapper(), 0, T, skip_op_error=True)
    assert out.table.column("text").to_pylist() == ["A", "C", ""]
    assert out.failed_rows.column("id").to_pylist() == [1]
    assert "boom" in out.failed_reasons[0]
    a = out.accounting
    assert (a["rows_in"], a["rows_out"], a["failed"], a["filtered"]) == (4, 3, 1, 0)


def test_failure_propagates_without_skip_op_error():
    with pytest.raises(ValueError, match="boom"):
        apply_op(ExplodingMapper(), 0, T, skip_op_error=False)


def test_filter_accounting():
    out = apply_op(EmptyKeepFilter(), 3, T, skip_op_error=False)
    assert out.table.num_rows == 3 and out.accounting["filtered"] == 1


@pytest.mark.parametrize("policy,kept", [("keep_all", True), ("cleanup_all", False), ("keep_failed_only", False)])
def test_retention_policy_applied_after_success(tmp_path, policy, kept):
    from airflow_provider_dj.engine.config.recipe import load_recipe
    from airflow_provider_dj.engine.job.setup import prepare_job
    from airflow_provider_dj.engine.runner.local import run_prepared_job
    from airflow_provider_dj.testing.sample_corpus import write_corpus

    data = write_corpus(str(tmp_path / "in.jsonl"), 30, seed=1)
    (tmp_path / "r.yaml").write_text(
        f"dataset_path: {data}\nexport_path: {tmp_path / 'o.jsonl'}\n"
        f"intermediate_storage: {{retention_policy: {policy}}}\n"
        "partition: {mode: manual, num_of_partitions: 2}\nprocess:\n  - whitespace_normalization_mapper:\n"
    )
    job = prepare_job(load_recipe(tmp_path / "r.yaml"), job_id="ret")
    summary = run_prepared_job(job).summary
    cp = os.path.join(job.job_dir, "checkpoints")
    assert os.path.exists(os.path.join(cp, "checkpoint_op_000_whitespace_normalization_mapper")) == kept
    assert os.path.exists(os.path.join(cp, "partitioning_info.json"))  # always kept
    assert summary["retention"]["policy"] == policy
    assert sum(1 for _ in open(tmp_path / "o.jsonl")) == 30


def test_progress_line_shows_rows_rate_and_eta():
    from airflow_provider_dj.engine.execution.ray_dispatch import progress_line

    line = progress_line(0, [0, 1, 2, 3], {0: {}, 1: {}}, [], {0: 250, 1: 250, 2: 250, 3: 250}, 2.0)
    assert line == "segment 0: 2/4 partitions (500/1,000 rows) done, 0 failed, 2.0s, 250 rows/s, ETA 2.0s"


class NullingMapper(Mapper):
    """Returns no value for texts containing 'x' (like an LLM's empty answer)."""

    name = "nulling_mapper_for_tests"

    def process_table(self, table):
        texts = table.column("text")
        out = pc.if_else(pc.match_substring(texts, "x"), pa.scalar(None, pa.string()), texts)
        return table.set_column(table.column_names.index("text"), "text", out)


def test_a_missing_value_is_a_failure_not_a_success():
    t = pa.table({"id": [0, 1, 2], "text": ["a", "x", None]})
    out = apply_op(NullingMapper(), 0, t, skip_op_error=True)
    assert out.table.column("id").to_pylist() == [0, 2]  # a null that was null already is not a failure
    assert out.failed_rows.column("id").to_pylist() == [1]
    assert out.failed_reasons[0].startswith("InvalidOutputError: nulling_mapper_for_tests returned no value")
    with pytest.raises(Exception, match="returned no value"):
        apply_op(NullingMapper(), 0, t, skip_op_error=False)


def test_failed_samples_record_op_partition_input_row_and_error(tmp_path):
    import json

    from airflow_provider_dj.engine.config.recipe import load_recipe
    from airflow_provider_dj.engine.execution.segment_runner import _write_failed
    from airflow_provider_dj.engine.job.setup import prepare_job
    from airflow_provider_dj.engine.storage.context import JobContext

    rows = pa.table({"text": ["bad"], "__dj__input_row__": pa.array([41], pa.int64())})
    data = tmp_path / "in.jsonl"
    data.write_text('{"text": "a"}\n')
    (tmp_path / "r.yaml").write_text(
        f"dataset_path: {data}\nexport_path: {tmp_path / 'o.jsonl'}\nprocess:\n  - whitespace_normalization_mapper:\n"
    )
    job = prepare_job(load_recipe(tmp_path / "r.yaml"), job_id="f")
    _write_failed(JobContext(job.job_dir), 0, "whitespace_normalization_mapper", 0, rows, ["ValueError: boom"])
    rec = json.loads(
        open(tmp_path / "f" / "failed" / "op_000_whitespace_normalization_mapper" / "partition_00000.jsonl").readline()
    )
    assert rec["__dj__input_row__"] == 41 and rec["__dj__error_type__"] == "ValueError"
    assert rec["__dj__failed_op__"] == "whitespace_normalization_mapper" and rec["__dj__partition__"] == 0
