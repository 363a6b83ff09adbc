"""Hand-written inputs for the text- and field-filter conformance fixtures.

``generate.py`` writes each set to ``inputs/<set>.jsonl`` (rows get an
``id``) and runs it through Data-Juicer.  Every row targets an edge case
(comments say which).  No null texts: DJ's ops crash on them (null handling
is covered by the unit tests instead).
"""

from __future__ import annotations

# Characters whose classification differs between the predicates involved.
TRICKY = [
    "١٢٣",  # Arabic-Indic digits: isalnum, not special
    "²½Ⅻ",  # superscript, fraction, Roman numeral: isalnum (isdigit / isnumeric)
    "e\u0301",  # combining acute: not alnum, not special
    "ǅª",  # titlecase letter, feminine ordinal: alnum
    "Гг",  # Cyrillic capital Ghe is in DJ's special list, its lowercase is not
    "πΠ",  # small pi special, capital not
    "ɪƗ",  # small-capital I special
    "\u3000\xa0\u200b\ufeff",  # ideographic space, NBSP (not special), ZWSP, BOM
    "🙂",  # one-code-point emoji: special
    "👍🏽",  # thumbs up + skin tone: both code points special
    "❤️",  # heart + variation selector (FE0F not special)
    "٪",  # Arabic percent sign: special
    "_",
]

ALPHANUMERIC = [
    "",
    "abc",
    "abc123",
    "!!!",
    "a!!!",  # exactly 0.25: kept by default (closed), dropped by an open min
    "ab!!!!!!",  # 0.25 too
    "ab!!",  # 0.5
    "abc!",  # 0.75: at the upper bound of the range variants
    "a b c",  # spaces are not alnum: 0.6
    "中文字符",  # CJK: alnum
    "数据，清洗。",  # full-width punctuation
    "🙂🙂🙂a",
    "a" * 7 + "!" * 3,  # 0.7
    "x!" * 5,  # 0.5
    "1/3 of it",  # 5/9 = 0.5555555555555556
    "one, two; three...",  # 11/18
    "\t\n\r",
    "a\u0301b\u0301",
    "tab\tand\nnewline",
    "ℌ𝔢𝔩𝔩𝔬",  # non-BMP mathematical letters: alnum
    "🙂",
] + TRICKY

SPECIAL = [
    "",
    "abc",
    "!!!",
    "a!aa",  # exactly 0.25: kept by default (closed max)
    "a!aaa",  # 0.2
    "a!!a",  # 0.5
    "a b",  # space is special
    "123",  # ASCII digits are special
    "abc 123",
    "hello, world!",  # 3/13
    "中文，标点。",  # full-width comma/full stop: FF0C special, 3002 special
    "emoji 🙂 here",
    "price: $5.00",
    "\t\n",
    "plain text with a few words",
    "CAPS AND lower",
    "x" * 9 + "!",  # 0.1: at the lower bound of the range variants
    "x" * 8 + "!!",
    "🙂a🙂a",
    "one/two\\three",
    "«quoted»",
    "•bullet",
    "2+2=4",
] + TRICKY

LINES = [
    "",
    "\n",  # one empty line
    "\n\n",
    "a",
    "0123456789",  # one line of exactly 10
    "012345678\n",  # 10 chars, one line (trailing break adds none)
    "012345678\n012345678\n",  # 20 / 2 = 10.0
    "abc\ndef\nghij",
    "abc\r\ndef",  # \r\n is one break: 8 / 2
    "abc\r\rdef",  # two breaks: an empty line between
    "\r\n\r\n",  # 4 / 2
    "\r\r\n",
    "a\x0bb\x0cc",  # vertical tab and form feed split lines
    "a\x1cb\x1dc\x1ed",  # file/group/record separators split lines
    "a\x85b",  # NEL
    "a\u2028b\u2029c",  # line and paragraph separators
    "a\tb\u3000c",  # tab and ideographic space do not
    "short\n" + "x" * 30,  # max 30, avg 36 / 2
    "x" * 30 + "\nshort",
    "x" * 11 + "\n" + "y" * 9,  # avg 21 / 2 = 10.5
    "x" * 9 + "\n" + "y" * 9,  # avg 19 / 2 = 9.5
    "ab\ncd\nef",  # 8 / 3 = 2.6666666666666665
    "a\nbb\nccc\ndddd\neeeee\nffffff\nggggggg",
    "中文第一行\n第二行更长一些了吧",
    "🙂🙂🙂🙂🙂\n🙂",  # non-BMP: one character each
    "\n\nlast line only has text",
    "trailing spaces   \n   leading",
    "x" * 5,  # exactly 5: lower bound of the range variants
    "x" * 10 + "\n" + "x" * 10,  # max exactly 10
    "x" * 4 + "\r\n" + "x" * 4,
]

