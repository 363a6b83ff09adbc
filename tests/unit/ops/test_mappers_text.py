"""Unit tests for the text mappers of ``mappers_text`` and ``mappers_web``.

DJ equivalence itself is checked by tests/conformance; here: recipe-time
validation, nulls, chunking independence, column types, and the shortcuts
(RE2 pre-filters, the marked-link path) that must never change a result.
"""

from __future__ import annotations

import random

import ftfy
import pyarrow as pa
import pytest
from selectolax.lexbor import LexborHTMLParser

from airflow_provider_dj.ops.base import OpArgumentError
from airflow_provider_dj.ops.mappers import text as mt
from airflow_provider_dj.ops.mappers import web as mm
from airflow_provider_dj.ops.registry import create_op, get_op_class, op_names

OPS = [
    "clean_links_mapper",
    "clean_html_mapper",
    "clean_ip_mapper",
    "clean_copyright_mapper",
    "fix_unicode_mapper",
    "punctuation_normalization_mapper",
    "remove_long_words_mapper",
    "remove_repeat_sentences_mapper",
    "lowercase_mapper",
]

# One entry per code path worth exercising (fast kernels and Python fallbacks).
CASES = [
    ("clean_links_mapper", {}),
    ("clean_links_mapper", {"repl": "<\\1>"}),  # RE2 finds, Python expands
    ("clean_links_mapper", {"pattern": "\\bwww\\.\\w+", "repl": "W"}),  # Python re
    ("clean_ip_mapper", {}),
    ("clean_ip_mapper", {"repl": "[\\g<0>]"}),
    ("clean_html_mapper", {}),
    ("clean_copyright_mapper", {}),
    ("fix_unicode_mapper", {}),
    ("fix_unicode_mapper", {"normalization": "nfkc"}),
    ("punctuation_normalization_mapper", {}),
    ("remove_long_words_mapper", {"min_len": 2, "max_len": 6}),
    ("remove_repeat_sentences_mapper", {}),
    ("remove_repeat_sentences_mapper", {"lowercase": True, "min_repeat_sentence_length": 0}),
    ("remove_repeat_sentences_mapper", {"tokenizer": "lambda t: t.split('. ')"}),
    ("lowercase_mapper", {}),
]
CASE_IDS = [f"{n}{i}" for i, (n, _) in enumerate(CASES)]

PIECES = [
    "http://a.com/x", "www.b.org/y(z)", "é.c.net/p", "192.168.0.1", "256.1.1.1", "2001:db8:0:0:0:0:2:1",
    "<p>", "</li>", "<li>", "&amp;", "/* Copyright */", "// c\n", "# h\n", "Ã©tÃ©", "“q”", "，", "。", "…",
    "１", "Hello world.", "hello world!", "你好。", "superlongword", "\t", "\n", "  ", "\r\n", "İ", "Σ", "\x00",
    "\ue000", "🙂", "word", ".", "?",
]  # fmt: skip


def random_rows(n: int, seed: int = 0) -> list[str | None]:
    rng = random.Random(seed)
    rows: list[str | None] = []
    for _ in range(n):
        if rng.random() < 0.07:
            rows.append(None)
        else:
            rows.append("".join(rng.choice(PIECES) + rng.choice(["", " "]) for _ in range(rng.randint(0, 12))))
    return rows


def as_table(texts: list, chunk: int | None = None, typ: pa.DataType = pa.string()) -> pa.Table:
    t = pa.table({"id": list(range(len(texts))), "text": pa.array(texts, typ)})
    if chunk:
        t = pa.Table.from_batches(t.to_batches(max_chunksize=chunk), t.schema)
    return t


def run(name: str, args: dict, table: pa.Table) -> list:
    return create_op(name, args).process_table(table).column("text").to_pylist()


# --- validation -----------------------------------------------------------------
def test_all_registered() -> None:
    assert set(OPS) <= set(op_names())


@pytest.mark.parametrize("name", OPS)
def test_defaults_validate_and_instantiate(name: str) -> None:
    get_op_class(name).validate_args({})
    op = create_op(name, {})
    assert op.text_key == "text"


