"""flagged_words_filter and stopwords_filter: Data-Juicer 1.6.1's word-list filters.

Both compute, per sample, the share of its refined words found in a word
list (stats ``flagged_words_ratio`` / ``stopwords_ratio``) and keep the
sample when that share lies in [min_ratio, max_ratio] (with DJ's closedness
and ``reversed_range`` flags, as every range filter here).

A sample's words are Data-Juicer's: the text split on ' ', '\\n' and '\\t'
(or, with ``tokenization: true``, the pieces of the SentencePiece model
``{lang}.sp.model``), each lower-cased and stripped of its SPECIAL_CHARACTERS
at both ends, empty ones dropped.  With ``use_words_aug`` the joined runs of
``words_aug_group_sizes`` consecutive words (joined by
``words_aug_join_char``) are appended to the words -- in the numerator when
they are in the list, and in the denominator always -- which is how
Data-Juicer matches multi-syllable Vietnamese or unsegmented Chinese entries.
'' (and a null text) has ratio 0.0.

The lists come from ``flagged_words_dir`` / ``stopwords_dir`` or DJ's
assets cache (``word_lists.py``); everything is read and checked at
validation, so a missing list or language fails before any work starts.

Vectorized: the words of a whole table are one Arrow array, cut from the
text buffer at its separator bytes without copying (``whitespace_words``);
lower, trim and the list look-up are Arrow kernels, the augmentation runs
are gathered with ``take``, and per-row counts are one ``bincount``.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from airflow_provider_dj.ops.base import OpArgumentError
from airflow_provider_dj.ops.dj_compat.word_lists import load_word_lists
from airflow_provider_dj.ops.filters.stat_range import StatRangeFilter
from airflow_provider_dj.ops.filters.text import ratio, ratio_bounds
from airflow_provider_dj.ops.kernels.text import text_array
from airflow_provider_dj.ops.kernels.tokenizers import (
    augment_words,
    load_sentencepiece,
    refined_words,
    require_sentencepiece,
)
from airflow_provider_dj.ops.registry import register


def _check_group_sizes(op: str, sizes: Any) -> list[int]:
    """DJ declares ``List[PositiveInt]``: refuse 0, negatives, bools and non-ints here."""
    if not isinstance(sizes, (list, tuple)) or not all(
        isinstance(s, int) and not isinstance(s, bool) and s > 0 for s in sizes
    ):
        raise OpArgumentError(
            "words_aug_group_sizes",
            f"{op}: words_aug_group_sizes must be a list of positive integers (e.g. [2]), got {sizes!r}",
        )
    return list(sizes)


def word_list_ratio(
    arr: pa.Array,
    words: pa.Array,
    *,
    pieces_model: Any = None,
    use_words_aug: bool = False,
    group_sizes: list[int] | tuple[int, ...] = (2,),
    join_char: str = "",
) -> np.ndarray:
    """Per row, (refined words in ``words``) / (refined words), augmentation included; 0.0 for none."""
    flat, starts = refined_words(arr, pieces_model, lower=True)
    rows = len(starts) - 1
    pieces = [(flat, starts)]
    if use_words_aug:
        pieces += [augment_words(flat, starts, g, join_char) for g in group_sizes]
    hits = np.zeros(rows, np.int64)
    total = np.zeros(rows, np.int64)
    for values, row_starts in pieces:
        if not len(values):
            continue
        row = np.repeat(np.arange(rows), np.diff(row_starts))
        found = pc.is_in(values, value_set=words.cast(values.type)).to_numpy(zero_copy_only=False)
        hits += np.bincount(row[found], minlength=rows)
        total += np.diff(row_starts)
    return np.minimum(ratio(hits, total), 1.0)


class _WordListFilter(StatRangeFilter):
    """The shared body of the two filters; subclasses name the list type and its folder argument."""

    words_type: ClassVar[str] = ""
    dir_arg: ClassVar[str] = ""

    def _init_words(
        self,
        *,
        lang: str,
        tokenization: bool,
        words_dir: str | None,
        use_words_aug: bool,
        words_aug_group_sizes: Any,
        words_aug_join_char: str,
    ) -> None:
        self.lang, self.tokenization, self.words_dir = lang, tokenization, words_dir
        self.use_words_aug = use_words_aug
        self.words_aug_group_sizes = _check_group_sizes(self.name, words_aug_group_sizes)
        self.words_aug_join_char = words_aug_join_char
        lists = load_word_lists(words_dir, self.words_type, op=self.name, arg=self.dir_arg)
        self.words = pa.array(sorted(lists.for_lang(lang, op=self.name)), pa.string())
        self.model_path = require_sentencepiece(lang, op=self.name) if tokenization else None
        self._model = None

    @classmethod
    def check_values(cls, args: dict[str, Any]) -> None:
        super().check_values(args)
        defaults = {k: p.default for k, p in cls.own_args().items()}
        get = lambda k: args.get(k, defaults[k])  # noqa: E731
        _check_group_sizes(cls.name, get("words_aug_group_sizes"))
        lists = load_word_lists(get(cls.dir_arg), cls.words_type, op=cls.name, arg=cls.dir_arg)
        lists.for_lang(get("lang"), op=cls.name)
        if get("tokenization"):
            require_sentencepiece(get("lang"), op=cls.name)  # found; loaded on first use, not at DAG parse

    def setup(self) -> None:
        if self.model_path and self._model is None:
            self._model = load_sentencepiece(self.model_path)

    def compute_stat(self, table: pa.Table) -> pa.Array:
        self.setup()
        values = word_list_ratio(
            text_array(table, self.text_key),
            self.words,
            pieces_model=self._model,
            use_words_aug=self.use_words_aug,
            group_sizes=self.words_aug_group_sizes,
            join_char=self.words_aug_join_char,
        )
        return pa.array(values, pa.float64())


@register
class FlaggedWordsFilter(_WordListFilter):
    """Keep samples whose share of flagged words (stat ``flagged_words_ratio``) is in
    [min_ratio, max_ratio].

    The list is every ``*flagged_words*.json`` in ``flagged_words_dir``
    (default: Data-Juicer's assets cache), merged by language key; ``lang:
    all`` uses all languages.  Never downloaded: a missing list fails
    validation with the path to put it at (docs/text_filters_words.md).
    """

    name = "flagged_words_filter"
    bounds = ratio_bounds("flagged_words_ratio", 0.0, 0.045, after="tokenization")
    words_type = "flagged_words"
    dir_arg = "flagged_words_dir"
    path_args = ("flagged_words_dir",)

    def __init__(
        self,
        *,
        lang: str = "en",
        tokenization: bool = False,
        flagged_words_dir: str | None = None,
        use_words_aug: bool = False,
        words_aug_group_sizes: list[int] = (2,),  # type: ignore[assignment]
        words_aug_join_char: str = "",
        text_key: str = "text",
        **common: Any,
    ) -> None:
        super().__init__(text_key=text_key, **common)
        self._init_words(
            lang=lang,
            tokenization=tokenization,
            words_dir=flagged_words_dir,
            use_words_aug=use_words_aug,
            words_aug_group_sizes=words_aug_group_sizes,
            words_aug_join_char=words_aug_join_char,
        )


@register
class StopwordsFilter(_WordListFilter):
    """Keep samples whose share of stopwords (stat ``stopwords_ratio``) is in
    [min_ratio, max_ratio].

    The list is every ``*stopwords*.json`` in ``stopwords_dir`` (default:
    Data-Juicer's assets cache), merged by language key; ``lang: all`` uses
    all languages.  Never downloaded: a missing list fails validation with
    the path to put it at (docs/text_filters_words.md).
    """

    name = "stopwords_filter"
    bounds = ratio_bounds("stopwords_ratio", 0.3, 1.0, after="tokenization")
    words_type = "stopwords"
    dir_arg = "stopwords_dir"
    path_args = ("stopwords_dir",)

    def __init__(
        self,
        *,
        lang: str = "en",
        tokenization: bool = False,
        stopwords_dir: str | None = None,
        use_words_aug: bool = False,
        words_aug_group_sizes: list[int] = (2,),  # type: ignore[assignment]
        words_aug_join_char: str = "",
        text_key: str = "text",
        **common: Any,
    ) -> None:
        super().__init__(text_key=text_key, **common)
        self._init_words(
            lang=lang,
            tokenization=tokenization,
            words_dir=stopwords_dir,
            use_words_aug=use_words_aug,
            words_aug_group_sizes=words_aug_group_sizes,
            words_aug_join_char=words_aug_join_char,
        )
