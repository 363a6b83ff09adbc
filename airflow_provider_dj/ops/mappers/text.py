"""Character-, word- and sentence-level text mappers matching Data-Juicer 1.6.1.

clean_copyright_mapper, punctuation_normalization_mapper,
remove_long_words_mapper, remove_repeat_sentences_mapper, and this
project's own lowercase_mapper.  (The web-scrape cleaners clean_links_mapper,
clean_ip_mapper, clean_html_mapper and fix_unicode_mapper live in
``mappers_web``.)

Every op rewrites the text column of a whole Arrow table with kernels that
reproduce DJ's per-row Python exactly: RE2 with explicit character classes
(never RE2's own case folding or ASCII-only classes), and Arrow's
split/list/join kernels with numpy bookkeeping for the word- and
sentence-level ops.  Row count and order never change; null texts stay null,
as in the other mappers.
"""

from __future__ import annotations

import ast
import sys
from typing import Any, Callable, Optional

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from airflow_provider_dj.ops.base import Mapper, OpArgumentError
from airflow_provider_dj.ops.kernels.text import (
    SPECIAL_CHARACTERS,
    py_lower,
    py_strip,
    re2_class,
    replace_text,
    text_array,
)
from airflow_provider_dj.ops.registry import register


# --- shared helpers ----------------------------------------------------------
def with_rows(arr: pa.Array, mask: pa.Array, fn: Callable[[pa.Array], pa.Array]) -> pa.Array:
    """Apply ``fn`` only to the rows where ``mask`` is True (cheap pre-filter)."""
    mask = pc.fill_null(mask, False)
    if not pc.any(mask).as_py():
        return arr
    return pc.replace_with_mask(arr, mask, fn(arr.filter(mask)).cast(arr.type))


def python_rows(arr: pa.Array, mask: pa.Array, fn: Callable[[str], str]) -> pa.Array:
    return with_rows(arr, mask, lambda sub: pa.array([fn(s) for s in sub.to_pylist()], arr.type))


def split_flat(values: pa.Array, sep: str) -> tuple[pa.Array, np.ndarray]:
    """Each string split on the literal ``sep`` (like ``str.split(sep)``), flattened,
    with the index of the string every piece came from."""
    lists = pc.split_pattern(values, pattern=sep)
    return lists.flatten(), np.asarray(pc.list_parent_indices(lists), dtype=np.int64)


def join_flat(pieces: pa.Array, parents: np.ndarray, n: int, sep: str) -> pa.Array:
    """Inverse of ``split_flat``: ``sep.join`` of the pieces of each of ``n`` parents
    (``parents`` sorted ascending; a parent with no pieces gets "")."""
    counts = np.bincount(parents, minlength=n) if len(parents) else np.zeros(n, np.int64)
    offsets = np.concatenate([[0], np.cumsum(counts)])
    large = offsets[-1] >= 2**31
    list_type = pa.LargeListArray if large else pa.ListArray
    lists = list_type.from_arrays(pa.array(offsets, pa.int64() if large else pa.int32()), pieces)
    return pc.binary_join(lists, pa.scalar(sep, pieces.type))


_I64 = np.iinfo(np.int64)


def fill_nulls(arr: pa.Array) -> tuple[pa.Array, pa.Array | None]:
    """("" for nulls, validity mask or None) so list kernels never see nulls."""
    if arr.null_count == 0:
        return arr, None
    return pc.fill_null(arr, ""), arr.is_valid()


def restore_nulls(out: pa.Array, valid: pa.Array | None) -> pa.Array:
    """``out`` with nulls back where ``fill_nulls`` filled them (``valid`` is its mask; None: none were)."""
    return out if valid is None else pc.if_else(valid, out, pa.scalar(None, out.type))


# --- clean_copyright_mapper ---------------------------------------------------
_C_COMMENT = r"/\*[^*]*\*+(?:[^/*][^*]*\*+)*/"
# "copyright" as the regex module's IGNORECASE matches it: its simple case
# folding also maps U+0130 (capital I with dot) to i.
_COPYRIGHT_CI = "".join(f"[{c}{c.upper()}{chr(0x130) if c == 'i' else ''}]" for c in "copyright")
# Leading lines that start with //, # or -- or are empty, each with its "\n";
# plus a final such line with no "\n" after it (then nothing is left).
_HEADER_LINES = r"\A(?:(?://|#|--)[^\n]*\n|\n)*(?:(?://|#|--)[^\n]*\z)?"


def _strip_header_lines(arr: pa.Array) -> pa.Array:
    return pc.replace_substring_regex(arr, pattern=_HEADER_LINES, replacement="", max_replacements=1)


