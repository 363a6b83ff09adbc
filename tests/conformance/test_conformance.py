"""Our ops against fixtures produced by the reference Data-Juicer 1.6.1.

The fixtures come from ``regenerate.sh`` (which runs DJ in its own venv);
this module only uses our package, so it runs anywhere.  Every comparison is
exact: texts, stats, which rows survive and their order.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest
import yaml

from airflow_provider_dj.ops.base import STATS_COLUMN, Deduplicator, Filter, Mapper
from airflow_provider_dj.ops.dedup.exact import first_occurrence_mask
from airflow_provider_dj.ops.kernels import text as tk
from airflow_provider_dj.ops.registry import create_op, get_op_class

FIX = Path(__file__).parent / "fixtures"
VARIANTS = json.loads((FIX / "variants.json").read_text(encoding="utf-8"))
CASES = [(op, variant, args) for op, by_name in VARIANTS.items() for variant, args in by_name.items()]


def read_jsonl(path: Path) -> list[dict]:
    with path.open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def rechunk(table: pa.Table, size: int) -> pa.Table:
    return pa.Table.from_batches(table.to_batches(max_chunksize=size), table.schema)


@pytest.mark.parametrize("chunk", [None, 7], ids=["one_chunk", "chunks_of_7"])
@pytest.mark.parametrize("op_name,variant,args", CASES, ids=[f"{o}__{v}" for o, v, _ in CASES])
def test_op_matches_data_juicer(op_name: str, variant: str, args: dict, chunk: int | None) -> None:
    rows = read_jsonl(FIX / "inputs" / f"{op_name}.jsonl")
    expected = read_jsonl(FIX / "expected" / f"{op_name}__{variant}.jsonl")
    get_op_class(op_name).validate_args(args)
    op = create_op(op_name, args)
    table = pa.Table.from_pylist(rows)
    if chunk:
        table = rechunk(table, chunk)

    if isinstance(op, Mapper):
        out = op.process_table(table).select(["id", "text"]).to_pylist()
        assert out == expected
    elif isinstance(op, Filter):
        with_stats = op.compute_stats(table)
        keep = op.keep_mask(with_stats).to_pylist()
        stats = with_stats.column(STATS_COLUMN).to_pylist()
        got = [{"id": r["id"], "text": r["text"], "stats": s, "kept": k} for r, s, k in zip(rows, stats, keep)]
        assert got == expected
    else:
        assert isinstance(op, Deduplicator)
        mask = first_occurrence_mask(op.compute_hash(table))
        got = [{"id": r["id"], "text": r["text"]} for r, k in zip(rows, mask) if k]
        assert got == expected


def _run_pipeline(table: pa.Table, process: list[dict]) -> pa.Table:
    """A minimal in-memory stand-in for the engine: ops in order, global dedup."""
    for entry in process:
        ((name, args),) = entry.items()
        op = create_op(name, args or {})
        if isinstance(op, Mapper):
            table = op.process_table(table)
        elif isinstance(op, Filter):
            table = op.compute_stats(table)
            table = table.filter(op.keep_mask(table))
        else:
            table = table.filter(pa.array(first_occurrence_mask(op.compute_hash(table))))
    return table


@pytest.mark.parametrize("chunk", [None, 16])
def test_pipeline_matches_dj_process(chunk: int | None) -> None:
    recipe = yaml.safe_load((FIX / "pipeline" / "recipe.yaml").read_text(encoding="utf-8"))
    rows = read_jsonl(FIX / "pipeline" / "input.jsonl")
    table = pa.Table.from_pylist(rows)
    if chunk:
        table = rechunk(table, chunk)
    out = _run_pipeline(table, recipe["process"])
    # DJ drops __dj__stats__ from the export (keep_stats_in_res_ds: false) and
    # writes it to a *_stats.jsonl sidecar instead.
    stats = out.column(STATS_COLUMN).to_pylist()
    got = out.drop_columns([STATS_COLUMN]).to_pylist()
    assert got == read_jsonl(FIX / "pipeline" / "expected.jsonl")
    assert [{STATS_COLUMN: s} for s in stats] == read_jsonl(FIX / "pipeline" / "expected_stats.jsonl")


def test_character_sets_match_reference() -> None:
    ref = json.loads((FIX / "expected" / "charsets.json").read_text(encoding="utf-8"))
    assert tk.SPECIAL_CHARACTERS == tk.charset(ref["special_characters_single"])
    assert tk.VARIOUS_WHITESPACES == tk.charset(ref["various_whitespaces"])
    assert tk.REGEX_SPACE == tk.charset(ref["regex_space"])
    assert tk.REGEX_DIGIT == tk.charset(ref["regex_digit"])
    assert tk.PUNCTUATION == frozenset(ref["punctuation"])
    assert frozenset(tk.PY_WHITESPACE) == tk.charset(ref["python_isspace"])


def test_fixtures_are_small() -> None:
    total = sum(p.stat().st_size for p in FIX.rglob("*") if p.is_file())
    assert total < 1_000_000
