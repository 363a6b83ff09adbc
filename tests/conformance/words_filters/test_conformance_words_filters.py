"""The word-list filters and the ``tokenization: true`` modes against Data-Juicer 1.6.1's own output.

Fixtures come from ``regenerate.sh`` here (DJ run on the committed word
lists and models; see README.md); this module only uses our package.  Every
row's stats, keep flag and failure are compared exactly -- as JSON text, so
an int where DJ has a float, or a float one ulp off, fails -- for the whole
table and in chunks of 5, and through the engine's ``apply_op`` (what a
partition runs), which must keep exactly DJ's rows.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

from airflow_provider_dj.engine.execution.op_runner import apply_op
from airflow_provider_dj.ops.base import STATS_COLUMN
from airflow_provider_dj.ops.registry import create_op, get_op_class

FIX = Path(__file__).parent
VARIANTS = json.loads((FIX / "variants.json").read_text(encoding="utf-8"))
CASES = [(op, v, args) for op, by_name in VARIANTS.items() for v, args in by_name.items()]


@pytest.fixture(autouse=True)
def _dj_model_dirs(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The fixture's models are found the way DJ found them; its caches are empty folders."""
    monkeypatch.setenv("DATA_JUICER_EXTERNAL_MODELS_HOME", str(FIX / "models"))
    monkeypatch.setenv("DATA_JUICER_MODELS_CACHE", str(tmp_path / "models"))
    monkeypatch.setenv("DATA_JUICER_ASSETS_CACHE", str(tmp_path / "assets"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf"))


def read_jsonl(path: Path) -> list[dict]:
    with path.open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def as_json(rows: list[dict]) -> list[str]:
    return [json.dumps(r, sort_keys=True, ensure_ascii=False) for r in rows]


def resolve(args: dict) -> dict:
    return {k: v.replace("{FIX}", str(FIX)) if isinstance(v, str) else v for k, v in args.items()}


@pytest.mark.parametrize("chunk", [None, 5], ids=["one_chunk", "chunks_of_5"])
@pytest.mark.parametrize("op_name,variant,args", CASES, ids=[f"{o}__{v}" for o, v, _ in CASES])
def test_filter_matches_data_juicer(op_name: str, variant: str, args: dict, chunk: int | None) -> None:
    rows = read_jsonl(FIX / "inputs" / "words.jsonl")
    expected = read_jsonl(FIX / "expected" / f"{op_name}__{variant}.jsonl")
    args = resolve(args)
    get_op_class(op_name).validate_args(args)
    op = create_op(op_name, args)
    table = pa.Table.from_pylist(rows)
    if chunk:
        table = pa.Table.from_batches(table.to_batches(max_chunksize=chunk), table.schema)
    with_stats = op.compute_stats(table)
    keep = op.keep_mask(with_stats).to_pylist()
    got = [
        {"id": r["id"], "stats": s, "kept": k, "error": False}
        for r, s, k in zip(rows, with_stats.column(STATS_COLUMN).to_pylist(), keep)
    ]
    mismatches = [(r["text"][:80], g, e) for r, g, e in zip(rows, as_json(got), as_json(expected)) if g != e]
    assert not mismatches, f"{len(mismatches)} rows differ (input, ours, DJ): {mismatches[:5]}"
    outcome = apply_op(op, 0, table, skip_op_error=False)
    assert outcome.table.column("id").to_pylist() == [e["id"] for e in expected if e["kept"]]


def test_fixtures_cover_every_op_and_mode() -> None:
    assert set(VARIANTS) == {
        "flagged_words_filter", "stopwords_filter", "words_num_filter", "word_repetition_filter", "alphanumeric_filter",
    }  # fmt: skip
    tokenized = {op for op, by in VARIANTS.items() for a in by.values() if a.get("tokenization")}
    assert tokenized == set(VARIANTS)
    # the fixtures decide both ways for every variant, so a filter that keeps or drops all fails
    for op_name, by_variant in VARIANTS.items():
        for variant in by_variant:
            kept = {e["kept"] for e in read_jsonl(FIX / "expected" / f"{op_name}__{variant}.jsonl")}
            assert kept == {True, False}, f"{op_name}__{variant} keeps or drops every row: add rows that split it"


def test_data_juicer_executor_agrees() -> None:
    """The generator ran each variant through DJ's op.run as well; no ratio crossed a bound there."""
    assert json.loads((FIX / "expected" / "executor_rounding.json").read_text(encoding="utf-8")) == {}


def test_fixtures_are_small() -> None:
    total = sum(p.stat().st_size for p in FIX.rglob("*") if p.is_file() and ".dj_tf_overlay" not in p.parts)
    assert total < 900_000
