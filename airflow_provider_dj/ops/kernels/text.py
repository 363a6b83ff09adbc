"""Vectorized text kernels that reproduce Data-Juicer's Python-level semantics.

Data-Juicer's text ops are written as per-row Python (``str.strip()``,
``str.lower()``, the ``regex`` module).  Arrow's compute kernels (RE2 for
regexes, utf8proc for case mapping) are much faster but do not always agree
with Python, so every kernel here is pinned to the exact Python behaviour:

* character sets Data-Juicer hard-codes (its SPECIAL_CHARACTERS and
  VARIOUS_WHITESPACES, and what the ``regex`` module's ``\\s`` / ``\\d``
  match) are spelled out below as code-point ranges, so RE2 classes can be
  built from them without ever importing Data-Juicer, ``regex`` or ``emoji``.
  ``tests/conformance`` checks them against a dump from the reference venv;
* ``py_strip`` trims exactly the characters ``str.isspace()`` accepts;
* ``py_lower`` uses ``utf8_lower`` except on rows holding a character whose
  Python lowercase differs (U+0130, final sigma, Unicode-version drift), which
  are lowered by Python itself;
* user-written patterns (and their RE2 translation, where it is provably
  exact) live in ``ops/kernels/patterns.py``, which builds on the sets above.
"""

from __future__ import annotations

import functools
import unicodedata

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import xxhash

