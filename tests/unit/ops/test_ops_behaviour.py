"""Behaviour of the five text ops beyond the DJ fixtures: nulls, chunking, stats merging."""

from __future__ import annotations

import random

import numpy as np
import pyarrow as pa
import pytest

from airflow_provider_dj.ops.base import STATS_COLUMN
from airflow_provider_dj.ops.dedup.exact import first_occurrence_mask
from airflow_provider_dj.ops.kernels.keys import first_occurrence_index
from airflow_provider_dj.ops.registry import create_op

ALPHABET = list("abcXYZ019 .-+_@@\t\n!,") + ["\u3000", "\xa0", "\u200b", "\x1c", "\x85", "Σ", "İ", "中", "🙂", "١"]


def random_rows(n: int, seed: int = 0) -> list[str | None]:
    rng = random.Random(seed)
    pool = ["john@example.com", "Hello World", "hello world", "  Hello World ", "a b c d e f g h i j k"]
    rows: list[str | None] = []
    for _ in range(n):
        r = rng.random()
        if r < 0.05:
            rows.append(None)
        elif r < 0.4:
            rows.append(rng.choice(pool))
        else:
            rows.append("".join(rng.choice(ALPHABET) for _ in range(rng.randint(0, 40))))
    return rows


def as_table(texts: list, chunk: int | None = None, **extra) -> pa.Table:
    t = pa.table({"id": list(range(len(texts))), "text": pa.array(texts, pa.string()), **extra})
    if chunk:
        t = pa.Table.from_batches(t.to_batches(max_chunksize=chunk), t.schema)
    return t


def run_op(name: str, args: dict, table: pa.Table) -> list:
    """A comparable, chunk-free view of what an op produces."""
    op = create_op(name, args)
    if op.kind == "mapper":
        return op.process_table(table).column("text").to_pylist()
    if op.kind == "filter":
        t = op.compute_stats(table)
        return list(zip(t.column(STATS_COLUMN).to_pylist(), op.keep_mask(t).to_pylist()))
    return [bytes(k) for k in op.compute_hash(table).to_pylist()]


CASES = [
    ("clean_email_mapper", {}),
    ("clean_email_mapper", {"pattern": "(?<=\\s)\\w+@", "repl": "<\\g<0>>"}),  # Python fallback path
    ("whitespace_normalization_mapper", {}),
    ("words_num_filter", {"min_num": 2, "max_num": 5}),
    ("text_length_filter", {"min_len": 3, "max_len": 30}),
    ("document_deduplicator", {"lowercase": True, "ignore_non_character": True}),
]


@pytest.mark.parametrize("name,args", CASES, ids=[f"{n}{i}" for i, (n, _) in enumerate(CASES)])
def test_chunking_does_not_change_results(name: str, args: dict) -> None:
    texts = random_rows(500)
    whole = run_op(name, args, as_table(texts))
    for chunk in (1, 7, 64):
        assert run_op(name, args, as_table(texts, chunk)) == whole
    # a slice of a bigger table (non-zero array offsets) behaves like a fresh table
    sliced = as_table(["pad"] * 3 + texts).slice(3)
    assert run_op(name, args, sliced) == whole


@pytest.mark.parametrize("name,args", CASES, ids=[f"{n}{i}" for i, (n, _) in enumerate(CASES)])
def test_empty_table(name: str, args: dict) -> None:
    assert run_op(name, args, as_table([])) == []


def test_large_string_column() -> None:
    t = pa.table({"text": pa.array([" a@b.com\u3000x ", None], pa.large_string())})
    out = create_op("whitespace_normalization_mapper", {}).process_table(
        create_op("clean_email_mapper", {}).process_table(t)
    )
    assert out.column("text").type == pa.large_string()
    assert out.column("text").to_pylist() == ["x", None]
    keys = create_op("document_deduplicator", {}).compute_hash(t)
    assert keys.type == pa.binary(16) and len(keys) == 2


