"""The input rows of the words-filter conformance fixtures (one set, every op and variant).

Edge cases: empty and whitespace-only text, punctuation and digits only
(no words survive the strip), case folding (including final sigma and
``ß``), words wrapped in special characters, tabs/newlines/runs of spaces,
CJK without spaces, Vietnamese syllables (for ``use_words_aug``), emoji,
full-width forms, stopwords-only text, and very long lines.
"""

from __future__ import annotations

_LONG_EN = " ".join(["the quick brown fox jumps over the lazy dog and the bad dog"] * 400)
_LONG_ZH = "我们今天去公园散步，天气很好。坏人做坏事。" * 300
_LONG_LINE_NO_SPACE = "abc" * 5000

TEXTS = [
    "",
    " ",
    "\n\t \n",
    "...!!! ??? 42 3.14 -- 🙂",
    "The quick brown fox jumps over the lazy dog.",
    "THE BAD, the Worse; and the DAMN fox!",
    "--bad-- (worse) «ugly» 'fox' \"damn\"",
    "the\tthe\nthe  the   the a of in",
    "Bad bad bad bad bad bad bad bad bad bad bad",
    "ΟΔΟΣ Σ σοφία ΣΟΦΊΑ ς is the a",
    "Straße STRASSE straße strasse",
    "我们今天去公园散步，天气很好。",
    "坏人做坏事，好人做好事。",
    "坏 人 好 坏 人 公 园 散 步",
    "我们 是 的 很 天气",
    "Tôi yêu Việt Nam. Hà Nội là thủ đô của Việt Nam.",
    "việt nam là việt nam là hà nội xấu",
    "Über die Brücke gehen wir jeden Tag zur Arbeit und der Hund",
    "Das ist schlecht, und die Hunde sind SCHLECHT.",
    "ＦＵＬＬ　ｗｉｄｔｈ　ｂａｄ　ｔｅｘｔ！",
    "emoji 🙂 bad👍 👍bad 🙂🙂 the",
    "It is what it is, we are what we are.",
    "a a a a a a a a a a a a a a a a a a a a a",
    "Numbers like 42, 3.14 and 2026 appear in many documents.",
    "line one\nline two\r\nline three\u2028line four",
    _LONG_EN,
    _LONG_ZH,
    _LONG_LINE_NO_SPACE,
]
