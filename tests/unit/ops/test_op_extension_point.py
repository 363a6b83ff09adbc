"""The op extension point: what a new mapper, filter or deduplicator must write.

The kinds are abstract classes, so an op missing a required method fails
where it is built (a TypeError naming the method), not in the middle of a
run when the engine first calls it.
"""

from __future__ import annotations

import sys

import numpy as np
import pyarrow as pa
import pytest

from airflow_provider_dj.ops.base import (
    STATS_COLUMN,
    Deduplicator,
    Filter,
    Mapper,
    OpArgumentError,
    SignatureDeduplicator,
)
from airflow_provider_dj.ops.filters.stat_range import INTERVAL_FLAGS, RangeFilter, StatBounds, StatRangeFilter
from airflow_provider_dj.ops.registry import get_op_class


class _StatsOnlyFilter(Filter):
    name = "test_stats_only_filter"

    def compute_stats(self, table: pa.Table) -> pa.Table:
        return table


class _NoProcessMapper(Mapper):
    name = "test_no_process_mapper"


class _SignaturesOnly(SignatureDeduplicator):
    name = "test_signatures_only"

    def compute_hash(self, table: pa.Table) -> pa.Table:
        return pa.table({"sig": pa.array(range(table.num_rows), pa.int64())})


class _KeepFirstOfEachSignature(_SignaturesOnly):
    name = "test_keep_first_of_each_signature"

    def resolve_global(self, tables: list[pa.Table]) -> np.ndarray:
        sigs = np.concatenate([t.column("sig").to_numpy() for t in tables])
        _, first = np.unique(sigs, return_index=True)
        keep = np.zeros(len(sigs), bool)
        keep[first] = True
        return keep


@pytest.mark.parametrize(
    ("cls", "missing"),
    [(_StatsOnlyFilter, "keep_mask"), (_NoProcessMapper, "process_table"), (_SignaturesOnly, "resolve_global")],
)
def test_an_op_missing_a_required_method_cannot_be_built(cls: type, missing: str) -> None:
    with pytest.raises(TypeError, match=missing):
        cls()


def test_a_signature_deduplicator_needs_only_its_two_phases() -> None:
    op = _KeepFirstOfEachSignature()
    parts = [pa.table({"sig": [1, 2]}), pa.table({"sig": [2, 3, 1]})]
    assert op.resolve_global(parts).tolist() == [True, True, False, True, False]
    assert op.duplicate_representatives(parts) is None  # the tracer then names no kept partner
    assert op.is_global and op.kind == "deduplicator"


def test_builtin_deduplicators_declare_their_global_phase() -> None:
    """The engine picks the global phase by class: key equality, or the op's own resolve_global."""
    exact = get_op_class("document_deduplicator")
    assert issubclass(exact, Deduplicator) and not issubclass(exact, SignatureDeduplicator)
    for name in ("document_minhash_deduplicator", "document_simhash_deduplicator"):
        assert issubclass(get_op_class(name), SignatureDeduplicator), name


# --- range filters: a statistic and its bounds, nothing else -----------------------
class _DigitCountFilter(StatRangeFilter):
    """A filter written the way the extension point intends: bounds declared once, one statistic."""

    name = "test_digit_count_filter"
    bounds = StatBounds("num_digits", pa.int64(), int, min=("min_digits", 1), max=("max_digits", 3), after="lang")

    def __init__(self, *, lang: str = "en", text_key: str = "text", **common) -> None:
        super().__init__(text_key=text_key, **common)
        self.lang = lang

    def compute_stat(self, table: pa.Table) -> pa.Array:
        return pa.array([sum(c.isdigit() for c in t or "") for t in table.column(self.text_key).to_pylist()])


DIGITS = pa.table({"text": ["none", "1", "12", "123", "1234", None]})  # 0, 1, 2, 3, 4, 0 digits


def _kept(args: dict) -> list[bool]:
    _DigitCountFilter.validate_args(args)
    op = _DigitCountFilter(**args)
    return op.keep_mask(op.compute_stats(DIGITS)).to_pylist()