def test_mappers_keep_null() -> None:
    t = as_table([None, "x@y.com  ", None])
    for name in ("clean_email_mapper", "whitespace_normalization_mapper"):
        assert create_op(name, {}).process_table(t).column("text").to_pylist()[0::2] == [None, None]
    fallback = create_op("clean_email_mapper", {"pattern": "(?=x)x@"})
    assert fallback.process_table(t).column("text").to_pylist() == [None, "y.com  ", None]


def test_mapper_keeps_other_columns_and_position() -> None:
    t = pa.table({"text": ["a@b.com hi"], "meta": [{"k": 1}], "id": [7]})
    out = create_op("clean_email_mapper", {}).process_table(t)
    assert out.column_names == ["text", "meta", "id"]
    assert out.to_pylist() == [{"text": " hi", "meta": {"k": 1}, "id": 7}]


def test_filters_treat_null_as_empty() -> None:
    t = as_table([None, "", "hello world"])
    words = create_op("words_num_filter", {"min_num": 0, "max_num": 1})
    lens = create_op("text_length_filter", {"min_len": 0, "max_len": 0})
    tw = words.compute_stats(t)
    assert [s["num_words"] for s in tw.column(STATS_COLUMN).to_pylist()] == [0, 0, 2]
    assert words.keep_mask(tw).to_pylist() == [True, True, False]
    tl = lens.compute_stats(t)
    assert [s["text_len"] for s in tl.column(STATS_COLUMN).to_pylist()] == [0, 0, 11]
    assert lens.keep_mask(tl).to_pylist() == [True, True, False]


def test_all_null_text_column() -> None:
    t = pa.table({"text": pa.nulls(3)})
    assert create_op("text_length_filter", {"min_len": 0}).keep_mask(t).to_pylist() == [True] * 3
    assert create_op("whitespace_normalization_mapper", {}).process_table(t).column("text").null_count == 3


def test_dedup_null_is_empty_text() -> None:
    keys = create_op("document_deduplicator", {}).compute_hash(as_table([None, "", "  \n", "x"]))
    assert first_occurrence_mask(keys).tolist() == [True, False, False, True]


def test_stats_are_merged_and_reused() -> None:
    t = as_table(["one two three", "x"])
    t = create_op("text_length_filter", {"min_len": 0}).compute_stats(t)
    t = create_op("words_num_filter", {"min_num": 0}).compute_stats(t)
    stats = t.column(STATS_COLUMN)
    assert stats.type == pa.struct([("text_len", pa.int64()), ("num_words", pa.int64())])
    assert stats.to_pylist() == [{"text_len": 13, "num_words": 3}, {"text_len": 1, "num_words": 1}]
    assert t.column_names == ["id", "text", STATS_COLUMN]

    # a precomputed value is reused like DJ does (it skips rows that already have the key),
    # a missing one (null field or null struct) is computed.
    pre = pa.array(
        [{"text_len": 100, "other": 1.5}, {"text_len": None, "other": 2.0}, None],
        pa.struct([("text_len", pa.int64()), ("other", pa.float64())]),
    )
    t = as_table(["ab", "abc", "abcd"], **{STATS_COLUMN: pre})
    op = create_op("text_length_filter", {"min_len": 3, "max_len": 50})
    out = op.compute_stats(t)
    assert out.column(STATS_COLUMN).to_pylist() == [
        {"other": 1.5, "text_len": 100},
        {"other": 2.0, "text_len": 3},
        {"other": None, "text_len": 4},
    ]
    assert op.keep_mask(out).to_pylist() == [False, True, True]
    # keep_mask computes what is missing itself
    assert op.keep_mask(as_table(["ab", "abc"])).to_pylist() == [False, True]


def test_missing_text_column() -> None:
    with pytest.raises(KeyError, match="content"):
        create_op("text_length_filter", {}, text_key="content").compute_stats(as_table(["x"]))


def test_custom_text_key() -> None:
    t = pa.table({"body": ["  x@y.com z  "], "text": ["untouched"]})
    out = create_op("clean_email_mapper", {"text_key": "body"}).process_table(t)
    assert out.to_pylist() == [{"body": "   z  ", "text": "untouched"}]


