"""op_runner: rows a Mapper flags in ``__dj__row_error__`` fail; ``OpFatalError`` is never isolated row by row."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from airflow_provider_dj.engine.execution.op_runner import apply_op
from airflow_provider_dj.ops.base import ROW_ERROR_COLUMN, Mapper, OpFatalError


class FlaggingMapper(Mapper):
    """Uppercases text; flags rows containing 'bad' (and nulls their text); raises on 'boom'."""

    name = "flagging_mapper_for_tests"
    calls = 0

    def process_table(self, table):
        FlaggingMapper.calls += 1
        texts = table.column("text")
        if pc.any(pc.match_substring(texts, "boom")).as_py():
            raise ValueError("boom sample")
        bad = pc.match_substring(texts, "bad")
        upper = pc.if_else(bad, pa.scalar(None, pa.string()), pc.utf8_upper(texts))
        errors = pc.if_else(bad, pa.scalar("InvalidAnswer: bad sample"), pa.scalar(None, pa.string()))
        out = table.set_column(table.column_names.index("text"), "text", upper)
        return out.append_column(ROW_ERROR_COLUMN, errors)


class DownMapper(Mapper):
    name = "down_mapper_for_tests"
    calls = 0

    def process_table(self, table):
        DownMapper.calls += 1
        raise OpFatalError("endpoint down")


T = pa.table({"id": [0, 1, 2, 3], "text": ["a", "bad one", "c", "bad two"]})


@pytest.mark.parametrize("skip", [False, True])
def test_flagged_rows_fail_whatever_skip_op_error_says(skip):
    out = apply_op(FlaggingMapper(), 2, T, skip_op_error=skip)
    assert out.table.column("text").to_pylist() == ["A", "C"]
    assert ROW_ERROR_COLUMN not in out.table.column_names
    assert out.failed_rows.column("id").to_pylist() == [1, 3]
    assert ROW_ERROR_COLUMN not in out.failed_rows.column_names
    assert out.failed_reasons == ["InvalidAnswer: bad sample"] * 2
    a = out.accounting
    assert (a["rows_in"], a["rows_out"], a["filtered"], a["failed"]) == (4, 2, 0, 2)


def test_flagged_and_raising_rows_together_under_skip_op_error():
    t = pa.table({"id": [0, 1, 2], "text": ["boom", "bad", "ok"]})
    out = apply_op(FlaggingMapper(), 0, t, skip_op_error=True)
    assert out.table.column("id").to_pylist() == [2]
    assert out.failed_rows.column("id").to_pylist() == [0, 1]
    assert out.failed_reasons[0].startswith("ValueError: boom") and out.failed_reasons[1] == "InvalidAnswer: bad sample"
    assert out.accounting["failed"] == 2 and out.accounting["rows_out"] == 1


def test_fatal_error_fails_the_op_without_row_by_row_retries():
    DownMapper.calls = 0
    with pytest.raises(OpFatalError, match="endpoint down"):
        apply_op(DownMapper(), 0, T, skip_op_error=True)
    assert DownMapper.calls == 1