@register
class CleanCopyrightMapper(Mapper):
    """Drop a copyright comment block or a leading run of comment lines.

    DJ's rule, kept exactly: find the *first* ``/* ... */`` block anywhere in
    the text (not only at the start); if there is one, cut it when it
    contains "copyright" (case-insensitive) and do nothing else.  Only texts
    with no block comment at all lose their leading lines that start with
    ``//``, ``#`` or ``--`` or are empty (a text made only of such lines
    becomes "").  A first block without "copyright" protects a later one
    that has it.  All three steps are RE2 kernels: the comment grammar has
    no backtracking-dependent construct, and the case-insensitive word is
    spelled out as classes so RE2's own case folding never comes into play.
    """

    name = "clean_copyright_mapper"

    def __init__(self, *, text_key: str = "text", **common: Any) -> None:
        super().__init__(text_key=text_key, **common)

    def process_table(self, table: pa.Table) -> pa.Table:
        arr = text_array(table, self.text_key)
        has_block = pc.fill_null(pc.match_substring_regex(arr, pattern=_C_COMMENT), False)
        first = pc.struct_field(pc.extract_regex(arr, pattern=f"(?P<c>{_C_COMMENT})"), [0])
        cut = pc.and_(has_block, pc.fill_null(pc.match_substring_regex(first, pattern=_COPYRIGHT_CI), False))
        out = with_rows(
            arr, cut, lambda a: pc.replace_substring_regex(a, pattern=_C_COMMENT, replacement="", max_replacements=1)
        )
        header = pc.and_(pc.invert(has_block), pc.match_substring_regex(arr, pattern=r"\A(?://|#|--|\n)"))
        out = with_rows(out, header, _strip_header_lines)
        return replace_text(table, self.text_key, out)


# --- punctuation_normalization_mapper ----------------------------------------
# DJ's table (character -> replacement).  Note the quirks kept on purpose:
# the full-width digit one "１" becomes '"', "—" becomes " - " and the
# full-width full stop "．" becomes ". ".
PUNCTUATION_MAP = {
    "，": ",", "。": ".", "、": ",", "„": '"', "”": '"', "“": '"', "«": '"', "»": '"', "１": '"',
    "」": '"', "「": '"', "《": '"', "》": '"', "´": "'", "∶": ":", "：": ":", "？": "?", "！": "!",
    "（": "(", "）": ")", "；": ";", "–": "-", "—": " - ", "．": ". ", "～": "~", "’": "'", "…": "...",
    "━": "-", "〈": "<", "〉": ">", "【": "[", "】": "]", "％": "%", "►": "-",
}  # fmt: skip


@register
class PunctuationNormalizationMapper(Mapper):
    """Replace DJ's unicode punctuation characters by their ASCII versions.

    DJ maps character by character; since every replacement is ASCII and no
    ASCII character is a source, applying one RE2 class replacement per
    distinct replacement string gives the same text.  Only rows holding at
    least one source character are rewritten.
    """

    name = "punctuation_normalization_mapper"

    def __init__(self, *, text_key: str = "text", **common: Any) -> None:
        super().__init__(text_key=text_key, **common)

    def process_table(self, table: pa.Table) -> pa.Table:
        groups: dict[str, set[str]] = {}
        for src, dst in PUNCTUATION_MAP.items():
            groups.setdefault(dst, set()).add(src)

        def normalize(sub: pa.Array) -> pa.Array:
            for dst, srcs in groups.items():
                sub = pc.replace_substring_regex(sub, pattern=re2_class(srcs), replacement=dst)
            return sub

        arr = text_array(table, self.text_key)
        any_src = pc.match_substring_regex(arr, pattern=re2_class(set(PUNCTUATION_MAP)))
        return replace_text(table, self.text_key, with_rows(arr, any_src, normalize))


# --- lowercase_mapper (this project's op) ------------------------------------
@register
class LowercaseMapper(Mapper):
    """Lowercase the text exactly like Python's ``str.lower()``.

    This op is this project's own: Data-Juicer 1.6.1 has no ``lowercase_mapper``
    (it only lowercases inside ops such as document_deduplicator).  It uses
    Arrow's ``utf8_lower`` and lets Python lower only the rows holding a
    character on which the two disagree (final sigma, U+0130, Unicode-version
    drift), so results equal ``str.lower()`` of the running Python.
    """

    name = "lowercase_mapper"

    def __init__(self, *, text_key: str = "text", **common: Any) -> None:
        super().__init__(text_key=text_key, **common)

    def process_table(self, table: pa.Table) -> pa.Table:
        return replace_text(table, self.text_key, py_lower(text_array(table, self.text_key)))