def test_lowercase_mapper_says_it_is_ours() -> None:
    assert "this project's own" in (mt.LowercaseMapper.__doc__ or "")


@pytest.mark.parametrize(
    "name,args,key,hint",
    [
        ("clean_links_mapper", {"patern": "x"}, "patern", "'pattern'"),
        ("clean_ip_mapper", {"rep": "x"}, "rep", "'repl'"),
        ("remove_long_words_mapper", {"max_length": 3}, "max_length", "'max_len'"),
        ("remove_repeat_sentences_mapper", {"lower_case": True}, "lower_case", "'lowercase'"),
        ("remove_repeat_sentences_mapper", {"min_repeat_sentence_len": 3}, "min_repeat_sentence_len",
         "'min_repeat_sentence_length'"),
        ("fix_unicode_mapper", {"normalisation": "NFC"}, "normalisation", "'normalization'"),
        ("lowercase_mapper", {"text_keys": "t"}, "text_keys", "'text_key'"),
    ],
)  # fmt: skip
def test_unknown_argument_suggests(name: str, args: dict, key: str, hint: str) -> None:
    with pytest.raises(OpArgumentError) as err:
        get_op_class(name).validate_args(args)
    assert err.value.key == key
    assert f"Did you mean {hint}" in str(err.value)


@pytest.mark.parametrize(
    "name,args,key",
    [
        ("clean_links_mapper", {"pattern": 3}, "pattern"),
        ("clean_ip_mapper", {"repl": None}, "repl"),
        ("fix_unicode_mapper", {"normalization": 5}, "normalization"),
        ("remove_long_words_mapper", {"min_len": "3"}, "min_len"),
        ("remove_long_words_mapper", {"max_len": 2.5}, "max_len"),
        ("remove_long_words_mapper", {"min_len": True}, "min_len"),
        ("remove_repeat_sentences_mapper", {"lowercase": "yes"}, "lowercase"),
        ("remove_repeat_sentences_mapper", {"ignore_special_character": 1}, "ignore_special_character"),
        ("remove_repeat_sentences_mapper", {"min_repeat_sentence_length": 1.5}, "min_repeat_sentence_length"),
        ("remove_repeat_sentences_mapper", {"tokenizer": 3}, "tokenizer"),
        ("clean_html_mapper", {"text_key": 1}, "text_key"),
    ],
)
def test_wrong_type(name: str, args: dict, key: str) -> None:
    with pytest.raises(OpArgumentError) as err:
        get_op_class(name).validate_args(args)
    assert err.value.key == key


@pytest.mark.parametrize(
    "name,args,key",
    [
        ("fix_unicode_mapper", {"normalization": "NFX"}, "normalization"),
        ("remove_long_words_mapper", {"min_len": 9, "max_len": 3}, "min_len"),
        ("remove_repeat_sentences_mapper", {"tokenizer": "text.split('.')"}, "tokenizer"),
        ("remove_repeat_sentences_mapper", {"tokenizer": "lambda a, b: a"}, "tokenizer"),
        ("remove_repeat_sentences_mapper", {"tokenizer": "lambda t: ("}, "tokenizer"),
        ("clean_links_mapper", {"pattern": "\\p{NoSuchProperty}+"}, "pattern"),  # \p{L} itself is valid (regex)
        ("clean_ip_mapper", {"repl": "\\3"}, "repl"),  # the default pattern has one group
        ("clean_links_mapper", {"repl": "\\9"}, "repl"),  # ... and this one five
    ],
)
def test_bad_values(name: str, args: dict, key: str) -> None:
    with pytest.raises(OpArgumentError) as err:
        get_op_class(name).validate_args(args)
    assert err.value.key == key


@pytest.mark.parametrize(
    "name,args",
    [
        ("fix_unicode_mapper", {"normalization": None}),
        ("fix_unicode_mapper", {"normalization": ""}),
        ("fix_unicode_mapper", {"normalization": "nfkd"}),
        ("clean_links_mapper", {"pattern": None, "repl": "\\5"}),
        ("clean_ip_mapper", {"pattern": "r'(\\d+)\\.(\\d+)'", "repl": "\\2.\\1"}),
        ("remove_long_words_mapper", {"min_len": 3, "max_len": 3}),
        ("remove_repeat_sentences_mapper", {"tokenizer": None}),
    ],
)
def test_valid_values(name: str, args: dict) -> None:
    get_op_class(name).validate_args(args)
    create_op(name, args)