@pytest.mark.parametrize(
    "args,expected",
    [
        ({}, [False, True, True, True, False]),
        ({"min_closed_interval": False}, [False, False, True, True, False]),
        ({"max_closed_interval": False}, [False, True, True, False, False]),
        # DJ flips closedness then negates: the bounds themselves are kept
        ({"reversed_range": True}, [True, True, False, True, True]),
        ({"reversed_range": True, "min_closed_interval": False}, [True, False, False, True, True]),
    ],
)
def test_range_flags(args: dict, expected: list[bool]) -> None:
    op = create_op("text_length_filter", {"min_len": 2, "max_len": 4, **args})
    assert op.keep_mask(as_table(["a", "ab", "abc", "abcd", "abcde"])).to_pylist() == expected


def test_whitespace_strip_is_python_strip() -> None:
    texts = ["\x1c\x1d\x1e\x1fa\x85", "\u200ba\u200b", "\ufeffa", "\u3000a\u2028", "\t\n\x0b\x0c\r"]
    out = create_op("whitespace_normalization_mapper", {}).process_table(as_table(texts))
    assert out.column("text").to_pylist() == [" a".strip(), " a ", "\ufeffa", "a", ""]


def test_words_count_edge_cases() -> None:
    texts = ["42 -- 🙂 ...", "a\u3000b", "x1 1x", "l'été", "a\rb c\x1cd", "中文没有空格"]
    t = create_op("words_num_filter", {"min_num": 0}).compute_stats(as_table(texts))
    assert [s["num_words"] for s in t.column(STATS_COLUMN).to_pylist()] == [0, 1, 2, 1, 2, 1]


def test_dedup_normalization() -> None:
    op = create_op("document_deduplicator", {"lowercase": True, "ignore_non_character": True})
    got = op.normalize(as_table(["ΟΔΟΣ ΚΑΙ", "İx", " A-1b\u3000c\x1c ", "Ab，c"])).to_pylist()
    assert got == ["οδοςκαι", "i\u0307x", "abc", "ab，c"]
    assert create_op("document_deduplicator", {}).normalize(as_table([" Ab \n"])).to_pylist() == ["Ab"]


def test_first_occurrence_mask_inputs() -> None:
    keys = pa.array([bytes([i % 3]) * 16 for i in range(10)], pa.binary(16))
    expected = [True, True, True] + [False] * 7
    assert first_occurrence_mask(keys).tolist() == expected
    parts = [keys.slice(0, 2), pa.chunked_array([keys.slice(2, 5), keys.slice(7)])]
    assert first_occurrence_mask(parts).tolist() == expected
    assert first_occurrence_mask([]).tolist() == []
    assert first_occurrence_mask(pa.array([], pa.binary(16))).dtype == np.bool_
    with pytest.raises(TypeError):
        first_occurrence_mask(pa.array([1, 2]))


def test_null_keys_are_never_duplicates() -> None:
    """A null key (a row image_deduplicator never removes) is kept and matches nothing, not even
    another null; the other keys decide as if the null rows were not there."""
    a, b = b"a" * 16, b"b" * 16
    keys = pa.array([None, a, None, a, b, None, b, a], pa.binary(16))
    assert first_occurrence_mask(keys).tolist() == [True, True, True, False, True, True, False, False]
    assert first_occurrence_index(keys).tolist() == [0, 1, 2, 1, 4, 5, 4, 1]
    parts = [keys.slice(0, 3), keys.slice(3)]
    assert first_occurrence_mask(parts).tolist() == first_occurrence_mask(keys).tolist()
    assert first_occurrence_mask(pa.array([None, None], pa.binary(16))).tolist() == [True, True]


def test_first_occurrence_mask_matches_python() -> None:
    rng = np.random.default_rng(1)
    raw = rng.integers(0, 300, size=(5000, 2)).astype("<u8")
    keys = pa.FixedSizeBinaryArray.from_buffers(pa.binary(16), len(raw), [None, pa.py_buffer(raw.tobytes())])
    seen: set = set()
    expected = []
    for row in map(tuple, raw):
        expected.append(row not in seen)
        seen.add(row)
    assert first_occurrence_mask(keys).tolist() == expected
