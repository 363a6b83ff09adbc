"""The text mappers against fixtures produced by the reference Data-Juicer 1.6.1.

Fixtures live in ``mappers_text/`` and come from its ``regenerate.sh``
(which runs DJ, ftfy and selectolax in DJ's own venv); this module only uses
our package.  Comparisons are exact, whole table and in chunks of 7.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

from airflow_provider_dj.ops.kernels import text as tk
from airflow_provider_dj.ops.mappers import text as mt
from airflow_provider_dj.ops.mappers import web as mm
from airflow_provider_dj.ops.registry import create_op, get_op_class

FIX = Path(__file__).parent / "mappers_text"
VARIANTS = json.loads((FIX / "variants.json").read_text(encoding="utf-8"))
CASES = [(op, variant, args) for op, by_name in VARIANTS.items() for variant, args in by_name.items()]
CHARSETS = json.loads((FIX / "expected" / "charsets.json").read_text(encoding="utf-8"))


def read_jsonl(path: Path) -> list[dict]:
    with path.open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


@pytest.mark.parametrize("chunk", [None, 7], ids=["one_chunk", "chunks_of_7"])
@pytest.mark.parametrize("op_name,variant,args", CASES, ids=[f"{o}__{v}" for o, v, _ in CASES])
def test_mapper_matches_data_juicer(op_name: str, variant: str, args: dict, chunk: int | None) -> None:
    rows = read_jsonl(FIX / "inputs" / f"{op_name}.jsonl")
    expected = read_jsonl(FIX / "expected" / f"{op_name}__{variant}.jsonl")
    get_op_class(op_name).validate_args(args)
    table = pa.Table.from_pylist(rows)
    if chunk:
        table = pa.Table.from_batches(table.to_batches(max_chunksize=chunk), table.schema)
    got = create_op(op_name, args).process_table(table).select(["id", "text"]).to_pylist()
    mismatches = [(r["text"], g["text"], e["text"]) for r, g, e in zip(rows, got, expected) if g != e]
    assert not mismatches, f"{len(mismatches)} rows differ (input, ours, DJ): {mismatches[:5]}"
    assert got == expected


def test_every_op_has_fixtures() -> None:
    ops = {n for n in VARIANTS}
    assert ops == {
        "clean_links_mapper", "clean_html_mapper", "clean_ip_mapper", "clean_copyright_mapper",
        "fix_unicode_mapper", "punctuation_normalization_mapper", "remove_long_words_mapper",
        "remove_repeat_sentences_mapper", "lowercase_mapper",
    }  # fmt: skip


def test_link_classes_match_regex_module() -> None:
    word = tk.charset(CHARSETS["regex_word"])
    assert mm.regex_word() == word
    assert mm.CI_LETTERS == tk.charset(CHARSETS["links_ci_letter"])
    assert word | {"-"} == tk.charset(CHARSETS["links_ci_word_or_hyphen"])
    assert tk.charset(CHARSETS["links_ci_w"]) == frozenset("wW")
    every = tk.charset("0-D7FF E000-10FFFF")
    assert every - tk.REGEX_SPACE - frozenset("()<>") == tk.charset(CHARSETS["links_not_space_paren"])
    assert every - tk.REGEX_SPACE - mm._LINK_END_EXCLUDED == tk.charset(CHARSETS["links_end_char"])


def test_copyright_and_sentence_classes_match_regex_module() -> None:
    folds = {ch: tk.charset(spec) for ch, spec in CHARSETS["copyright_ci"].items()}
    ours = mt._COPYRIGHT_CI.strip("[]").split("][")
    assert [frozenset(group) for group in ours] == [folds[ch] for ch in "copyright"]
    assert tk.charset(CHARSETS["sentence_last_step_class"]) == frozenset(".。!！？?{}62…")


def test_punctuation_table_matches() -> None:
    assert mt.PUNCTUATION_MAP == CHARSETS["punctuation_map"]


def test_fixtures_are_small() -> None:
    total = sum(p.stat().st_size for p in FIX.rglob("*") if p.is_file())
    assert total < 500_000