CHAR_REPETITION = [
    "",
    "short",  # fewer than 10 characters: 0.0
    "0123456789",  # exactly one 10-gram
    "01234567890",
    "a" * 10,
    "a" * 20,  # one distinct 10-gram, 11 times: 1.0
    "ab" * 10,  # two distinct, each repeated
    "abc" * 7,
    "the cat sat on the mat",
    "the cat sat on the mat. the cat sat on the mat.",
    "Hello world! Hello world! Hello world!",
    "no repetition here at all, really none",
    "数据清洗数据清洗数据清洗数据清洗",
    "🙂🙂🙂🙂🙂🙂🙂🙂🙂🙂🙂🙂",  # non-BMP code points
    "🙂a🙂a🙂a🙂a🙂a🙂a🙂a",
    "abcdefghij" * 3 + "klmnopqrst",
    "aaaaaaaaaabbbbbbbbbbaaaaaaaaaa",
    "1234567890" * 2,
    "x y z x y z x y z x y z",
    "lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod",
    "abab",
    "aab",
    "\n\n\n\n\n\n\n\n\n\n\n\n",
    "a\nb\na\nb\na\nb\n",
    "Mississippi Mississippi",
    "abcabcabcxyzxyzxyz",
    "aaaa bbbb aaaa bbbb cccc",
    "ÀÀÀÀ",
    "e\u0301e\u0301e\u0301e\u0301",  # combining marks are code points of their own
    "ab" * 3 + "c" * 10 + "ab" * 3,
]

WORD_REPETITION = [
    "",
    "one",
    "a b c d e f g h i j",  # exactly ten words: one 10-gram
    "a b c d e f g h i j k",
    "the the the the the the the the the the the the",
    "The the THE tHe the the the the the the the",  # lower-cased before counting
    "word, word. word! word? word; word: word- word' word\" word",  # punctuation stripped
    "one two one two one two",
    "a\tb\na\tb\na\tb",  # tab and newline separate words too
    "a\u3000b a\u3000b",  # ideographic space does not separate: one word each
    "a  b   a    b",  # runs of spaces
    "123 456 123 456",  # digit-only words strip to '' and vanish
    "🙂 a 🙂 a 🙂 a",  # emoji-only words vanish
    "数据 清洗 数据 清洗",
    "数据清洗数据清洗",  # no spaces: one word
    "ΟΔΟΣ ΟΔΟΣ οδος οδοσ",  # final sigma: 'οδος' vs 'οδοσ' stay different
    "İstanbul istanbul",  # dotted capital I lower-cases to i + U+0307
    "Гора гора ГОРА",  # Cyrillic capital Ghe is special but lower-cases first
    "Πα πα",  # capital pi is not special but lower-cases to small pi, which is: both become 'α'
    "(x) [x] {x} <x>",
    "--x-- x --x",
    "a b a b a b a b a b a b a b a b a b a b a b a b",
    "to be or not to be that is the question",
    "x y z x y z x y z x y z x y z",
    "alpha beta gamma delta epsilon zeta eta theta iota kappa alpha beta",
    "... ... ...",  # only special characters
    "café cafe CAFÉ",
    "a-b a-b a-b",  # inner special characters stay
    "ǅemal ǆemal",  # titlecase dz lower-cases to the lowercase digraph
    "a b c a b c d",
]

