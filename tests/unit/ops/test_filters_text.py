"""Text and field filters beyond the DJ fixtures: validation, nulls, chunking, kernels.

The kernels are also checked against small pure-Python references written
from DJ's documented semantics (``str.splitlines``, ``str.isalnum``, n-gram
counting), on seeded random text that mixes every character class involved.
"""

from __future__ import annotations

import math
import random
import re
import sys
from collections import Counter

import numpy as np
import pyarrow as pa
import pytest

from airflow_provider_dj.ops.base import STATS_COLUMN, OpArgumentError
from airflow_provider_dj.ops.filters import text as ft
from airflow_provider_dj.ops.kernels import text as tk
from airflow_provider_dj.ops.registry import create_op, get_op_class, op_names
from airflow_provider_dj.ops.stats import get_stat

TEXT_OPS = {
    "alphanumeric_filter": "alnum_ratio",
    "special_characters_filter": "special_char_ratio",
    "average_line_length_filter": "avg_line_length",
    "maximum_line_length_filter": "max_line_length",
    "character_repetition_filter": "char_rep_ratio",
    "word_repetition_filter": "word_rep_ratio",
}
ALPHABET = list("aAbB zZ09.,!-_\n\t\r\x0b\x0c\x1c\x85") + [
    "\r\n", "\u2028", "\u3000", "\xa0", "\u200b", "中", "文", "🙂", "👍🏽", "Σ", "İ", "Г", "Π", "π", "١", "²", "e\u0301",
]  # fmt: skip


def validate(name: str, args: dict) -> None:
    get_op_class(name).validate_args(args)


def random_texts(n: int, seed: int = 0, nulls: bool = True) -> list[str | None]:
    rng = random.Random(seed)
    out: list[str | None] = []
    for _ in range(n):
        if nulls and rng.random() < 0.05:
            out.append(None)
            continue
        alphabet = rng.sample(ALPHABET, rng.randint(1, 6)) if rng.random() < 0.5 else ALPHABET
        text = "".join(rng.choice(alphabet) for _ in range(rng.choice([0, 1, 3, 9, 10, 11, 30, 120])))
        out.append(text * rng.randint(1, 4) if rng.random() < 0.3 else text)
    return out


def as_table(texts: list, chunk: int | None = None, **extra) -> pa.Table:
    t = pa.table({"id": list(range(len(texts))), "text": pa.array(texts, pa.string()), **extra})
    if chunk:
        t = pa.Table.from_batches(t.to_batches(max_chunksize=chunk), t.schema)
    return t


def run(name: str, args: dict, table: pa.Table) -> tuple[list, list]:
    op = create_op(name, args)
    with_stats = op.compute_stats(table)
    return get_stat(with_stats, TEXT_OPS[name]).to_pylist(), op.keep_mask(with_stats).to_pylist()


# --- pure-Python references -----------------------------------------------------------
def ref_char_rep(text: str, n: int) -> float:
    freq = Counter(text[i : i + n] for i in range(len(text) - n + 1))
    if not freq:
        return 0.0
    counts = sorted(freq.values(), reverse=True)
    take = min(int(math.sqrt(len(counts))), len(counts) - counts.count(1))
    return sum(counts[:take]) / sum(counts)


def ref_words(text: str) -> list[str]:
    special = "".join(tk.SPECIAL_CHARACTERS)
    words = [w.lower().strip(special) for w in re.split("[ \n\t]", text) if w]
    return [w for w in words if w]


def ref_word_rep(text: str, n: int) -> float:
    words = ref_words(text)
    freq = Counter(tuple(words[i : i + n]) for i in range(len(words) - n + 1))
    total = sum(freq.values())
    return sum(c for c in freq.values() if c > 1) / total if total else 0.0


REFERENCES = {
    "alphanumeric_filter": lambda t: sum(c.isalnum() for c in t) / len(t) if t else 0.0,
    "special_characters_filter": lambda t: sum(c in tk.SPECIAL_CHARACTERS for c in t) / len(t) if t else 0.0,
    "average_line_length_filter": lambda t: len(t) / len(t.splitlines()) if t.splitlines() else 0.0,
    "maximum_line_length_filter": lambda t: max(map(len, t.splitlines()), default=0),
    "character_repetition_filter": lambda t: ref_char_rep(t, 10),
    "word_repetition_filter": lambda t: ref_word_rep(t, 10),
}


# --- validation ---------------------------------------------------------------------
def test_all_registered() -> None:
    assert set(TEXT_OPS) | {"suffix_filter", "specified_field_filter"} <= set(op_names())


@pytest.mark.parametrize("name", [*TEXT_OPS, "suffix_filter"])
def test_defaults_validate_and_instantiate(name: str) -> None:
    validate(name, {})
    op = create_op(name, {})
    assert op.text_key == "text"


