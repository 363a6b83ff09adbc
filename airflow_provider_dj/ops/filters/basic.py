"""Text filters with Data-Juicer 1.6.1's names, arguments, stats and ranges.

``compute_stats`` writes an int64 field into ``__dj__stats__`` (reusing an
existing value like DJ does); ``keep_mask`` applies DJ's range test.  Null
texts count as '' (length 0, zero words), so they are kept or dropped by the
same rule as an empty string instead of failing the run.

Besides their own arguments, DJ filters accept ``min_closed_interval``,
``max_closed_interval`` and ``reversed_range`` (from its Filter base class);
they are accepted here too so DJ recipes using them validate and behave the
same.  DJ's reversal first flips both closedness flags and then negates the
test, so ``reversed_range`` with default flags keeps ``v <= min or v >= max``
(the bounds themselves are kept) -- reproduced as is.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from airflow_provider_dj.ops.base import Filter, OpArgumentError
from airflow_provider_dj.ops.kernels.text import count_words, text_array
from airflow_provider_dj.ops.kernels.tokenizers import (
    load_sentencepiece,
    piece_words,
    require_sentencepiece,
)
from airflow_provider_dj.ops.registry import register
from airflow_provider_dj.ops.stats import ensure_stat, get_stat


class _RangeFilter(Filter):
    """One int64 statistic kept when it lies in [min, max] (DJ's get_keep_boolean)."""

    stat_key = ""
    min_arg = ""
    max_arg = ""

    def _init_range(self, lo: int, hi: int, min_closed: bool, max_closed: bool, reversed_range: bool) -> None:
        self.lo, self.hi = lo, hi
        self.min_closed_interval, self.max_closed_interval = min_closed, max_closed
        self.reversed_range = reversed_range

    @classmethod
    def check_values(cls, args: dict[str, Any]) -> None:
        defaults = {k: p.default for k, p in cls.own_args().items()}
        lo = args.get(cls.min_arg, defaults[cls.min_arg])
        hi = args.get(cls.max_arg, defaults[cls.max_arg])
        if lo > hi:
            raise OpArgumentError(
                cls.min_arg,
                f"{cls.name}: {cls.min_arg}={lo} is greater than {cls.max_arg}={hi}, so every sample "
                f"would be dropped; lower {cls.min_arg} or raise {cls.max_arg}",
            )

    def _compute(self, table: pa.Table) -> pa.Array:  # pragma: no cover - abstract
        raise NotImplementedError

    def compute_stats(self, table: pa.Table) -> pa.Table:
        return ensure_stat(table, self.stat_key, lambda: self._compute(table), pa.int64())

    def keep_mask(self, table: pa.Table) -> pa.BooleanArray:
        values = get_stat(table, self.stat_key)
        if values is None or values.null_count:
            values = get_stat(self.compute_stats(table), self.stat_key)
        v = values.to_numpy(zero_copy_only=False)
        # DJ flips both closedness flags when reversing, then negates.
        min_closed = self.min_closed_interval != self.reversed_range
        max_closed = self.max_closed_interval != self.reversed_range
        keep = (v >= self.lo) if min_closed else (v > self.lo)
        keep &= (v <= self.hi) if max_closed else (v < self.hi)
        if self.reversed_range:
            keep = ~keep
        return pa.array(np.asarray(keep, dtype=bool), pa.bool_())


@register
class WordsNumFilter(_RangeFilter):
    """Keep samples whose word count (stat ``num_words``) is in [min_num, max_num].

    A word is a piece of the text split on ' ', '\\n' and '\\t' that still has
    a character left after DJ's SPECIAL_CHARACTERS (punctuation, ASCII digits,
    whitespace, emoji and a list of symbols) are stripped from its ends -- so
    "42", "--" and "🙂" are not words, and a CJK sentence without spaces is
    one word.  With ``tokenization: true`` the pieces of the SentencePiece
    model ``{lang}.sp.model`` (looked up like every DJ model, never
    downloaded: a missing one fails validation with where to put it) are
    the words instead, stripped the same way; a piece made of "▁" alone
    still counts, as in DJ.
    """

    name = "words_num_filter"
    stat_key = "num_words"
    min_arg, max_arg = "min_num", "max_num"

    def __init__(
        self,
        *,
        lang: str = "en",
        tokenization: bool = False,
        min_num: int = 10,
        max_num: int = sys.maxsize,
        min_closed_interval: bool = True,
        max_closed_interval: bool = True,
        reversed_range: bool = False,
        text_key: str = "text",
        **common: Any,
    ) -> None:
        super().__init__(text_key=text_key, **common)
        self.lang = lang
        self.tokenization = tokenization
        self.model_path = require_sentencepiece(lang, op=self.name) if tokenization else None
        self._init_range(min_num, max_num, min_closed_interval, max_closed_interval, reversed_range)

    @classmethod
    def check_values(cls, args: dict[str, Any]) -> None:
        if args.get("tokenization"):
            require_sentencepiece(args.get("lang", "en"), op=cls.name)  # found; loaded on first use
        super().check_values(args)

    def _compute(self, table: pa.Table) -> pa.Array:
        if self.model_path is None:
            return count_words(text_array(table, self.text_key))
        _, starts = piece_words(load_sentencepiece(self.model_path), text_array(table, self.text_key), lower=False)
        return pa.array(np.diff(starts), pa.int64())


@register
class TextLengthFilter(_RangeFilter):
    """Keep samples whose length in characters (stat ``text_len``) is in [min_len, max_len].

    Length is Python's ``len(str)``: Unicode code points, not bytes and not
    grapheme clusters (an emoji with a skin-tone modifier counts 2).
    """

    name = "text_length_filter"
    stat_key = "text_len"
    min_arg, max_arg = "min_len", "max_len"

    def __init__(
        self,
        *,
        min_len: int = 10,
        max_len: int = sys.maxsize,
        min_closed_interval: bool = True,
        max_closed_interval: bool = True,
        reversed_range: bool = False,
        text_key: str = "text",
        **common: Any,
    ) -> None:
        super().__init__(text_key=text_key, **common)
        self._init_range(min_len, max_len, min_closed_interval, max_closed_interval, reversed_range)

    def _compute(self, table: pa.Table) -> pa.Array:
        return pc.fill_null(pc.utf8_length(text_array(table, self.text_key)).cast(pa.int64()), 0)
