"""The text and field filters against fixtures produced by the reference Data-Juicer 1.6.1.

Fixtures live in ``filters_text/`` and come from its ``regenerate.sh`` (which
runs DJ in its own venv); this module only uses our package.  Every row's
stats, keep flag and failure are compared exactly -- as JSON text, so an
int where DJ has a float (or a float off by one ulp) fails -- for the whole
table and in chunks of 7.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from airflow_provider_dj.engine.execution.op_runner import apply_op
from airflow_provider_dj.ops.base import STATS_COLUMN
from airflow_provider_dj.ops.filters import text as ft
from airflow_provider_dj.ops.kernels import text as tk
from airflow_provider_dj.ops.registry import create_op, get_op_class

FIX = Path(__file__).parent / "filters_text"
VARIANTS = json.loads((FIX / "variants.json").read_text(encoding="utf-8"))
CASES = [(s, v, args) for s, by_name in VARIANTS.items() for v, args in by_name.items()]
OP_OF_SET = {"specified_field_filter_errors": "specified_field_filter"}


def read_jsonl(path: Path) -> list[dict]:
    with path.open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def as_json(rows: list[dict]) -> list[str]:
    return [json.dumps(r, sort_keys=True, ensure_ascii=False) for r in rows]


def table_of(rows: list[dict], chunk: int | None) -> pa.Table:
    table = pa.Table.from_pylist(rows)
    if chunk:
        table = pa.Table.from_batches(table.to_batches(max_chunksize=chunk), table.schema)
    return table


def stats_of(table: pa.Table) -> list:
    if STATS_COLUMN not in table.column_names:
        return [None] * table.num_rows  # suffix_filter writes none, like DJ
    return table.column(STATS_COLUMN).to_pylist()


@pytest.mark.parametrize("chunk", [None, 7], ids=["one_chunk", "chunks_of_7"])
@pytest.mark.parametrize("set_name,variant,args", CASES, ids=[f"{s}__{v}" for s, v, _ in CASES])
def test_filter_matches_data_juicer(set_name: str, variant: str, args: dict, chunk: int | None) -> None:
    op_name = OP_OF_SET.get(set_name, set_name)
    rows = read_jsonl(FIX / "inputs" / f"{set_name}.jsonl")
    expected = read_jsonl(FIX / "expected" / f"{set_name}__{variant}.jsonl")
    get_op_class(op_name).validate_args(args)
    op = create_op(op_name, args)
    table = table_of(rows, chunk)
    if not any(e["error"] for e in expected):
        with_stats = op.compute_stats(table)
        keep = op.keep_mask(with_stats).to_pylist()
        got = [
            {"id": r["id"], "stats": s, "kept": k, "error": False} for r, s, k in zip(rows, stats_of(with_stats), keep)
        ]
    else:  # DJ failed some samples: ours must fail exactly those, one row at a time
        got = []
        for i, r in enumerate(rows):
            try:
                with_stats = op.compute_stats(table.slice(i, 1))
            except KeyError:
                got.append({"id": r["id"], "stats": None, "kept": False, "error": True})
                continue
            kept = op.keep_mask(with_stats).to_pylist()[0]
            got.append({"id": r["id"], "stats": stats_of(with_stats)[0], "kept": kept, "error": False})
        # ... and the engine, batch first, must set aside the same rows.
        outcome = apply_op(op, 0, table, skip_op_error=True)
        failed = [] if outcome.failed_rows is None else outcome.failed_rows.column("id").to_pylist()
        assert failed == [e["id"] for e in expected if e["error"]]
        assert outcome.table.column("id").to_pylist() == [e["id"] for e in expected if e["kept"]]
        assert outcome.accounting["failed"] == len(failed)
    mismatches = [(r, g, e) for r, g, e in zip(rows, as_json(got), as_json(expected)) if g != e]
    assert not mismatches, f"{len(mismatches)} rows differ (input, ours, DJ): {mismatches[:5]}"


def test_every_op_has_fixtures() -> None:
    assert {OP_OF_SET.get(s, s) for s in VARIANTS} == {
        "alphanumeric_filter", "average_line_length_filter", "maximum_line_length_filter",
        "character_repetition_filter", "word_repetition_filter", "special_characters_filter",
        "suffix_filter", "specified_field_filter",
    }  # fmt: skip


def test_character_tables_match_reference_python() -> None:
    ref = json.loads((FIX / "expected" / "charsets.json").read_text(encoding="utf-8"))
    alnum = tk.charset(ref["python_isalnum"])
    assert np.array_equal(np.flatnonzero(ft.char_table("alnum")), np.array(sorted(map(ord, alnum))))
    assert frozenset(ft.LINE_BREAKS) == tk.charset(ref["splitlines_breaks"])


def test_fixtures_are_small() -> None:
    total = sum(p.stat().st_size for p in FIX.rglob("*") if p.is_file())
    assert total < 500_000
