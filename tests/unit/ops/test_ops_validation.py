"""Recipe-time validation of the five text ops: names, types, ranges, regexes."""

from __future__ import annotations

import sys

import pytest

from airflow_provider_dj.ops.base import OpArgumentError
from airflow_provider_dj.ops.registry import create_op, get_op_class, op_names

OPS = [
    "clean_email_mapper",
    "whitespace_normalization_mapper",
    "words_num_filter",
    "text_length_filter",
    "document_deduplicator",
]


def validate(name: str, args: dict) -> None:
    get_op_class(name).validate_args(args)


def test_all_registered() -> None:
    assert set(OPS) <= set(op_names())


@pytest.mark.parametrize("name", OPS)
def test_defaults_validate_and_instantiate(name: str) -> None:
    validate(name, {})
    op = create_op(name, {})
    assert op.text_key == "text"


@pytest.mark.parametrize(
    "name,args,key,hint",
    [
        ("words_num_filter", {"min_nun": 3}, "min_nun", "'min_num'"),
        ("text_length_filter", {"maxlen": 3}, "maxlen", "'max_len'"),
        ("document_deduplicator", {"lower_case": True}, "lower_case", "'lowercase'"),
        ("clean_email_mapper", {"patern": "x"}, "patern", "'pattern'"),
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
        ("words_num_filter", {"min_num": "10"}, "min_num"),
        ("words_num_filter", {"max_num": 1.5}, "max_num"),
        ("words_num_filter", {"min_num": True}, "min_num"),
        ("words_num_filter", {"lang": 3}, "lang"),
        ("text_length_filter", {"min_len": None}, "min_len"),
        ("text_length_filter", {"reversed_range": "yes"}, "reversed_range"),
        ("document_deduplicator", {"lowercase": "true"}, "lowercase"),
        ("clean_email_mapper", {"pattern": 5}, "pattern"),
        ("clean_email_mapper", {"repl": None}, "repl"),
    ],
)
def test_wrong_type(name: str, args: dict, key: str) -> None:
    with pytest.raises(OpArgumentError) as err:
        validate(name, args)
    assert err.value.key == key


def test_optional_pattern_accepts_null() -> None:
    validate("clean_email_mapper", {"pattern": None})


@pytest.mark.parametrize(
    "name,args,key",
    [
        ("words_num_filter", {"min_num": 9, "max_num": 3}, "min_num"),
        ("words_num_filter", {"min_num": sys.maxsize, "max_num": 3}, "min_num"),
        ("text_length_filter", {"min_len": 50, "max_len": 49}, "min_len"),
        ("text_length_filter", {"max_len": 5}, "min_len"),  # default min_len 10 > 5
    ],
)
def test_min_greater_than_max(name: str, args: dict, key: str) -> None:
    with pytest.raises(OpArgumentError) as err:
        validate(name, args)
    assert err.value.key == key
    assert "greater than" in str(err.value)


def test_equal_bounds_are_fine() -> None:
    validate("text_length_filter", {"min_len": 7, "max_len": 7})


def test_tokenization_without_a_model_rejected(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    monkeypatch.setenv("DATA_JUICER_MODELS_CACHE", str(tmp_path))  # no zh.sp.model anywhere
    monkeypatch.delenv("DATA_JUICER_EXTERNAL_MODELS_HOME", raising=False)
    with pytest.raises(OpArgumentError) as err:
        validate("words_num_filter", {"tokenization": True, "lang": "zh"})
    assert err.value.key == "tokenization"
    assert "tokenization" in str(err.value) and "false" in str(err.value)
    validate("words_num_filter", {"tokenization": False})


@pytest.mark.parametrize("pattern", ["[a-z", "(?<=a", "a{2,1}", "\\p{NoSuchProperty}+@x"])
def test_bad_pattern(pattern: str) -> None:
    with pytest.raises(OpArgumentError) as err:
        validate("clean_email_mapper", {"pattern": pattern})
    assert err.value.key == "pattern"
    assert "fix the pattern" in str(err.value) and "at position" in str(err.value)


@pytest.mark.parametrize("pattern", ["(?<=a+)b", "\\p{L}+@x", "[\\p{L}\\p{N}]++@\\X"])
def test_regex_only_pattern_is_accepted(pattern: str) -> None:
    """Data-Juicer compiles with the ``regex`` package: variable-length lookbehind,
    Unicode properties, possessive quantifiers and \\X are valid there, so here too."""
    validate("clean_email_mapper", {"pattern": pattern})


def test_bad_repl_group_reference() -> None:
    with pytest.raises(OpArgumentError) as err:
        validate("clean_email_mapper", {"pattern": "(a)@", "repl": "\\2"})
    assert err.value.key == "repl"
    validate("clean_email_mapper", {"pattern": "(a)@", "repl": "\\1"})


def test_raw_wrapped_pattern_is_unwrapped() -> None:
    validate("clean_email_mapper", {"pattern": "r'[a-z]+@x\\.com'"})
    op = create_op("clean_email_mapper", {"pattern": 'r"[a-z]+@x\\.com"'})
    assert op.pattern == "[a-z]+@x\\.com"
    # too short to be a wrapper: kept as is (DJ needs len > 2)
    assert create_op("clean_email_mapper", {"pattern": "r'"}).pattern == "r'"


def test_common_args_accepted() -> None:
    validate("words_num_filter", {"text_key": "content", "batch_size": 100, "num_proc": 4})
    with pytest.raises(OpArgumentError):
        validate("words_num_filter", {"batch_size": "big"})


def test_arguments_and_defaults_reach_the_op() -> None:
    op = create_op("words_num_filter", {"min_num": 3, "reversed_range": True})
    assert (op.lo, op.hi, op.reversed_range, op.min_closed_interval) == (3, sys.maxsize, True, True)
    assert op.tokenization is False and op.lang == "en" and op.stat_key == "num_words"
    op = create_op("text_length_filter", {"max_len": 99, "max_closed_interval": False})
    assert (op.lo, op.hi, op.max_closed_interval) == (10, 99, False)
    assert "max_len" not in op.common_args  # the bounds are the filter's, not pass-through common arguments
    op = create_op("document_deduplicator", {"lowercase": True})
    assert (op.lowercase, op.ignore_non_character) == (True, False)
    a, b = create_op("clean_email_mapper", {"repl": "X"}), create_op("clean_email_mapper", {"repl": "Y"})
    assert (a.repl, b.repl) == ("X", "Y") and a.pattern == b.pattern
    assert create_op("clean_email_mapper", {}, text_key="body").text_key == "body"