# --- remove_long_words_mapper ---------------------------------------------------
@register
class RemoveLongWordsMapper(Mapper):
    """Keep only words whose length (code points) is in [min_len, max_len].

    A word longer than ``max_len`` gets a second chance: it is kept when its
    length after stripping DJ's SPECIAL_CHARACTERS from both ends is in
    range (the word itself is kept unstripped).  As in DJ, the text is split
    on "\\n", then "\\t", then " ", and rebuilt from the kept words, so the
    op also collapses runs of spaces, drops empty tab fields and empty lines
    and trims the text, even when no word is removed.

    Vectorized with Arrow's split/join list kernels; lengths and the
    second-chance strip (``utf8_trim``) are kernels too.  ``min_len`` above
    ``max_len`` would empty every text, so validation rejects it.
    """

    name = "remove_long_words_mapper"

    def __init__(self, *, min_len: int = 1, max_len: int = sys.maxsize, text_key: str = "text", **common: Any) -> None:
        super().__init__(text_key=text_key, **common)
        self.min_len = min_len
        self.max_len = max_len

    @classmethod
    def check_values(cls, args: dict[str, Any]) -> None:
        lo, hi = args.get("min_len", 1), args.get("max_len", sys.maxsize)
        if lo > hi:
            raise OpArgumentError(
                "min_len",
                f"remove_long_words_mapper: min_len={lo} is greater than max_len={hi}, so every word "
                "would be removed; lower min_len or raise max_len",
            )

    def _keep(self, words: pa.Array) -> np.ndarray:
        lo, hi = max(self.min_len, _I64.min), min(self.max_len, _I64.max)  # numpy-safe, same result
        length = np.asarray(pc.utf8_length(words), dtype=np.int64)
        keep = (length >= lo) & (length <= hi)
        long = length > hi
        if long.any():
            stripped = pc.utf8_trim(words.filter(pa.array(long)), characters="".join(sorted(SPECIAL_CHARACTERS)))
            slen = np.asarray(pc.utf8_length(stripped), dtype=np.int64)
            keep[long] = (slen >= lo) & (slen <= hi)
        return keep & (length > 0)  # DJ's split drops empty pieces before any check

    def process_table(self, table: pa.Table) -> pa.Table:
        arr = text_array(table, self.text_key)
        filled, valid = fill_nulls(arr)
        lines, line_doc = split_flat(filled, "\n")
        fields, field_line = split_flat(lines, "\t")
        words, word_field = split_flat(fields, " ")
        keep = self._keep(words)
        kept_field = word_field[keep]
        field_text = join_flat(words.filter(pa.array(keep)), kept_field, len(fields), " ")
        field_kept = np.bincount(kept_field, minlength=len(fields)) > 0
        line_text = join_flat(field_text.filter(pa.array(field_kept)), field_line[field_kept], len(lines), "\t")
        line_kept = np.bincount(field_line[field_kept], minlength=len(lines)) > 0
        out = join_flat(line_text.filter(pa.array(line_kept)), line_doc[line_kept], len(arr), "\n")
        return replace_text(table, self.text_key, restore_nulls(out.cast(arr.type), valid))


# --- remove_repeat_sentences_mapper ---------------------------------------------
_NOT_QUOTE = "[^\\x{2019}\\x{201D}]"
_QUOTE = "[\\x{2019}\\x{201D}]"
# DJ's split_sentence, step by step (each inserts "\n" after group 1).  The
# last step's class is DJ's literal "[.。!！？\?\.{6}\…{2}]", which — being a
# character class — also holds "{", "}", "6" and "2": "2”x" is a boundary.
_SENTENCE_STEPS = (
    "([.\\x{3002}\\x{FF01}!\\x{FF1F}?])(" + _NOT_QUOTE + ")",
    "(\\.{6})(" + _NOT_QUOTE + ")",
    "(\\x{2026}{2})(" + _NOT_QUOTE + ")",
    "(" + re2_class(set(".。!！？?{}62…")) + _QUOTE + ")(" + _NOT_QUOTE + ")",
)
_NOT_KEY_CHAR = "[^a-zA-Z0-9\\x{4E00}-\\x{9FA5}\\n\\t ]+"


def _lambda_tokenizer(source: str) -> Callable[[str], list[str]]:
    """DJ's "lambda text: ..." tokenizer string, checked the way DJ checks it."""
    node = ast.parse(source, mode="eval")
    if not isinstance(node.body, ast.Lambda):
        raise ValueError("tokenizer must be a lambda expression")
    if len(node.body.args.args) != 1:
        raise ValueError("the tokenizer lambda must take exactly one argument")
    fn = eval(compile(node, "<tokenizer>", "eval"), {"__builtins__": __builtins__})

    def wrapped(line: str) -> list[str]:  # DJ re-adds the space its own splitter would keep
        parts = fn(line)
        return [(" " + s if i > 0 and not s[:1].isspace() else s) for i, s in enumerate(parts)]

    return wrapped


