"""Text filters with Data-Juicer 1.6.1's names, arguments, stats and ranges.

``compute_stats`` writes an int64 field into ``__dj__stats__`` (reusing an
existing value like DJ does); ``keep_mask`` applies DJ's range test.  Null
texts count as '' (length 0, zero words), so they are kept or dropped by the
same rule as an empty string instead of failing the run.

Each declares its bounds once (``StatBounds``); the arguments, the range
test and DJ's ``min_closed_interval`` / ``max_closed_interval`` /
``reversed_range`` flags come from ``stat_range.StatRangeFilter``.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from airflow_provider_dj.ops.filters.stat_range import StatBounds, StatRangeFilter
from airflow_provider_dj.ops.kernels.text import count_words, text_array
from airflow_provider_dj.ops.kernels.tokenizers import load_sentencepiece, piece_words, require_sentencepiece
from airflow_provider_dj.ops.registry import register


@register
class WordsNumFilter(StatRangeFilter):
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
    bounds = StatBounds(
        "num_words", pa.int64(), int, min=("min_num", 10), max=("max_num", sys.maxsize), after="tokenization"
    )

    def __init__(self, *, lang: str = "en", tokenization: bool = False, text_key: str = "text", **common: Any) -> None:
        super().__init__(text_key=text_key, **common)
        self.lang = lang
        self.tokenization = tokenization
        self.model_path = require_sentencepiece(lang, op=self.name) if tokenization else None

    @classmethod
    def check_values(cls, args: dict[str, Any]) -> None:
        if args.get("tokenization"):
            require_sentencepiece(args.get("lang", "en"), op=cls.name)  # found; loaded on first use
        super().check_values(args)

    def compute_stat(self, table: pa.Table) -> pa.Array:
        if self.model_path is None:
            return count_words(text_array(table, self.text_key))
        _, starts = piece_words(load_sentencepiece(self.model_path), text_array(table, self.text_key), lower=False)
        return pa.array(np.diff(starts), pa.int64())


@register
class TextLengthFilter(StatRangeFilter):
    """Keep samples whose length in characters (stat ``text_len``) is in [min_len, max_len].

    Length is Python's ``len(str)``: Unicode code points, not bytes and not
    grapheme clusters (an emoji with a skin-tone modifier counts 2).
    """

    name = "text_length_filter"
    bounds = StatBounds("text_len", pa.int64(), int, min=("min_len", 10), max=("max_len", sys.maxsize))

    def compute_stat(self, table: pa.Table) -> pa.Array:
        return pc.fill_null(pc.utf8_length(text_array(table, self.text_key)).cast(pa.int64()), 0)
