"""Text-statistic filters of Data-Juicer 1.6.1: ratios, line lengths, n-gram repetition.

Each op has DJ's name, arguments, defaults and stat key and computes DJ's
per-sample Python statistic exactly, for a whole table at once:

* the text buffer is decoded once (CPython's UTF-8/UTF-32 codecs) into one
  numpy array of code points -- exactly what a Python ``str`` indexes --
  so per-character predicates (``str.isalnum``, DJ's SPECIAL_CHARACTERS,
  ``str.splitlines`` breaks) are table lookups and per-row counts are
  differences of one cumulative sum;
* n-gram repetition sorts 64-bit keys (hash of window and row | position).
  Hashes only *propose* groups: equal neighbours are compared token by
  token and a proposed group with a collision is regrouped exactly in
  Python, so counts and ratios are exact, never probabilistic.

Ratios divide two integers below 2**53, which numpy and Python both round
correctly, so the float64 stats equal DJ's bit for bit.  Null texts count
as '' (ratios 0.0, no lines), like the other text filters.
"""

from __future__ import annotations

import functools
import sys
from collections import Counter
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from airflow_provider_dj.ops.base import OpArgumentError
from airflow_provider_dj.ops.filters.stat_range import StatBounds, StatRangeFilter
from airflow_provider_dj.ops.kernels.text import SPECIAL_CHARACTERS, text_array
from airflow_provider_dj.ops.kernels.tokenizers import (
    ALPHANUMERIC_HF_TOKENIZER,
    load_hf_token_counter,
    load_sentencepiece,
    locate_hf_tokenizer,
    piece_words,
    require_sentencepiece,
    whitespace_words,
)
from airflow_provider_dj.ops.registry import register

# What str.splitlines() splits on ("\r\n" counts as one break).
LINE_BREAKS = "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"
_SPECIAL_STR = "".join(sorted(SPECIAL_CHARACTERS))
_NUM_CODEPOINTS = 0x110000


# --- code points ----------------------------------------------------------------
def codepoints(arr: pa.Array | pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray]:
    """Every row's code points concatenated (uint32) and the rows' start offsets (R+1).

    Nulls count as ''.  One codec call over the whole buffer is far cheaper
    than touching rows from Python.
    """
    arr = pc.fill_null(arr, "")
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks() if arr.num_chunks != 1 else arr.chunk(0)
    starts = np.zeros(len(arr) + 1, np.int64)
    np.cumsum(pc.utf8_length(arr).to_numpy(zero_copy_only=False), out=starts[1:])
    if starts[-1] == 0:
        return np.zeros(0, np.uint32), starts
    wide = pa.types.is_large_string(arr.type)
    offsets = np.frombuffer(arr.buffers()[1], np.int64 if wide else np.int32)[arr.offset :]
    raw = memoryview(arr.buffers()[2])[int(offsets[0]) : int(offsets[len(arr)])]
    cps = np.frombuffer(str(raw, "utf-8").encode("utf-32-le"), "<u4")
    if len(cps) != starts[-1]:  # pragma: no cover - would mean Arrow and CPython disagree on UTF-8
        raise RuntimeError("code point count mismatch while decoding text")
    return cps, starts


@functools.lru_cache(maxsize=None)
def char_table(name: str) -> np.ndarray:
    """A bool per code point: 'special' (DJ's SPECIAL_CHARACTERS), 'alnum' (str.isalnum),
    'alpha' (str.isalpha), 'break'."""
    if name in ("alnum", "alpha"):  # taken from this interpreter's unicodedata, like DJ's str methods
        test = str.isalnum if name == "alnum" else str.isalpha
        return np.fromiter(map(test, map(chr, range(_NUM_CODEPOINTS))), bool, _NUM_CODEPOINTS)
    table = np.zeros(_NUM_CODEPOINTS, bool)
    chars = {"special": _SPECIAL_STR, "break": LINE_BREAKS}[name]
    table[[ord(c) for c in chars]] = True
    return table