@register
class RemoveRepeatSentencesMapper(Mapper):
    """Drop every sentence whose normalized form already occurred earlier in the text.

    DJ's procedure: lines are split on "\\n"; each non-empty line is split
    into sentences (its regex splitter, or a ``tokenizer`` lambda string); a
    sentence's key is ``strip()``-ed, optionally lowercased, and (by default)
    stripped of everything but ASCII letters/digits, CJK U+4E00..U+9FA5, tab,
    newline and space.  Keys shorter than ``min_repeat_sentence_length`` are
    never deduplicated.  Kept sentences are concatenated back (they keep
    their own leading spaces), lines whose sentences all go stay as "".

    Vectorized: the splitter is four RE2 substitutions over all lines, keys
    are kernels (``py_strip``/``py_lower`` pin Python's semantics), and
    "first occurrence within the document" is one ``np.unique`` over
    (document, dictionary code) pairs.  A ``tokenizer`` runs per line in
    Python, as in DJ.
    """

    name = "remove_repeat_sentences_mapper"

    def __init__(
        self,
        *,
        lowercase: bool = False,
        ignore_special_character: bool = True,
        min_repeat_sentence_length: int = 2,
        tokenizer: Optional[str] = None,
        text_key: str = "text",
        **common: Any,
    ) -> None:
        super().__init__(text_key=text_key, **common)
        self.lowercase = lowercase
        self.ignore_special_character = ignore_special_character
        self.min_repeat_sentence_length = min_repeat_sentence_length
        self.tokenizer = tokenizer
        self._tokenize = None if tokenizer is None else _lambda_tokenizer(tokenizer)

    @classmethod
    def check_values(cls, args: dict[str, Any]) -> None:
        if args.get("tokenizer") is not None:
            try:
                _lambda_tokenizer(args["tokenizer"])
            except Exception as exc:  # noqa: BLE001 - any failure to build the tokenizer is the argument's fault
                raise OpArgumentError(
                    "tokenizer",
                    f"remove_repeat_sentences_mapper tokenizer {args['tokenizer']!r} is not a valid "
                    f"one-argument lambda ({exc}); write e.g. \"lambda text: text.split('. ')\" or omit it",
                ) from None

    def _sentences(self, lines: pa.Array) -> tuple[pa.Array, np.ndarray]:
        if self._tokenize is None:
            for step in _SENTENCE_STEPS:
                lines = pc.replace_substring_regex(lines, pattern=step, replacement="\\1\n\\2")
            return split_flat(lines, "\n")
        tok = self._tokenize
        per_line = [tok(s) if s else [""] for s in lines.to_pylist()]
        parents = np.repeat(np.arange(len(per_line), dtype=np.int64), [len(p) for p in per_line])
        return pa.array([s for p in per_line for s in p], lines.type), parents

    def process_table(self, table: pa.Table) -> pa.Table:
        arr = text_array(table, self.text_key)
        filled, valid = fill_nulls(arr)
        lines, line_doc = split_flat(filled, "\n")
        sentences, sent_line = self._sentences(lines)
        keys = py_strip(sentences)
        if self.lowercase:
            keys = py_lower(keys)
        if self.ignore_special_character:
            keys = pc.replace_substring_regex(keys, pattern=_NOT_KEY_CHAR, replacement="")
        line_nonempty = np.asarray(pc.utf8_length(lines), dtype=np.int64) > 0
        min_len = min(max(self.min_repeat_sentence_length, _I64.min), _I64.max)
        eligible = line_nonempty[sent_line] & (np.asarray(pc.utf8_length(keys), dtype=np.int64) >= min_len)
        keep = ~eligible
        idx = np.flatnonzero(eligible)
        if len(idx):
            codes = np.asarray(pc.dictionary_encode(keys.filter(pa.array(eligible))).indices, dtype=np.int64)
            pair = line_doc[sent_line[idx]] * (int(codes.max()) + 1) + codes
            _, first = np.unique(pair, return_index=True)
            keep[idx[first]] = True
        line_text = join_flat(sentences.filter(pa.array(keep)), sent_line[keep], len(lines), "")
        out = join_flat(line_text, line_doc, len(arr), "\n")
        return replace_text(table, self.text_key, restore_nulls(out.cast(arr.type), valid))