@pytest.mark.parametrize(
    "name,args,key,hint",
    [
        ("alphanumeric_filter", {"min_ration": 0.1}, "min_ration", "'min_ratio'"),
        ("character_repetition_filter", {"replen": 3}, "replen", "'rep_len'"),
        ("word_repetition_filter", {"tokenisation": False}, "tokenisation", "'tokenization'"),
        ("average_line_length_filter", {"min_length": 3}, "min_length", "'min_len'"),
        ("suffix_filter", {"suffix": ".txt"}, "suffix", "'suffixes'"),
        ("specified_field_filter", {"field_key": "a", "target_values": [1]}, "target_values", "'target_value'"),
    ],
)
def test_unknown_argument_suggests(name: str, args: dict, key: str, hint: str) -> None:
    with pytest.raises(OpArgumentError) as err:
        validate(name, args)
    assert err.value.key == key
    assert f"Did you mean {hint}" in str(err.value)


@pytest.mark.parametrize(
    "name,args,key",
    [
        ("alphanumeric_filter", {"min_ratio": "0.1"}, "min_ratio"),
        ("alphanumeric_filter", {"tokenization": "no"}, "tokenization"),
        ("special_characters_filter", {"max_ratio": None}, "max_ratio"),
        ("average_line_length_filter", {"min_len": 1.5}, "min_len"),
        ("maximum_line_length_filter", {"max_len": "10"}, "max_len"),
        ("character_repetition_filter", {"rep_len": 2.5}, "rep_len"),
        ("character_repetition_filter", {"rep_len": True}, "rep_len"),
        ("word_repetition_filter", {"lang": 3}, "lang"),
        ("word_repetition_filter", {"reversed_range": "yes"}, "reversed_range"),
        ("suffix_filter", {"suffixes": 5}, "suffixes"),
        ("suffix_filter", {"suffixes": [".txt", 1]}, "suffixes"),
        ("specified_field_filter", {"field_key": 3}, "field_key"),
        ("specified_field_filter", {"field_key": "a", "target_value": "web"}, "target_value"),
    ],
)
def test_wrong_type(name: str, args: dict, key: str) -> None:
    with pytest.raises(OpArgumentError) as err:
        validate(name, args)
    assert err.value.key == key


@pytest.mark.parametrize(
    "name,args,key",
    [
        ("alphanumeric_filter", {"min_ratio": 0.9, "max_ratio": 0.1}, "min_ratio"),
        ("special_characters_filter", {"min_ratio": 0.5}, "min_ratio"),  # default max 0.25
        ("average_line_length_filter", {"min_len": 20, "max_len": 10}, "min_len"),
        ("maximum_line_length_filter", {"min_len": 11, "max_len": 10}, "min_len"),
        ("character_repetition_filter", {"min_ratio": 0.6}, "min_ratio"),
        ("word_repetition_filter", {"min_ratio": 1, "max_ratio": 0.5}, "min_ratio"),
    ],
)
def test_min_greater_than_max(name: str, args: dict, key: str) -> None:
    with pytest.raises(OpArgumentError, match="greater than") as err:
        validate(name, args)
    assert err.value.key == key


@pytest.mark.parametrize("name", ["alphanumeric_filter", "word_repetition_filter"])
def test_tokenization_without_a_local_tokenizer_is_rejected_with_a_reason(
    name: str, monkeypatch: pytest.MonkeyPatch, tmp_path
) -> None:
    # Empty model caches: the tokenizer is nowhere on this machine and is never downloaded
    # (tests/unit/ops/test_tokenizers.py and tests/conformance/words_filters run it when it is).
    for var in ("DATA_JUICER_MODELS_CACHE", "HF_HUB_CACHE"):
        monkeypatch.setenv(var, str(tmp_path / var))
    monkeypatch.delenv("DATA_JUICER_EXTERNAL_MODELS_HOME", raising=False)
    with pytest.raises(OpArgumentError, match="never downloads") as err:
        validate(name, {"tokenization": True})
    assert err.value.key == "tokenization"
    with pytest.raises(OpArgumentError):
        create_op(name, {"tokenization": True})
    validate(name, {"tokenization": False})


@pytest.mark.parametrize("name", ["character_repetition_filter", "word_repetition_filter"])
@pytest.mark.parametrize("rep_len", [0, -3])
def test_rep_len_must_be_positive(name: str, rep_len: int) -> None:
    with pytest.raises(OpArgumentError, match="positive") as err:
        validate(name, {"rep_len": rep_len})
    assert err.value.key == "rep_len"


def test_specified_field_filter_needs_a_field_key() -> None:
    for args in ({}, {"field_key": ""}):
        with pytest.raises(OpArgumentError, match="field_key is empty"):
            validate("specified_field_filter", args)
    validate("specified_field_filter", {"field_key": "meta.source", "target_value": ["web", None, 1]})


