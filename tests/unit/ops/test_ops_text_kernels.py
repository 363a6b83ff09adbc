"""The Python-regex -> RE2 translator and the exact-Python text kernels."""

from __future__ import annotations

import random
import re

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from airflow_provider_dj.ops import text_kernels as tk


@pytest.mark.parametrize(
    "pattern",
    [
        "a*",  # can match empty
        "\\bfoo",
        "foo$",
        "(?<=a)b",
        "(?=a)a",
        "(a)\\1",
        "(?i)abc",
        "(?a)\\d+",
        "\\w+@",
        "[a\\D]x",
        "(?>ab)c",
        "a++",
        "(?-s:.)x",
        "a{1001}",
    ],
)
def test_untranslatable(pattern: str) -> None:
    assert tk.translate_to_re2(pattern) is None


TRANSLATABLE = [
    "[A-Za-z0-9.\\-+_]+@[a-z0-9.\\-+_]+\\.[a-z]+",
    "a.c",
    "\\d{2,3}?x",
    "[^\\s@]+@",
    "\\S+",
    "(?:ab|a)(?P<g>bc|b)",
    "^ab",
    "\\Aab",
    "ab\\Z",
    "x[^a-c]{1,}",
    "(?x) a b  # comment",
    "(?s)a.b",
    "[\\d.]+",
]


@pytest.mark.parametrize("pattern", TRANSLATABLE)
def test_translation_agrees_with_python(pattern: str) -> None:
    re2 = tk.translate_to_re2(pattern)
    assert re2 is not None
    rng = random.Random(pattern)
    alphabet = list("abcxy0123.-@ \n") + ["\x1c", "١", "\u3000"]
    texts = ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 25))) for _ in range(400)]
    ours = pc.replace_substring_regex(pa.array(texts), pattern=re2, replacement="<>").to_pylist()
    rx = re.compile(pattern, re.DOTALL)
    for text, got in zip(texts, ours):
        if "\x1c" in text and "s" in pattern.lower():
            continue  # re's \s includes U+001C, DJ's regex module (which we follow) does not
        assert got == rx.sub("<>", text), (pattern, text)


def test_regex_module_space_semantics() -> None:
    re2 = tk.translate_to_re2("\\s")
    assert re2 is not None
    out = pc.replace_substring_regex(pa.array(["a\x1cb\x85c\u3000d"]), pattern=re2, replacement="_")
    assert out.to_pylist() == ["a\x1cb_c_d"]


def test_py_lower_exact() -> None:
    texts = ["ΣΑΣ Σ", "İstanbul", "ABC", "\u1c89x", None, "ǅ"]
    got = tk.py_lower(pa.array(texts)).to_pylist()
    assert got == [t.lower() if t is not None else None for t in texts]


def test_py_strip_exact() -> None:
    every_space = "".join(chr(c) for c in range(0x10000) if chr(c).isspace())
    texts = [every_space + "x" + every_space, "\u200bx\u200b", "\ufeffx"]
    assert tk.py_strip(pa.array(texts)).to_pylist() == [t.strip() for t in texts]


def test_hash128_distinguishes_and_repeats() -> None:
    arr = pa.array(["a", "b", "a", "", None])
    keys = tk.hash128(arr).to_pylist()
    assert keys[0] == keys[2] and keys[0] != keys[1] and keys[3] == keys[4]
    assert all(len(k) == 16 for k in keys)