# Single code points of DJ's SPECIAL_CHARACTERS (string.punctuation, digits,
# whitespace, its hand-made list and every one-code-point emoji of the
# ``emoji`` package).  Multi-code-point emoji never equal one character, so
# they never matter for its character-wise strip.
_SPECIAL_RANGES = (
    "9-D 20-40 5B-60 7B-7E 81-85 91-93 95-99 9C-9D A1-AB AD-B4 B7-BF D7 F7-F8 131 26A 2BA-2BC "
    "2C8 2CC 2D0 2D8 2DA 2DC 3C0 413 60C 647 66A 66C 6E9 93E 940 947 94D 97D 9BE E51 2002-2003 "
    "2005 2008-200B 2010-2011 2013-2016 2018-201A 201C-2020 2022 2024 2026 202F-2030 2032-2033 "
    "2039-203A 203C 203F 2043-2044 2049 20A8 20AA 20AC 2103 2122 2139 2190-2199 21A9-21AA 21D3 "
    "2206 2208 2212 221A 221E-221F 223C 2248 2256 2264-2265 2295 22C5 231A-231B 2328 23CF "
    "23E9-23F3 23F8-23FA 24C2 2550 25A0 25AA-25AC 25B2 25B4 25B6-25B7 25BA-25BC 25C0 25C6 25CF "
    "25E6 25FB-25FE 2600-2606 260E 2611 2614-2615 2618 261B 261D 2620 2622-2623 2626 262A "
    "262E-262F 2638-263B 2640 2642 2648-2653 265F-2661 2663 2665-2666 2668 266B 267B 267E-267F "
    "2692-2697 2699 269B-269C 26A0-26A1 26A7 26AA-26AB 26B0-26B1 26BD-26BE 26C4-26C5 26C8 "
    "26CE-26CF 26D1 26D3-26D4 26E9-26EA 26F0-26F5 26F7-26FA 26FD 2702 2705 2708-270D 270F "
    "2712-2714 2716 271D 2721 2726 2728 2731 2733-2734 2744 2747 274C 274E 2753-2757 2763-2764 "
    "2795-2797 27A1 27A4 27A9 27B0 27BF 2800 2934-2935 2B05-2B07 2B1B-2B1C 2B50 2B55 3000-3002 "
    "300A-300D 3010-3011 3030 303D 309C 30B7 30C3-30C4 30F3 30FB-30FC 3297 3299 4E00 4E0A 58EB "
    "FD3E-FD3F FEFF FF01 FF08-FF09 FF0C FF0E FF11 FF1A-FF1B FF1F FF3E FF5E FFFC-FFFD 1F004 "
    "1F0CF 1F170-1F171 1F17E-1F17F 1F18E 1F191-1F19A 1F201-1F202 1F21A 1F22F 1F232-1F23A "
    "1F250-1F251 1F300-1F321 1F324-1F393 1F396-1F397 1F399-1F39B 1F39E-1F3F0 1F3F3-1F3F5 "
    "1F3F7-1F4FD 1F4FF-1F53D 1F549-1F54E 1F550-1F567 1F56F-1F570 1F573-1F57A 1F587 1F58A-1F58D "
    "1F590 1F595-1F596 1F5A4-1F5A5 1F5A8 1F5B1-1F5B2 1F5BC 1F5C2-1F5C4 1F5D1-1F5D3 1F5DC-1F5DE "
    "1F5E1 1F5E3 1F5E8 1F5EF 1F5F3 1F5FA-1F64F 1F680-1F6C5 1F6CB-1F6D2 1F6D5-1F6D7 1F6DC-1F6E5 "
    "1F6E9 1F6EB-1F6EC 1F6F0 1F6F3-1F6FC 1F7E0-1F7EB 1F7F0 1F90C-1F93A 1F93C-1F945 1F947-1F9FF "
    "1FA70-1FA7C 1FA80-1FA88 1FA90-1FABD 1FABF-1FAC5 1FACE-1FADB 1FAE0-1FAE8 1FAF0-1FAF8"
)
# DJ's VARIOUS_WHITESPACES.  Note U+0084 (not NEL U+0085) and no "\n".
_VARIOUS_WS_RANGES = "9 20 84 A0 2000-200D 202F 205F-2060 3000 FFFC"
# What the ``regex`` module's \s and \d match on str patterns (DJ 1.6.1 venv).
_REGEX_SPACE_RANGES = "9-D 20 85 A0 1680 2000-200A 2028-2029 202F 205F 3000"
_REGEX_DIGIT_RANGES = (
    "30-39 660-669 6F0-6F9 7C0-7C9 966-96F 9E6-9EF A66-A6F AE6-AEF B66-B6F BE6-BEF C66-C6F "
    "CE6-CEF D66-D6F DE6-DEF E50-E59 ED0-ED9 F20-F29 1040-1049 1090-1099 17E0-17E9 1810-1819 "
    "1946-194F 19D0-19D9 1A80-1A89 1A90-1A99 1B50-1B59 1BB0-1BB9 1C40-1C49 1C50-1C59 A620-A629 "
    "A8D0-A8D9 A900-A909 A9D0-A9D9 A9F0-A9F9 AA50-AA59 ABF0-ABF9 FF10-FF19 104A0-104A9 "
    "10D30-10D39 10D40-10D49 11066-1106F 110F0-110F9 11136-1113F 111D0-111D9 112F0-112F9 "
    "11450-11459 114D0-114D9 11650-11659 116C0-116C9 116D0-116E3 11730-11739 118E0-118E9 "
    "11950-11959 11BF0-11BF9 11C50-11C59 11D50-11D59 11DA0-11DA9 11DE0-11DE9 11F50-11F59 "
    "16130-16139 16A60-16A69 16AC0-16AC9 16B50-16B59 16D70-16D79 1CCF0-1CCF9 1D7CE-1D7FF "
    "1E140-1E149 1E2F0-1E2F9 1E4F0-1E4F9 1E5F1-1E5FA 1E950-1E959 1FBF0-1FBF9"
)
_PUNCTUATION = "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"  # string.punctuation

Ranges = list[tuple[int, int]]


def parse_ranges(spec: str) -> Ranges:
    out = []
    for item in spec.split():
        lo, _, hi = item.partition("-")
        out.append((int(lo, 16), int(hi or lo, 16)))
    return out


def ranges_of(chars: str | set[str]) -> Ranges:
    out: list[list[int]] = []
    for cp in sorted({ord(c) for c in chars}):
        if out and out[-1][1] == cp - 1:
            out[-1][1] = cp
        else:
            out.append([cp, cp])
    return [(a, b) for a, b in out]


def charset(spec: str) -> frozenset[str]:
    return frozenset(chr(c) for lo, hi in parse_ranges(spec) for c in range(lo, hi + 1))