def test_the_base_builds_the_arguments_in_data_juicers_order() -> None:
    args = _DigitCountFilter.own_args()
    assert list(args) == ["lang", "min_digits", "max_digits", *INTERVAL_FLAGS, "text_key"]
    assert [(args[k].default, args[k].annotation) for k in ("min_digits", "max_digits")] == [(1, "int"), (3, "int")]
    assert _DigitCountFilter.arg_types()["min_digits"] is int
    assert _DigitCountFilter.arg_types()["reversed_range"] is bool


@pytest.mark.parametrize(
    ("args", "kept"),
    [
        ({}, [False, True, True, True, False, False]),
        ({"min_closed_interval": False}, [False, False, True, True, False, False]),
        ({"max_closed_interval": False}, [False, True, True, False, False, False]),
        # DJ flips both flags before negating: the bounds themselves are kept.
        ({"reversed_range": True}, [True, True, False, True, True, True]),
        ({"min_digits": 0, "max_digits": 0}, [True, False, False, False, False, True]),
    ],
)
def test_the_base_keeps_rows_within_the_bounds(args: dict, kept: list[bool]) -> None:
    assert _kept(args) == kept


def test_the_base_validates_the_bounds() -> None:
    with pytest.raises(OpArgumentError, match="min_digits=4 is greater than max_digits=3") as err:
        _DigitCountFilter.validate_args({"min_digits": 4})
    assert err.value.key == "min_digits"
    with pytest.raises(OpArgumentError, match="must be int"):
        _DigitCountFilter.validate_args({"max_digits": "3"})
    with pytest.raises(OpArgumentError, match="must be bool"):
        _DigitCountFilter.validate_args({"reversed_range": "yes"})


def test_the_base_stores_the_statistic_and_reuses_one_already_there() -> None:
    op = _DigitCountFilter()
    assert [s["num_digits"] for s in op.compute_stats(DIGITS).column(STATS_COLUMN).to_pylist()] == [0, 1, 2, 3, 4, 0]
    seeded = DIGITS.append_column(STATS_COLUMN, pa.array([{"num_digits": 9}] * 6))
    assert op.keep_mask(op.compute_stats(seeded)).to_pylist() == [False] * 6


def test_a_lower_bound_alone_has_no_upper_test() -> None:
    class _AtLeastDigits(_DigitCountFilter):
        name = "test_at_least_digits"
        bounds = StatBounds("num_digits", pa.int64(), int, min=("min_digits", 2))

    op = _AtLeastDigits()
    assert "max_digits" not in _AtLeastDigits.own_args() and op.hi is None
    assert op.keep_mask(DIGITS).to_pylist() == [False, False, True, True, True, False]


def test_every_builtin_range_filter_declares_its_bounds_once() -> None:
    """Data-Juicer's argument names and defaults, as recipes write them."""
    want = {
        "words_num_filter": {"min_num": 10, "max_num": sys.maxsize},
        "text_length_filter": {"min_len": 10, "max_len": sys.maxsize},
        "alphanumeric_filter": {"min_ratio": 0.25, "max_ratio": sys.maxsize},
        "special_characters_filter": {"min_ratio": 0.0, "max_ratio": 0.25},
        "average_line_length_filter": {"min_len": 10, "max_len": sys.maxsize},
        "maximum_line_length_filter": {"min_len": 10, "max_len": sys.maxsize},
        "character_repetition_filter": {"min_ratio": 0.0, "max_ratio": 0.5},
        "word_repetition_filter": {"min_ratio": 0.0, "max_ratio": 0.5},
        "flagged_words_filter": {"min_ratio": 0.0, "max_ratio": 0.045},
        "stopwords_filter": {"min_ratio": 0.3, "max_ratio": 1.0},
        "perplexity_filter": {"min_ppl": 0, "max_ppl": 1500},
        "language_id_score_filter": {"min_score": 0.8},
    }
    for name, bounds in want.items():
        cls = get_op_class(name)
        assert issubclass(cls, RangeFilter), name
        assert cls.bounds.defaults() == bounds, name
        own = cls.own_args()
        assert {k: own[k].default for k in bounds} == bounds, name
        assert {k: own[k].default for k in INTERVAL_FLAGS} == INTERVAL_FLAGS, name
