"""The LaTeX and word mappers against fixtures produced by the reference Data-Juicer 1.6.1.

Fixtures live in ``mappers_latex/`` and come from its ``regenerate.sh``
(Data-Juicer run in its own venv on real LaTeX sources); this module only
uses our package.  Comparisons are exact, whole table and in chunks of 7.
The ``tokenization`` variants load the fixture SentencePiece model
``mappers_latex/models/en.sp.model`` through ``DATA_JUICER_EXTERNAL_MODELS_HOME``,
the way Data-Juicer found it when it made the expected files.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

from airflow_provider_dj.ops.registry import create_op, get_op_class

FIX = Path(__file__).parent / "mappers_latex"
VARIANTS = json.loads((FIX / "variants.json").read_text(encoding="utf-8"))
CASES = [(op, variant, args) for op, by_name in VARIANTS.items() for variant, args in by_name.items()]


def read_jsonl(path: Path) -> list[dict]:
    with path.open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


@pytest.fixture(autouse=True)
def fixture_models(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DATA_JUICER_EXTERNAL_MODELS_HOME", str(FIX / "models"))
    monkeypatch.setenv("DATA_JUICER_MODELS_CACHE", str(tmp_path / "empty_cache"))


@pytest.mark.parametrize("chunk", [None, 7], ids=["one_chunk", "chunks_of_7"])
@pytest.mark.parametrize("op_name,variant,args", CASES, ids=[f"{o}__{v}" for o, v, _ in CASES])
def test_mapper_matches_data_juicer(op_name: str, variant: str, args: dict, chunk: int | None) -> None:
    rows = read_jsonl(FIX / "inputs" / f"{op_name}.jsonl")
    expected = read_jsonl(FIX / "expected" / f"{op_name}__{variant}.jsonl")
    assert len(rows) == len(expected) > 10
    get_op_class(op_name).validate_args(args)
    table = pa.Table.from_pylist(rows)
    if chunk:
        table = pa.Table.from_batches(table.to_batches(max_chunksize=chunk), table.schema)
    got = create_op(op_name, args).process_table(table).select(["id", "text"]).to_pylist()
    mismatches = [(r["text"][:300], g["text"][:300], e["text"][:300]) for r, g, e in zip(rows, got, expected) if g != e]
    assert not mismatches, f"{len(mismatches)} rows differ (input, ours, DJ): {mismatches[:3]}"
    assert got == expected


def test_fixtures_exercise_the_ops() -> None:
    """Every variant but the no-op one changes rows, and the inputs hold what the brief asks for."""
    for op, variant, _ in CASES:
        rows = read_jsonl(FIX / "inputs" / f"{op}.jsonl")
        out = read_jsonl(FIX / "expected" / f"{op}__{variant}.jsonl")
        changed = sum(a != b for a, b in zip(rows, out))
        assert (changed == 0) == (variant == "neither"), (op, variant, changed)
    texts = [r["text"] for r in read_jsonl(FIX / "inputs" / "expand_macro_mapper.jsonl")]
    for needle in (
        "\\newcommand",
        "\\renewcommand",
        "\\def",
        "\\section",
        "\\begin{thebibliography}",
        "% ",
        "\\%",
        "中文",
        "é",
    ):
        assert any(needle in t for t in texts), needle
    assert "" in texts and max(len(line) for t in texts for line in t.split("\n")) > 10_000


def test_every_op_has_fixtures() -> None:
    assert set(VARIANTS) == {
        "remove_header_mapper", "remove_comments_mapper", "remove_bibliography_mapper", "expand_macro_mapper",
        "remove_words_with_incorrect_substrings_mapper",
    }  # fmt: skip


def test_macro_template_roundtrip_was_checked() -> None:
    """expand_macro_mapper inserts values literally; the generator proved that equals DJ's template path."""
    checks = json.loads((FIX / "expected" / "checks.json").read_text(encoding="utf-8"))
    assert checks["template_roundtrip_chars"] == 0x110000 - 0x800  # every code point but surrogates
    assert checks["template_roundtrip_strings"] >= 10_000


def test_fixtures_are_small() -> None:
    total = sum(p.stat().st_size for p in FIX.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    assert total < 700_000