SPECIAL_CHARACTERS = charset(_SPECIAL_RANGES)
VARIOUS_WHITESPACES = charset(_VARIOUS_WS_RANGES)
REGEX_SPACE = charset(_REGEX_SPACE_RANGES)
REGEX_DIGIT = charset(_REGEX_DIGIT_RANGES)
PUNCTUATION = frozenset(_PUNCTUATION)
# What str.strip() strips: every str.isspace() character (all lie in the BMP).
PY_WHITESPACE = "".join(c for c in map(chr, range(0x10000)) if c.isspace())


def re2_class(chars: frozenset[str] | set[str] | Ranges, negate: bool = False) -> str:
    """An RE2 bracket expression with every code point escaped as \\x{..}."""
    rng = chars if isinstance(chars, list) else ranges_of(chars)
    body = "".join(f"\\x{{{a:X}}}" if a == b else f"\\x{{{a:X}}}-\\x{{{b:X}}}" for a, b in rng)
    return f"[{'^' if negate else ''}{body}]"


def text_array(table: pa.Table, key: str) -> pa.Array:
    """The text column as one string array (chunking never changes results)."""
    if key not in table.column_names:
        raise KeyError(f"text_key {key!r} is not a column of the dataset (columns: {table.column_names})")
    col = table.column(key)
    if pa.types.is_null(col.type):
        col = col.cast(pa.string())
    if not (pa.types.is_string(col.type) or pa.types.is_large_string(col.type)):
        raise TypeError(f"column {key!r} must hold strings, not {col.type}")
    return col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)


def replace_text(table: pa.Table, key: str, values: pa.Array) -> pa.Table:
    idx = table.column_names.index(key)
    return table.set_column(idx, table.schema.field(idx).with_type(values.type), values)


def py_strip(arr: pa.Array) -> pa.Array:
    """str.strip() with no argument, vectorized (Arrow's own whitespace set is not Python's)."""
    return pc.utf8_trim(arr, characters=PY_WHITESPACE)


#: ``_computed_lower_mismatch_class()`` for the Arrow and Unicode versions it was computed with: scanning
#: every code point costs about 0.6 CPU-s, paid by each process that lowercases (every Ray worker, every
#: ``dj-airflow run``).  Other versions compute it; a unit test fails when the pinned ones drift.
KNOWN_LOWER_MISMATCH = {
    ("26.0.1", "14.0.0"): (
        "[\\x{130}\\x{3A3}\\x{1C89}\\x{A7CB}-\\x{A7CC}\\x{A7CE}\\x{A7D2}\\x{A7D4}\\x{A7DA}\\x{A7DC}-\\x{A7DD}\\x{A7E2}\\x{AB6C}-\\x{AB6D}\\x{10D50}-\\x{10D65}\\x{16EA0}-\\x{16EB8}"
        "\\x{1DF40}\\x{1DF48}\\x{1DF4A}\\x{1DF4D}\\x{1DF51}\\x{1DF68}\\x{1DF6A}\\x{1DF6C}\\x{1DF6E}\\x{1DF72}\\x{1DF74}\\x{1DF76}\\x{1DF78}\\x{1DF7A}\\x{1DF7C}\\x{1DF7E}]"
    ),
}


@functools.lru_cache(maxsize=1)
def _lower_mismatch_class() -> str:
    """Characters whose ``utf8_lower`` differs from ``str.lower()`` (plus Σ, context-dependent)."""
    known = KNOWN_LOWER_MISMATCH.get((pa.__version__, unicodedata.unidata_version))
    return known if known is not None else _computed_lower_mismatch_class()


def _computed_lower_mismatch_class() -> str:
    """``_lower_mismatch_class`` from the installed Arrow and Python, every code point compared."""
    cps = [c for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF]
    chars = [chr(c) for c in cps]
    ours = pc.utf8_lower(pa.array(chars, pa.string()))
    theirs = pa.array([c.lower() for c in chars], pa.string())
    bad = np.asarray(pc.not_equal(ours, theirs))
    mismatched = {chars[i] for i in np.flatnonzero(bad)} | {"\u03a3"}
    return re2_class(mismatched)