def row_sums(flags: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Per-row sum of a per-code-point array (rows given by their start offsets)."""
    cs = np.zeros(len(flags) + 1, np.int64)
    np.cumsum(flags, out=cs[1:])
    return cs[starts[1:]] - cs[starts[:-1]]


def ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    """num / den as float64 (correctly rounded like Python's int / int), 0.0 where den == 0."""
    out = np.zeros(len(den), np.float64)
    np.divide(num, den, out=out, where=den != 0)
    return out


def line_stats(arr: pa.Array) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(length, number of ``str.splitlines()`` lines, longest line length) per row.

    Works on the (few) break positions only: a row with k breaks has k + 1
    segments, from its start or just past a break to the next break or its
    end; merging all rows' segment starts and ends gives every segment's
    length at once.  An empty segment before the end, or inside "\r\n",
    never changes the maximum, and the line count corrects for both.
    """
    cps, starts = codepoints(arr)
    lengths = np.diff(starts)
    rows = len(lengths)
    brk = np.flatnonzero(char_table("break")[cps])
    breaks_before = np.searchsorted(brk, starts)
    num_breaks = np.diff(breaks_before)
    # "\r\n" inside one row is one break (flagged on its "\r").
    crlf = np.zeros(len(brk), bool)
    crlf[:-1] = (brk[1:] == brk[:-1] + 1) & (cps[brk[:-1]] == 13) & (cps[brk[1:]] == 10)
    crlf[:-1] &= ~np.isin(brk[1:], starts)
    crlf_before = np.zeros(len(brk) + 1, np.int64)
    np.cumsum(crlf, out=crlf_before[1:])
    num_crlf = np.diff(crlf_before[breaks_before])
    ends_open = lengths > 0
    ends_open[ends_open] = ~char_table("break")[cps[starts[1:][ends_open] - 1]]
    num_lines = num_breaks - num_crlf + ends_open
    seg_start = np.sort(np.concatenate([starts[:-1], brk + 1]), kind="stable")
    seg_end = np.sort(np.concatenate([brk, starts[1:]]), kind="stable")
    first_seg = breaks_before[:-1] + np.arange(rows)
    longest = np.maximum.reduceat(seg_end - seg_start, first_seg) if rows else np.zeros(0, np.int64)
    return lengths, num_lines, longest.astype(np.int64)


# --- n-gram grouping ----------------------------------------------------------------
_U64 = np.uint64


def _weights(n: int) -> np.ndarray:
    """n fixed odd 64-bit multipliers (splitmix64 outputs) for the multiply-shift hash."""
    out, x, m = [], 0, (1 << 64) - 1
    for _ in range(n):
        x = (x + 0x9E3779B97F4A7C15) & m
        z = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & m
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & m
        out.append(z ^ (z >> 31) | 1)
    return np.array(out, np.uint64)


def _pack(tokens: np.ndarray, n: int) -> tuple[np.ndarray, list[int]]:
    """Per position, the next few tokens packed losslessly into a uint64 (three code
    points, or two ids below 2**32), and the chunk offsets covering ``n`` tokens
    (the last may overlap), so a window hashes and compares in ceil(n / c) steps."""
    top = int(tokens.max()) if len(tokens) else 0
    width = 21 if top < 1 << 21 else 32 if top < 1 << 32 else 64
    c = min(64 // width, n)
    packed = np.zeros(len(tokens) + n + c, np.uint64)
    packed[: len(tokens)] = tokens
    source, shifted = packed.copy(), np.empty_like(packed)
    for i in range(1, c):
        np.left_shift(source[i:], _U64(width * i), out=shifted[:-i])
        packed[:-i] |= shifted[:-i]
    offsets = list(range(0, n - c + 1, c))
    if offsets[-1] != n - c:
        offsets.append(n - c)
    return packed, offsets


_BLOCK = 1 << 18  # tokens per block: small enough for the caches, large enough to amortize calls


def ngram_groups(tokens: np.ndarray, starts: np.ndarray, n: int) -> tuple[np.ndarray, ...]:
    """Count every row's length-``n`` windows of ``tokens`` by content, exactly.

    A window is ``tokens[p:p+n]`` lying inside one row.  Returns (windows
    per row, windows per row whose content occurs once in that row, and the
    row and size of every repeated content).  Groups never span rows, so
    rows are processed in blocks of about ``_BLOCK`` tokens: the arrays then
    stay in the CPU caches, which is several times faster than one pass.
    """
    rows = len(starts) - 1
    cuts = [0]
    while cuts[-1] < rows:
        end = int(np.searchsorted(starts, starts[cuts[-1]] + _BLOCK, side="right")) - 1
        cuts.append(min(rows, max(end, cuts[-1] + 1)))
    if len(cuts) <= 2:
        return _ngram_block(tokens, starts, n)
    parts = []
    for r0, r1 in zip(cuts[:-1], cuts[1:]):
        t0 = starts[r0]
        windows, singles, group_row, group_size = _ngram_block(tokens[t0 : starts[r1]], starts[r0 : r1 + 1] - t0, n)
        parts.append((windows, singles, group_row + r0, group_size))
    return tuple(np.concatenate([p[i] for p in parts]) for i in range(4))


def _ngram_block(tokens: np.ndarray, starts: np.ndarray, n: int) -> tuple[np.ndarray, ...]:
    """``ngram_groups`` for one block: sort (top hash bits | position) so equal
    hashes are adjacent; only neighbours with equal hashes are looked at again."""
    rows, size = len(starts) - 1, len(tokens)
    windows = np.maximum(np.diff(starts) - n + 1, 0)
    empty = np.zeros(0, np.int64)
    if not windows.any():
        return windows, windows.copy(), empty, empty
    # A window starts at p unless p is among its row's last n - 1 positions
    # (disjoint ranges, so the running sum of +1/-1 marks is 0 or 1).
    marks = np.zeros(size + 1, np.int8)
    np.add.at(marks, np.maximum(starts[1:] - (n - 1), starts[:-1]), 1)
    np.add.at(marks, starts[1:], -1)
    valid = np.cumsum(marks, dtype=np.int8)[:-1] == 0
    packed, offsets = _pack(tokens, n)
    weights = _weights(len(offsets) + 1)
    h = packed[:size] * weights[0]
    tmp = np.empty_like(h)
    for k, off in enumerate(offsets[1:], 1):
        np.multiply(packed[off : off + size], weights[k], out=tmp)
        h += tmp
    h = h[valid]
    h += np.repeat(np.arange(rows, dtype=np.uint64) * weights[-1], windows)
    bits = max(1, (size - 1).bit_length())
    h >>= _U64(bits)
    h <<= _U64(bits)
    h |= np.flatnonzero(valid).view(np.uint64)
    h.sort()
    high = h >> _U64(bits)
    same = high[1:] == high[:-1]
    grouped = np.zeros(len(h), bool)
    grouped[:-1] = same
    grouped[1:] |= same
    idx = np.flatnonzero(grouped)
    pos = (h[idx] & _U64((1 << bits) - 1)).astype(np.int64)
    new = np.ones(len(idx), bool)
    new[1:] = ~same[idx[1:] - 1]
    row = np.searchsorted(starts, pos, side="right") - 1
    # Verify consecutive members of each proposed group chunk by chunk (and row).
    later = np.flatnonzero(~new)
    a, b = pos[later - 1], pos[later]
    equal = row[later - 1] == row[later]
    for off in offsets:
        equal &= packed[a + off] == packed[b + off]
    group_start = np.flatnonzero(new)
    group_size = np.diff(np.append(group_start, len(idx)))
    group_row = row[group_start]
    if not equal.all():  # hash collisions: regroup the affected proposed groups exactly
        bad = np.unique(np.searchsorted(group_start, later[~equal], side="right") - 1)
        members = np.concatenate([pos[group_start[g] : group_start[g] + group_size[g]] for g in bad.tolist()])
        member_rows = np.searchsorted(starts, members, side="right") - 1
        exact = Counter((r, tokens[p : p + n].tobytes()) for r, p in zip(member_rows.tolist(), members.tolist()))
        keep = np.ones(len(group_start), bool)
        keep[bad] = False
        group_row = np.concatenate([group_row[keep], np.array([r for r, _ in exact], np.int64)])
        group_size = np.concatenate([group_size[keep], np.array(list(exact.values()), np.int64)])
    repeated = group_size > 1
    group_row, group_size = group_row[repeated], group_size[repeated]
    singles = windows - np.bincount(group_row, weights=group_size, minlength=rows).astype(np.int64)
    return windows, singles, group_row, group_size


def word_tokens(arr: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """DJ's refined words (split on ' ', '\\n', '\\t'; lower-cased; SPECIAL_CHARACTERS
    stripped from both ends; empty ones dropped) as exact integer ids, with row starts.

    The words come from ``tokenizers.whitespace_words`` (cut from the text
    buffer at its separator bytes, no list array; the whole text lower-cased
    first, which gives the same words as DJ's per-word ``lower()``).
    """
    words, starts = whitespace_words(arr, lower=True)
    ids = pc.dictionary_encode(words).indices.to_numpy(zero_copy_only=False)
    return ids.astype(np.int64), starts


# --- ops -------------------------------------------------------------------------
def _check_args(name: str, args: dict[str, Any], tokenizer: str = "") -> None:
    """Reject what cannot run: a tokenizer that is not on this machine (never downloaded), rep_len < 1.

    The tokenizer is only looked for here, not loaded: DAG parsing validates recipes and must not
    import sentencepiece or transformers (the op loads it on its first batch, on the worker)."""
    if tokenizer == "huggingface" and args.get("tokenization"):
        locate_hf_tokenizer(ALPHANUMERIC_HF_TOKENIZER, op=name)  # found; loaded on first use
    elif tokenizer == "sentencepiece" and args.get("tokenization"):
        require_sentencepiece(args.get("lang", "en"), op=name)
    if args.get("rep_len", 1) < 1:
        raise OpArgumentError("rep_len", f"{name}: rep_len must be a positive integer, got {args['rep_len']}")


def ratio_bounds(stat: str, min_ratio: float, max_ratio: float, after: str | None = None) -> StatBounds:
    """A float64 statistic kept when it lies in [min_ratio, max_ratio] (DJ's get_keep_boolean).

    numpy compares float64 with int or float bounds as Python does for every
    value these stats can take (all below 2**53), so decisions match DJ's.
    """
    return StatBounds(
        stat, pa.float64(), float, min=("min_ratio", min_ratio), max=("max_ratio", max_ratio), after=after
    )


@register
class AlphanumericFilter(StatRangeFilter):
    """Keep samples whose share of ``str.isalnum()`` characters (stat ``alnum_ratio``)
    is in [min_ratio, max_ratio]; '' has 0.0.

    With ``tokenization: true`` the stat is ``alpha_token_ratio``: the number
    of ``str.isalpha()`` characters (letters only, no digits: DJ's own
    definition) per token of the Hugging Face tokenizer DJ hard-codes,
    ``EleutherAI/pythia-6.9b-deduped``, found as a path, in a
    ``DATA_JUICER_EXTERNAL_MODELS_HOME`` folder or in the local Hugging Face
    cache, never downloaded (docs/text_filters_words.md); 0.0 for no token.
    It can exceed 1, which the default max_ratio allows.
    """

    name = "alphanumeric_filter"
    bounds = ratio_bounds("alnum_ratio", 0.25, sys.maxsize, after="tokenization")

    def __init__(self, *, tokenization: bool = False, text_key: str = "text", **common: Any) -> None:
        super().__init__(text_key=text_key, **common)
        self.tokenization = tokenization
        self.tokenizer_dir = locate_hf_tokenizer(ALPHANUMERIC_HF_TOKENIZER, op=self.name) if tokenization else None
        if tokenization:
            self.stat_key = "alpha_token_ratio"  # DJ's stat for this mode

    @classmethod
    def check_values(cls, args: dict[str, Any]) -> None:
        _check_args(cls.name, args, "huggingface")
        super().check_values(args)

    def setup(self) -> None:
        if self.tokenizer_dir:
            load_hf_token_counter(self.tokenizer_dir)

    def compute_stat(self, table: pa.Table) -> pa.Array:
        arr = text_array(table, self.text_key)
        cps, starts = codepoints(arr)
        if self.tokenizer_dir is None:
            return pa.array(ratio(row_sums(char_table("alnum")[cps], starts), np.diff(starts)))
        tokens = load_hf_token_counter(self.tokenizer_dir).counts(arr)
        return pa.array(ratio(row_sums(char_table("alpha")[cps], starts), tokens))


@register
class SpecialCharactersFilter(StatRangeFilter):
    """Keep samples whose share of DJ's SPECIAL_CHARACTERS (stat ``special_char_ratio``)
    is in [min_ratio, max_ratio]; '' has 0.0.

    DJ tests each single character for membership, so the multi-code-point
    emoji in that set never match: '👍🏽' counts only its skin-tone modifier.
    """

    name = "special_characters_filter"
    bounds = ratio_bounds("special_char_ratio", 0.0, 0.25)

    def compute_stat(self, table: pa.Table) -> pa.Array:
        cps, starts = codepoints(text_array(table, self.text_key))
        return pa.array(ratio(row_sums(char_table("special")[cps], starts), np.diff(starts)))


def line_bounds(stat: str, stat_type: pa.DataType) -> StatBounds:
    """Line lengths in [min_len, max_len]: int bounds, as Data-Juicer declares them, whatever the stat's type."""
    return StatBounds(stat, stat_type, int, min=("min_len", 10), max=("max_len", sys.maxsize))


@register
class AverageLineLengthFilter(StatRangeFilter):
    """Keep samples whose ``len(text) / len(text.splitlines())`` (stat ``avg_line_length``,
    a float even for int bounds) is in [min_len, max_len]; '' has 0.0.

    As in DJ the numerator counts the line breaks too, and a trailing break
    adds no empty last line.
    """

    name = "average_line_length_filter"
    bounds = line_bounds("avg_line_length", pa.float64())

    def compute_stat(self, table: pa.Table) -> pa.Array:
        lengths, num_lines, _ = line_stats(text_array(table, self.text_key))
        return pa.array(ratio(lengths, num_lines))


@register
class MaximumLineLengthFilter(StatRangeFilter):
    """Keep samples whose longest ``str.splitlines()`` line (stat ``max_line_length``, int)
    is in [min_len, max_len]; '' has 0."""

    name = "maximum_line_length_filter"
    bounds = line_bounds("max_line_length", pa.int64())

    def compute_stat(self, table: pa.Table) -> pa.Array:
        return pa.array(line_stats(text_array(table, self.text_key))[2])


@register
class CharacterRepetitionFilter(StatRangeFilter):
    """Keep samples whose character n-gram repetition (stat ``char_rep_ratio``) is in
    [min_ratio, max_ratio].

    DJ's ratio is not "repeated n-grams / all n-grams": of the D distinct
    n-grams (``rep_len`` code points), it sums the occurrences of the
    ``min(int(sqrt(D)), number seen more than once)`` most frequent ones and
    divides by the number of n-gram positions.  Text shorter than
    ``rep_len`` has 0.0.
    """

    name = "character_repetition_filter"
    bounds = ratio_bounds("char_rep_ratio", 0.0, 0.5, after="rep_len")

    def __init__(self, *, rep_len: int = 10, text_key: str = "text", **common: Any) -> None:
        super().__init__(text_key=text_key, **common)
        _check_args(self.name, {"rep_len": rep_len})
        self.rep_len = rep_len

    @classmethod
    def check_values(cls, args: dict[str, Any]) -> None:
        _check_args(cls.name, args)
        super().check_values(args)

    def compute_stat(self, table: pa.Table) -> pa.Array:
        cps, starts = codepoints(text_array(table, self.text_key))
        rows = len(starts) - 1
        windows, singles, rep_row, rep_size = ngram_groups(cps, starts, self.rep_len)
        rep_size = rep_size[np.lexsort((-rep_size, rep_row))]  # per row, largest first
        first = np.zeros(rows + 1, np.int64)
        np.cumsum(np.bincount(rep_row, minlength=rows), out=first[1:])
        cum = np.zeros(len(rep_size) + 1, np.int64)
        np.cumsum(rep_size, out=cum[1:])
        num_repeated = np.diff(first)
        distinct = singles + num_repeated
        take = np.minimum(np.sqrt(distinct.astype(np.float64)).astype(np.int64), num_repeated)
        return pa.array(ratio(cum[first[:-1] + take] - cum[first[:-1]], windows))


@register
class WordRepetitionFilter(StatRangeFilter):
    """Keep samples whose word n-gram repetition (stat ``word_rep_ratio``) is in
    [min_ratio, max_ratio].

    Over DJ's refined words (``word_tokens``), the share of n-gram positions
    whose n-gram occurs more than once; 0.0 with fewer than ``rep_len``
    words.  With ``tokenization: true`` the words are the pieces of the
    SentencePiece model ``{lang}.sp.model`` (never downloaded: a missing one
    fails validation with where to put it), lower-cased and stripped the
    same way.  DJ compares n-grams as their words joined by ' ', so a row
    whose pieces contain a space (a model trained without whitespace
    escaping) is counted DJ's way in Python.
    """

    name = "word_repetition_filter"
    bounds = ratio_bounds("word_rep_ratio", 0.0, 0.5, after="rep_len")

    def __init__(
        self, *, lang: str = "en", tokenization: bool = False, rep_len: int = 10, text_key: str = "text", **common: Any
    ) -> None:
        super().__init__(text_key=text_key, **common)
        _check_args(self.name, {"rep_len": rep_len})
        self.lang, self.tokenization, self.rep_len = lang, tokenization, rep_len
        self.model_path = require_sentencepiece(lang, op=self.name) if tokenization else None

    @classmethod
    def check_values(cls, args: dict[str, Any]) -> None:
        _check_args(cls.name, args, "sentencepiece")
        super().check_values(args)

    def setup(self) -> None:
        if self.model_path:
            load_sentencepiece(self.model_path)

    def compute_stat(self, table: pa.Table) -> pa.Array:
        arr = text_array(table, self.text_key)
        if self.model_path is None:
            ids, starts = word_tokens(arr)
            windows, singles, _, _ = ngram_groups(ids, starts, self.rep_len)
            return pa.array(ratio(windows - singles, windows))
        words, starts = piece_words(load_sentencepiece(self.model_path), arr, lower=True)
        ids = pc.dictionary_encode(words).indices.to_numpy(zero_copy_only=False).astype(np.int64)
        windows, singles, _, _ = ngram_groups(ids, starts, self.rep_len)
        out = ratio(windows - singles, windows)
        spaced = pc.match_substring(words, " ").to_numpy(zero_copy_only=False)
        if spaced.any():  # DJ's joined-string keys can merge different n-grams: count those rows its way
            rows = np.unique(np.searchsorted(starts, np.flatnonzero(spaced), side="right") - 1)
            values = words.to_pylist()
            for r in rows.tolist():
                out[r] = _joined_ngram_ratio(values[starts[r] : starts[r + 1]], self.rep_len)
        return pa.array(out)


def _joined_ngram_ratio(words: list[str], n: int) -> float:
    """DJ's word_rep_ratio for one row, n-grams keyed by ' '.join (the rare rows the ids can't do)."""
    counts = Counter(" ".join(words[i : i + n]) for i in range(len(words) - n + 1))
    total = sum(counts.values())
    return sum(c for c in counts.values() if c > 1) / total if total else 0.0