def test_arguments_reach_the_op_normalized() -> None:
    assert create_op("remove_long_words_mapper", {"max_len": 5}).max_len == 5
    assert create_op("fix_unicode_mapper", {"normalization": "nfc"}).normalization == "NFC"
    assert create_op("clean_links_mapper", {"pattern": "r'x+'"}).pattern == "x+"


# --- behaviour ------------------------------------------------------------------
@pytest.mark.parametrize("name,args", CASES, ids=CASE_IDS)
def test_chunking_does_not_change_results(name: str, args: dict) -> None:
    texts = random_rows(400)
    whole = run(name, args, as_table(texts))
    assert len(whole) == len(texts)
    for chunk in (1, 7, 64):
        assert run(name, args, as_table(texts, chunk)) == whole
    sliced = as_table(["pad"] * 3 + texts).slice(3)  # non-zero array offsets
    assert run(name, args, sliced) == whole


@pytest.mark.parametrize("name,args", CASES, ids=CASE_IDS)
def test_nulls_stay_null_and_other_columns_untouched(name: str, args: dict) -> None:
    texts = [None, "Hello. Hello. http://a.com/x 1.2.3.4", None, "", None]
    table = as_table(texts).append_column("meta", pa.array([1, 2, 3, 4, 5]))
    out = create_op(name, args).process_table(table)
    got = out.column("text").to_pylist()
    assert [g is None for g in got] == [t is None for t in texts]
    assert out.column("meta").to_pylist() == [1, 2, 3, 4, 5]
    assert out.column_names == table.column_names
    assert run(name, args, as_table([None, None])) == [None, None]
    assert run(name, args, pa.table({"text": pa.nulls(2)})) == [None, None]


@pytest.mark.parametrize("name,args", CASES, ids=CASE_IDS)
def test_empty_table_and_large_strings(name: str, args: dict) -> None:
    assert run(name, args, as_table([])) == []
    texts = random_rows(60, seed=3)
    out = create_op(name, args).process_table(as_table(texts, typ=pa.large_string()))
    assert out.schema.field("text").type == pa.large_string()
    assert out.column("text").to_pylist() == run(name, args, as_table(texts))


def test_missing_text_key() -> None:
    with pytest.raises(KeyError):
        create_op("lowercase_mapper", {"text_key": "body"}).process_table(as_table(["x"]))


def test_custom_text_key() -> None:
    t = pa.table({"body": ["<b>Hi</b>"], "text": ["<b>keep</b>"]})
    out = create_op("clean_html_mapper", {"text_key": "body"}).process_table(t)
    assert out.to_pylist() == [{"body": "Hi", "text": "<b>keep</b>"}]


# --- documented DJ quirks, spelled out ---------------------------------------------
@pytest.mark.parametrize(
    "name,args,text,expected",
    [
        ("clean_ip_mapper", {}, "256.1.1.1", "2"),
        ("clean_ip_mapper", {}, "1.2.3.4567", "67"),
        ("clean_links_mapper", {}, "caf\u00e9.example.com/menu!", "caf\u00e9!"),
        ("clean_links_mapper", {}, "see example.com alone", "see example.com alone"),
        ("clean_copyright_mapper", {}, "/* MIT */\n/* Copyright */\nx", "/* MIT */\n/* Copyright */\nx"),
        ("clean_copyright_mapper", {}, "# a\n# b", ""),
        ("punctuation_normalization_mapper", {}, "\uff11\u2014\uff0e", '" - . '),
        ("remove_long_words_mapper", {}, "  a   b\t\t\n\nc ", "a b\nc"),
        ("remove_long_words_mapper", {"max_len": 4}, "(((word)))", "(((word)))"),
        ("remove_repeat_sentences_mapper", {}, "Hello world. Hello, world!\n\nHello world.", "Hello world.\n\n"),
        ("remove_repeat_sentences_mapper", {}, "A. A.", "A. A."),
        ("fix_unicode_mapper", {}, "&amp;\n<b>\n&amp;", "&\n<b>\n&amp;"),
        ("lowercase_mapper", {}, "\u0130\u03a3A\u03a3", "i\u0307\u03c3a\u03c2"),
    ],
)
def test_quirks(name: str, args: dict, text: str, expected: str) -> None:
    assert run(name, args, as_table([text])) == [expected]