SUFFIX = [
    {"text": "a", "__dj__suffix__": ".jsonl"},
    {"text": "b", "__dj__suffix__": ".txt"},
    {"text": "c", "__dj__suffix__": ".md"},
    {"text": "d", "__dj__suffix__": "txt"},  # no dot: only matches a literal 'txt'
    {"text": "e", "__dj__suffix__": ".TXT"},  # case-sensitive
    {"text": "f", "__dj__suffix__": ""},
    {"text": "g", "__dj__suffix__": None},  # None is never in a list of strings
    {"text": "h", "__dj__suffix__": ".json"},
    {"text": "i", "__dj__suffix__": ".txt.gz"},
    {"text": "j", "__dj__suffix__": ".txt"},
]


def _meta(source=None, quality=None, tags=None, score=None, flag=None, level=None, n=None) -> dict:
    return {
        "source": source,
        "quality": quality,
        "tags": tags,
        "score": score,
        "flag": flag,
        "nested": {"level": level, "n": n},
    }


SPECIFIED_FIELD = [
    {"text": "a", "lang": "en", "meta": _meta("web", 1, ["a"], 1.0, True, "x", 1)},
    {"text": "b", "lang": "zh", "meta": _meta("books", 2, ["a", "b"], 2.0, False, "y", 2)},
    {"text": "c", "lang": "en", "meta": _meta("forum", 3, ["c"], 0.5, True, "x", 3)},
    {"text": "d", "lang": "fr", "meta": _meta(None, None, None, None, None, None, None)},  # nulls
    {"text": "e", "lang": "en", "meta": _meta("web", 0, [], 0.0, False, "z", 0)},  # empty list: vacuously in
    {"text": "f", "lang": None, "meta": _meta("Web", 5, ["a", "c"], 1.5, True, "x", 1)},  # case matters
    {"text": "g", "lang": "en", "meta": _meta("books", 2, ["b", "b"], 2.5, None, "y", None)},
    {"text": "h", "lang": "en", "meta": _meta("web ", 4, ["a", None], 4.0, True, "", 4)},  # trailing space
    {"text": "i", "lang": "de", "meta": _meta("", 1, ["d"], 1.0, False, "x", 1)},
    {"text": "j", "lang": "en", "meta": _meta("web", 2, ["a", "b", "c"], 2.0, True, "y", 2)},
]

# Rows whose path crosses a null mapping: DJ fails exactly those samples
# ('NoneType' has no keys()); with skip_op_error it drops them.
SPECIFIED_FIELD_ERRORS = [
    {"text": "a", "meta": {"source": "web", "inner": {"k": "v"}}},
    {"text": "b", "meta": None},
    {"text": "c", "meta": {"source": "books", "inner": None}},
    {"text": "d", "meta": {"source": None, "inner": {"k": None}}},
    {"text": "e", "meta": {"source": "web", "inner": {"k": "w"}}},
]

# set name -> (op, rows); text-only sets become {"text": ...} rows.
CASES: dict[str, tuple[str, list]] = {
    "alphanumeric_filter": ("alphanumeric_filter", ALPHANUMERIC),
    "special_characters_filter": ("special_characters_filter", SPECIAL),
    "average_line_length_filter": ("average_line_length_filter", LINES),
    "maximum_line_length_filter": ("maximum_line_length_filter", LINES),
    "character_repetition_filter": ("character_repetition_filter", CHAR_REPETITION),
    "word_repetition_filter": ("word_repetition_filter", WORD_REPETITION),
    "suffix_filter": ("suffix_filter", SUFFIX),
    "specified_field_filter": ("specified_field_filter", SPECIFIED_FIELD),
    "specified_field_filter_errors": ("specified_field_filter", SPECIFIED_FIELD_ERRORS),
}