def test_arguments_reach_the_op_normalized() -> None:
    assert create_op("character_repetition_filter", {"rep_len": 3}).rep_len == 3
    s = create_op("specified_field_filter", {"field_key": "m.x", "target_value": [1]})
    assert s.field_key == "m.x" and s.target_value == [1]
    assert create_op("suffix_filter", {"suffixes": ".md"}).suffixes == [".md"]


# --- behaviour ----------------------------------------------------------------------
@pytest.mark.parametrize("name", TEXT_OPS)
def test_matches_python_reference(name: str) -> None:
    texts = random_texts(400, seed=hash(name) % 1000, nulls=False)
    got, _ = run(name, {}, as_table(texts))
    want = [REFERENCES[name](t) for t in texts]
    assert [repr(g) for g in got] == [repr(w) for w in want]


@pytest.mark.parametrize("name", TEXT_OPS)
def test_null_text_counts_as_empty(name: str) -> None:
    stats, keep = run(name, {}, as_table([None, "", "abc abc abc"]))
    assert stats[0] == stats[1] and keep[0] == keep[1]
    assert type(stats[0]) is (int if name == "maximum_line_length_filter" else float)


@pytest.mark.parametrize("name", TEXT_OPS)
def test_chunking_and_slicing_do_not_change_results(name: str) -> None:
    texts = random_texts(300, seed=7)
    args = {"rep_len": 3} if "repetition" in name else {}
    whole = run(name, args, as_table(texts))
    for chunk in (1, 4, 64):
        assert run(name, args, as_table(texts, chunk)) == whole
    sliced = as_table(texts).slice(50, 100)  # arrays with a non-zero offset
    assert run(name, args, sliced) == (whole[0][50:150], whole[1][50:150])


@pytest.mark.parametrize("name", TEXT_OPS)
def test_large_string_column(name: str) -> None:
    texts = random_texts(50, seed=3)
    table = as_table(texts)
    large = table.set_column(1, "text", table.column("text").cast(pa.large_string()))
    assert run(name, {}, large) == run(name, {}, table)


def test_existing_stats_are_reused_and_kept() -> None:
    table = as_table(["abc!", "!!!!"]).append_column(
        STATS_COLUMN, pa.array([{"alnum_ratio": 0.99, "other": 1}, {"alnum_ratio": None, "other": 2}])
    )
    out = create_op("alphanumeric_filter", {}).compute_stats(table)
    assert out.column(STATS_COLUMN).to_pylist() == [{"alnum_ratio": 0.99, "other": 1}, {"alnum_ratio": 0.0, "other": 2}]


def test_stat_types_and_bounds() -> None:
    table = as_table(["a" * 7 + "!" * 3, "aaa\nbb"])
    op = create_op("alphanumeric_filter", {"min_ratio": 0.0, "max_ratio": 0.7})
    with_stats = op.compute_stats(table)
    assert with_stats.column(STATS_COLUMN).type.field("alnum_ratio").type == pa.float64()
    assert op.keep_mask(with_stats).to_pylist() == [True, False]  # 0.7 exactly is inside [0, 0.7]; 5/6 is not
    op = create_op("maximum_line_length_filter", {"min_len": 3, "max_len": 3, "max_closed_interval": False})
    with_stats = op.compute_stats(table)
    assert with_stats.column(STATS_COLUMN).type.field("max_line_length").type == pa.int64()
    assert op.keep_mask(with_stats).to_pylist() == [False, False]


def test_line_breaks_are_pythons() -> None:
    breaks = {chr(c) for c in range(0x110000) if len(("a" + chr(c) + "b").splitlines()) == 2}
    assert breaks == set(ft.LINE_BREAKS)


def test_ngram_collision_path_is_exact(monkeypatch: pytest.MonkeyPatch) -> None:
    texts = random_texts(200, seed=11, nulls=False)
    want = run("character_repetition_filter", {"rep_len": 4}, as_table(texts))
    want_w = [ref_word_rep(t, 2) for t in texts]
    # Every window hashes alike: each proposed group is a collision and is regrouped exactly.
    monkeypatch.setattr(ft, "_weights", lambda n: np.zeros(n, np.uint64))
    assert run("character_repetition_filter", {"rep_len": 4}, as_table(texts)) == want
    assert run("word_repetition_filter", {"rep_len": 2}, as_table(texts))[0] == want_w


def test_ngram_groups_edges() -> None:
    cps, starts = ft.codepoints(pa.array(["", "ab", "abab", None, "aaaa"]))
    windows, singles, rows, sizes = ft.ngram_groups(cps, starts, 2)
    assert windows.tolist() == [0, 1, 3, 0, 3]
    assert singles.tolist() == [0, 1, 1, 0, 0]
    assert sorted(zip(rows.tolist(), sizes.tolist())) == [(2, 2), (4, 3)]
    windows, singles, rows, _ = ft.ngram_groups(cps, starts, 50)  # longer than every row
    assert windows.tolist() == singles.tolist() == [0] * 5 and len(rows) == 0