def py_lower(arr: pa.Array) -> pa.Array:
    """str.lower() exactly: Arrow for most rows, Python for rows it would get wrong."""
    lowered = pc.utf8_lower(arr)
    odd = pc.fill_null(pc.match_substring_regex(arr, pattern=_lower_mismatch_class()), False)
    if not pc.any(odd).as_py():
        return lowered
    fixed = pa.array([s.lower() for s in arr.filter(odd).to_pylist()], arr.type)
    return pc.replace_with_mask(lowered, odd, fixed)


def _offsets(arr: pa.Array) -> np.ndarray:
    dtype = np.int64 if pa.types.is_large_string(arr.type) else np.int32
    return np.frombuffer(arr.buffers()[1], dtype=dtype)[arr.offset : arr.offset + len(arr) + 1]


def delete_chars(arr: pa.Array, chars: frozenset[str]) -> pa.Array:
    """Delete every character of ``chars``.  Matching runs (``[...]+``) rather
    than single characters gives the same result with far fewer matches,
    which is what a regex replace pays for."""
    return pc.replace_substring_regex(arr, pattern=re2_class(chars) + "+", replacement="")


def replace_each_char(arr: pa.Array, chars: frozenset[str], repl: str) -> pa.Array:
    """Replace every character of ``chars`` by ``repl`` (one by one: runs stay runs)."""
    return pc.replace_substring_regex(arr, pattern=re2_class(chars), replacement=repl)


# --- words ------------------------------------------------------------------
_WORD_PATTERN = "[^ \\n\\t]*" + re2_class(SPECIAL_CHARACTERS, negate=True) + "[^ \\n\\t]*"


def count_words(arr: pa.Array) -> pa.Array:
    """DJ's word count without tokenization, as int64 (null text counts 0).

    DJ splits on ' ', '\\n', '\\t', strips SPECIAL_CHARACTERS from both ends
    of each piece and counts the non-empty survivors.  A piece survives iff it
    holds a non-special character, so counting the separator-delimited runs
    that contain one is the same number.  The pattern's leading run cannot
    cross a separator, so each match starts at a piece's start, and its
    greedy tail runs to the piece's end.  The three separators are themselves
    special, so the negated class never matches them.
    """
    counts = pc.count_substring_regex(arr, pattern=_WORD_PATTERN)
    return pc.fill_null(counts.cast(pa.int64()), 0)


# --- hashing ----------------------------------------------------------------
def hash128(arr: pa.Array) -> pa.FixedSizeBinaryArray:
    """xxh3_128 of each row's UTF-8 bytes (null -> hash of b'')."""
    arr = pc.fill_null(arr, "")
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    n = len(arr)
    if n == 0:
        return pa.array([], pa.binary(16))
    bufs = arr.buffers()
    offsets = _offsets(arr).tolist()
    data = memoryview(bufs[2]) if bufs[2] is not None else memoryview(b"")
    digest = xxhash.xxh3_128_digest
    joined = b"".join([digest(data[offsets[i] : offsets[i + 1]]) for i in range(n)])
    return pa.FixedSizeBinaryArray.from_buffers(pa.binary(16), n, [None, pa.py_buffer(joined)])


def strip_raw_prefix(pattern: str) -> str:
    """DJ accepts patterns written as r'...' / r"..." in YAML and drops the wrapper."""
    if len(pattern) > 2 and (
        (pattern.startswith("r'") and pattern.endswith("'")) or (pattern.startswith('r"') and pattern.endswith('"'))
    ):
        return pattern[2:-1]
    return pattern


__all__ = [
    "PY_WHITESPACE",
    "SPECIAL_CHARACTERS",
    "VARIOUS_WHITESPACES",
    "count_words",
    "delete_chars",
    "hash128",
    "py_lower",
    "py_strip",
    "re2_class",
    "replace_each_char",
    "replace_text",
    "strip_raw_prefix",
    "text_array",
]
