"""Inputs for the model-backed filters' conformance fixtures (language_id_score_filter, perplexity_filter).

Each set is (op name, rows); a row is a text or a dict (a dict may carry a
``__dj__stats__`` dict that Data-Juicer is given as the sample's stats,
exactly as written: a key that is absent is absent).  Both ops get the same
texts, so one model's quirk shows up next to the other's.
"""

from __future__ import annotations

LONG_LINE = " ".join(["The quick brown fox jumps over the lazy dog and returns a new list of items."] * 300)
LONG_CJK = "数据处理流水线会把文本切成分片并且保存检查点。" * 400
MANY_LINES = "\n".join(f"Line {i} of a document that has many short lines." for i in range(400))

TEXTS = [
    "Return a new list containing all items from the iterable in ascending order.",  # in-domain English
    "THE QUICK BROWN FOX JUMPS OVER THE LAZY DOG.",  # DJ lower-cases before fastText
    "Le renard brun rapide saute par-dessus le chien paresseux.",  # French
    "Der schnelle braune Fuchs springt über den faulen Hund.",  # German, non-ASCII letter
    "El rápido zorro marrón salta sobre el perro perezoso.",  # Spanish
    "Быстрая коричневая лиса прыгает через ленивую собаку.",  # Cyrillic
    "敏捷的棕色狐狸跳过了懒狗。",  # Chinese (one piece for the English tokenizer: unknown)
    "素早い茶色の狐がのろまな犬を飛び越える。",  # Japanese
    "빠른 갈색 여우가 게으른 개를 뛰어넘는다.",  # Korean
    "الثعلب البني السريع يقفز فوق الكلب الكسول.",  # Arabic, right-to-left
    "",  # empty: fastText still sees its end-of-line token; perplexity 0.0 (no pieces)
    "   ",  # spaces only
    "\n",  # a newline only: DJ turns it into a space for fastText; no lines for KenLM
    "first line\nsecond line\n\nfourth line after an empty one",  # several lines, one empty
    "windows\r\nline endings\r\n",  # \r\n is one break for str.splitlines
    "tab\tseparated\twords\tand\u2028a line separator",  # U+2028 splits lines in Python, not for fastText
    "İstanbul ΣΊΣΥΦΟΣ straße ǅemal",  # characters whose lower-casing is special (dotted I, final sigma)
    "emoji 🙂🙂 and symbols ©®™ mixed with words 42 3.14",  # emoji, symbols, digits
    "zxqv jjjj kkkk qqqq wwww",  # gibberish: high perplexity
    "a",  # one letter
    "!!!???...",  # punctuation only
    "null\x00byte and\x0bvertical tab and\x0cform feed",  # control characters
    "e\u0301te\u0301 de\u0301compose\u0301",  # combining accents (NFKC folds them for SentencePiece)
    "ｆｕｌｌｗｉｄｔｈ　ＬＡＴＩＮ　ｔｅｘｔ",  # full-width forms and an ideographic space
    "Mixed English text with 一些中文 and some Русский words.",  # mixed scripts
    LONG_LINE,  # a very long line (~23k characters)
    LONG_CJK,  # a very long line without spaces
    MANY_LINES,  # 400 lines
]

PREFILLED = [
    # Both lang stats present: DJ keeps them whatever the text says.
    {"text": "This is plainly English.", "__dj__stats__": {"lang": "fr", "lang_score": 0.99}},
    # Only one of them: DJ recomputes both.
    {"text": "This is plainly English.", "__dj__stats__": {"lang": "fr"}},
    {"text": "Ceci est clairement du français.", "__dj__stats__": {"lang_score": 0.01}},
    # A perplexity already there is kept; another op's stat is kept beside the new ones.
    {"text": "zxqv jjjj kkkk", "__dj__stats__": {"perplexity": 12.5}},
    {"text": "Return a new list.", "__dj__stats__": {"num_words": 4}},
    {"text": "Nothing computed yet.", "__dj__stats__": {}},
]

CASES = {
    "language_id_score_filter": ("language_id_score_filter", TEXTS),
    "perplexity_filter": ("perplexity_filter", TEXTS),
    "language_id_score_filter_prefilled": ("language_id_score_filter", PREFILLED),
    "perplexity_filter_prefilled": ("perplexity_filter", PREFILLED),
}