def test_word_tokens_follow_dj_refinement() -> None:
    ids, starts = ft.word_tokens(pa.array(["Word, word. WORD!", "🙂 123 --", "ΟΔΟΣ οδοσ οδος", None]))
    assert np.diff(starts).tolist() == [3, 0, 3, 0]
    assert len(set(ids[:3].tolist())) == 1  # one word after lower-casing and stripping
    assert ids[3] != ids[4] and ids[3] == ids[5]  # 'ΟΔΟΣ' lower-cases to 'οδος' (final sigma)
    assert ref_words("ΟΔΟΣ οδοσ οδος") == ["οδος", "οδοσ", "οδος"]


# --- field filters ---------------------------------------------------------------------
def test_suffix_filter() -> None:
    table = as_table(["a", "b", "c", "d"], __dj__suffix__=pa.array([".txt", ".md", None, "txt"]))
    keep = create_op("suffix_filter", {"suffixes": [".txt", ".md"]}).keep_mask(table).to_pylist()
    assert keep == [True, True, False, False]
    reversed_ = create_op("suffix_filter", {"suffixes": ".txt", "reversed_range": True})
    assert reversed_.keep_mask(table).to_pylist() == [False, True, True, True]
    none = create_op("suffix_filter", {"reversed_range": True})
    assert none.keep_mask(table).to_pylist() == [True] * 4
    assert none.compute_stats(table) is table  # DJ writes no stats for it
    with pytest.raises(KeyError, match="__dj__suffix__"):
        create_op("suffix_filter", {"suffixes": [".txt"]}).keep_mask(as_table(["a"]))


def meta_table(chunk: int | None = None) -> pa.Table:
    metas = [
        {"source": "web", "tags": ["a", "b"], "q": 1},
        {"source": None, "tags": None, "q": 2},
        {"source": "books", "tags": [], "q": 3},
        {"source": "web", "tags": ["a", None], "q": 1},
    ]
    return as_table(["a", "b", "c", "d"], chunk, meta=pa.array(metas))


@pytest.mark.parametrize("chunk", [None, 1, 3])
def test_specified_field_filter(chunk: int | None) -> None:
    table = meta_table(chunk)
    op = create_op("specified_field_filter", {"field_key": "meta.source", "target_value": ["web", None]})
    out = op.compute_stats(table)
    assert out.column(STATS_COLUMN).to_pylist() == [{"meta.source": v} for v in ["web", None, "books", "web"]]
    assert op.keep_mask(out).to_pylist() == [True, True, False, True]
    tags = create_op("specified_field_filter", {"field_key": "meta.tags", "target_value": ["a", "b"]})
    assert tags.keep_mask(tags.compute_stats(table)).to_pylist() == [True, False, True, False]
    q = create_op(
        "specified_field_filter", {"field_key": "meta.q", "target_value": [True, 3.0], "reversed_range": True}
    )
    assert q.keep_mask(q.compute_stats(table)).to_pylist() == [False, True, False, False]


def test_specified_field_filter_failures() -> None:
    table = meta_table()
    for key, match in [("nope", "not a field"), ("meta.nope", "not in 'meta'"), ("text.x", "not a mapping")]:
        with pytest.raises(KeyError, match=match):
            create_op("specified_field_filter", {"field_key": key, "target_value": [1]}).compute_stats(table)
    nulls = as_table(["a", "b"], meta=pa.array([{"s": "x"}, None]))
    op = create_op("specified_field_filter", {"field_key": "meta.s", "target_value": ["x"]})
    with pytest.raises(KeyError, match="null in 1 sample"):
        op.compute_stats(nulls)
    assert op.keep_mask(op.compute_stats(nulls.slice(0, 1))).to_pylist() == [True]
    # Without target values every row is kept, but the field is still read (and must exist).
    keep_all = create_op("specified_field_filter", {"field_key": "meta.q"})
    assert keep_all.keep_mask(keep_all.compute_stats(table)).to_pylist() == [True] * 4


def test_max_ratio_default_is_sys_maxsize() -> None:
    op = create_op("alphanumeric_filter", {})
    assert op.hi == sys.maxsize and op.lo == 0.25


@pytest.mark.parametrize("name", TEXT_OPS)
def test_empty_and_all_null_tables(name: str) -> None:
    assert run(name, {}, as_table([])) == ([], [])
    all_null = pa.table({"text": pa.nulls(3)})  # what a JSON reader yields for a column of nulls
    stats, _ = run(name, {}, all_null)
    assert stats == run(name, {}, as_table(["", "", ""]))[0]