# --- shortcuts never change results -------------------------------------------------
def _random_text(rng: random.Random, alphabet: list[str], n: int) -> str:
    return "".join(rng.choice(alphabet) for _ in range(rng.randint(0, n)))


def test_ftfy_skip_set_is_inert() -> None:
    """Rows fix_unicode_mapper skips are ones ftfy returns unchanged, in every form."""
    rng = random.Random(11)
    inert = ["\t", "\n", "\x0c"] + [chr(c) for c in range(0x20, 0x7F) if chr(c) != "&"]
    words = ["Ã", "Â", "lt;", "amp", "#39;", "\\x1b", "\u00a0"]  # harmless when spelled in ASCII
    alphabet = inert + [w for w in words if w.isascii()]
    samples = [_random_text(rng, alphabet, 40) for _ in range(3000)]
    op = create_op("fix_unicode_mapper", {})
    skipped = [s for s, m in zip(samples, op._skip_mask(pa.array(samples)).to_pylist()) if m]
    assert len(skipped) == len(samples)
    for form in ("NFC", "NFKC", "NFD", "NFKD"):
        assert all(ftfy.fix_text(s, normalization=form) == s for s in skipped)
    assert not any(op._skip_mask(pa.array(["a&b", "a\rb", "\x1b[0m", "caf\u00e9", "x\x7f"])).to_pylist())


def test_html_skip_set_is_inert() -> None:
    rng = random.Random(12)
    alphabet = list("ab Z09.,;:!?>/=\"'\t\n\x0b\x0c\x7f\x01")
    alphabet += ["\u00e9", "\u4e2d", "\U0001f642", "\ufeff", "\u3000", "\xa0", "\u2028", "\x85", "\ufffd", "\U0010ffff"]
    samples = [_random_text(rng, alphabet, 30) for _ in range(5000)]
    mask = mm._html_active(pa.array(samples)).to_pylist()
    skipped = [s for s, active in zip(samples, mask) if not active]
    assert len(skipped) > 1000
    assert all(LexborHTMLParser(s).text() == s for s in skipped)


def test_links_marked_path_matches_python_search() -> None:
    """The RE2-marks + fullmatch path equals a plain Python search, groups included."""
    rng = random.Random(13)
    pieces = ["http://", "www.", "a.com/", ".b.org/", "-c.net/", "x", "(y)", "(", ")", "z", "/", ".", ",", " "]
    pieces += ["\u00e9", "\u0301", "_", "\u212a", "\u0130", "\u3000", ":", "%", "?", "\u201d", "ftp:", "<", "\ue000"]
    texts = ["".join(rng.choice(pieces) for _ in range(rng.randint(0, 16))) for _ in range(3000)]
    repl = "<\\g<0>|\\1|\\2|\\3|\\4|\\5>"
    search = mm.links_python_pattern()
    assert run("clean_links_mapper", {"repl": repl}, as_table(texts)) == [search.sub(repl, t) for t in texts]
    plain = [search.sub("#", t) for t in texts]
    assert run("clean_links_mapper", {"repl": "#"}, as_table(texts)) == plain


def test_links_python_pattern_does_not_backtrack_exponentially() -> None:
    texts = ["see http://a" + "." * 60 + " end", "http://x(" + "a" * 60, "http://" + "(a)" * 40 + "!"]
    assert run("clean_links_mapper", {"repl": "<\\1>"}, as_table(texts)) == [
        "see <http://a>" + "." * 60 + " end",
        "<http://x>(" + "a" * 60,
        "<http://" + "(a)" * 40 + ">!",
    ]
