"""Word-level text mappers: remove_words_with_incorrect_substrings_mapper.

``keep_words`` is the vectorized form of Data-Juicer's
``split_on_newline_tab_whitespace`` -> per-word test ->
``merge_on_whitespace_tab_newline`` round trip, which its word-dropping
mappers share; the op here supplies only its per-word test.  (It is the same
pipeline ``mappers_text.RemoveLongWordsMapper`` spells out inline; that op
could call ``keep_words`` with its own test.)
"""

from __future__ import annotations

from typing import Any, Callable, List, Optional

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from airflow_provider_dj.ops.base import Mapper, OpArgumentError
from airflow_provider_dj.ops.kernels.text import SPECIAL_CHARACTERS, replace_text, text_array
from airflow_provider_dj.ops.kernels.tokenizers import (
    load_sentencepiece,
    require_sentencepiece,
    sentencepiece_pieces,
)
from airflow_provider_dj.ops.mappers.text import fill_nulls, join_flat, restore_nulls, split_flat
from airflow_provider_dj.ops.registry import register

_SPECIAL = "".join(sorted(SPECIAL_CHARACTERS))
#: Data-Juicer's default ``substrings``.
DEFAULT_SUBSTRINGS = ("http", "www", ".com", "href", "//")
#: SentencePiece's word-start mark, which Data-Juicer deletes from every piece.
SP_SPACE = "\u2581"


def keep_words(arr: pa.Array, keep: Callable[[pa.Array], np.ndarray]) -> pa.Array:
    """Each text rebuilt from the words ``keep`` accepts, the way Data-Juicer rebuilds it.

    Texts split on "\\n", then "\\t", then " " (empty words dropped before
    ``keep`` sees them); ``keep(words)`` gets all words of all texts as one
    array and returns one bool per word.  Kept words are joined back with " ",
    non-empty fields with "\\t", non-empty lines with "\\n", so runs of
    spaces, empty tab fields and empty lines disappear even where no word
    is dropped.  Null texts stay null.
    """
    filled, valid = fill_nulls(arr)
    lines, line_doc = split_flat(filled, "\n")
    fields, field_line = split_flat(lines, "\t")
    words, word_field = split_flat(fields, " ")
    kept = np.asarray(pc.binary_length(words), dtype=np.int64) > 0
    if kept.any():
        kept[kept] = keep(words.filter(pa.array(kept)))
    kept_field = word_field[kept]
    field_text = join_flat(words.filter(pa.array(kept)), kept_field, len(fields), " ")
    field_kept = np.bincount(kept_field, minlength=len(fields)) > 0
    line_text = join_flat(field_text.filter(pa.array(field_kept)), field_line[field_kept], len(lines), "\t")
    line_kept = np.bincount(field_line[field_kept], minlength=len(lines)) > 0
    out = join_flat(line_text.filter(pa.array(line_kept)), line_doc[line_kept], len(arr), "\n")
    return restore_nulls(out.cast(arr.type), valid)


def lacks_substrings(words: pa.Array, substrings: tuple[str, ...]) -> np.ndarray:
    """Per word: True when, stripped of SPECIAL_CHARACTERS at both ends, it contains none of ``substrings``."""
    stripped = pc.utf8_trim(words, characters=_SPECIAL)
    bad = np.zeros(len(words), dtype=bool)
    for sub in substrings:
        bad |= np.asarray(pc.fill_null(pc.match_substring(stripped, pattern=sub), False), dtype=bool)
    return ~bad


@register
class RemoveWordsWithIncorrectSubstringsMapper(Mapper):
    """Drop every word that contains one of ``substrings`` (default: URL fragments).

    A word is tested after stripping Data-Juicer's SPECIAL_CHARACTERS from
    both its ends, and kept unstripped; substrings are plain text, matched
    case-sensitively (``"http"`` does not match ``HTTP``).  Without
    ``tokenization`` words are split on newlines, tabs and spaces and the
    text is rebuilt from the kept ones as ``remove_long_words_mapper`` does
    (which also collapses runs of spaces and drops empty lines).

    ``tokenization: true`` splits with the SentencePiece model
    ``{lang}.sp.model`` (looked up where Data-Juicer looks, never
    downloaded; refused at validation when absent), tests each piece with
    its "▁" marks deleted, and, as in Data-Juicer, when a piece goes, joins
    the kept pieces with nothing between them, so that text loses its
    spaces; a text with nothing to drop is left as it is.

    An empty substring is refused at validation: it is in every word, so it
    would empty every text.
    """

    name = "remove_words_with_incorrect_substrings_mapper"

    def __init__(
        self,
        *,
        lang: str = "en",
        tokenization: bool = False,
        substrings: Optional[List[str]] = None,
        text_key: str = "text",
        **common: Any,
    ) -> None:
        super().__init__(text_key=text_key, **common)
        self.lang = lang
        self.tokenization = tokenization
        self.substrings = tuple(DEFAULT_SUBSTRINGS if substrings is None else substrings)
        self._model_path: str | None = None

    @classmethod
    def check_values(cls, args: dict[str, Any]) -> None:
        subs = args.get("substrings")
        if subs is not None:
            bad = [s for s in subs if not isinstance(s, str) or not s]
            if bad:
                raise OpArgumentError(
                    "substrings",
                    f"{cls.name}: substrings must be non-empty strings; {bad[0]!r} is not "
                    f"(an empty substring is in every word and would empty every text). Remove it",
                )
        if args.get("tokenization"):
            require_sentencepiece(args.get("lang", "en"), op=cls.name)

    def _sentencepiece_path(self) -> str:
        if self._model_path is None:
            self._model_path = require_sentencepiece(self.lang, op=self.name)
        return self._model_path

    def _keep(self, words: pa.Array) -> np.ndarray:
        return lacks_substrings(words, self.substrings)

    def _tokenized(self, arr: pa.Array) -> pa.Array:
        filled, valid = fill_nulls(arr)
        # SentencePiece's batch API: the per-row work stays in C++ (one call, not one per row).
        pieces = sentencepiece_pieces(load_sentencepiece(self._sentencepiece_path()), filled)
        flat = pc.replace_substring(pieces.flatten(), pattern=SP_SPACE, replacement="")
        parents = np.asarray(pc.list_parent_indices(pieces), dtype=np.int64)
        keep = self._keep(flat)
        changed = np.bincount(parents[~keep], minlength=len(arr)) > 0
        if not changed.any():
            return arr
        joined = join_flat(flat.filter(pa.array(keep)), parents[keep], len(arr), "")
        out = pc.if_else(pa.array(changed), joined.cast(arr.type), filled)
        return restore_nulls(out, valid)

    def process_table(self, table: pa.Table) -> pa.Table:
        arr = text_array(table, self.text_key)
        out = self._tokenized(arr) if self.tokenization else keep_words(arr, self._keep)
        return replace_text(table, self.text_key, out)
