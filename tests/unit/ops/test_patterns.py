"""ops/kernels/patterns.py: user patterns compile as Data-Juicer compiles them (``regex``),
bad ones are reported with op, argument, pattern and position, and the RE2 fast
path is taken only where it gives ``regex``'s exact result."""

from __future__ import annotations

import random

import pyarrow as pa
import pyarrow.compute as pc
import pytest
import regex

from airflow_provider_dj.ops.base import OpArgumentError
from airflow_provider_dj.ops.kernels.patterns import (
    DOTALL,
    check_replacement,
    compile_user_pattern,
    re2_equivalent,
    re2_replacement,
    to_re2,
)


@pytest.mark.parametrize(
    "pattern, text, expected",
    [
        ("\\p{P}", "a,b。c「d」!", "abcd"),
        ("\\p{Han}+", "abc中文def漢字", "abcdef"),
        ("\\p{L}++\\d", "abc1 d2", " "),
        ("\\X", "e\u0301x", ""),
        ("[[:digit:]]+", "a12b", "ab"),
    ],
)
def test_regex_only_syntax_compiles_and_matches_like_regex(pattern: str, text: str, expected: str) -> None:
    compiled = compile_user_pattern(pattern, op="some_op", arg="pattern")
    assert compiled.sub("", text) == expected
    assert not re2_equivalent(pattern)  # none of these is in RE2's proven subset


@pytest.mark.parametrize(
    "pattern, pos, near",
    [("(ab", 3, "end of pattern"), ("a**", 2, "near '*'"), ("\\p{NoSuchProperty}", None, None), ("[a-", None, None)],
)
def test_bad_pattern_names_op_arg_pattern_position(pattern: str, pos: int | None, near: str | None) -> None:
    with pytest.raises(OpArgumentError) as info:
        compile_user_pattern(pattern, op="clean_email_mapper", arg="pattern")
    exc = info.value
    assert exc.key == "pattern"
    msg = str(exc)
    assert msg.startswith("clean_email_mapper: pattern ")
    assert repr(pattern) in msg
    expected_pos = regex_error_pos(pattern)
    assert f"at position {expected_pos}" in msg
    if pos is not None:
        assert expected_pos == pos
        assert near in msg


def regex_error_pos(pattern: str) -> int:
    try:
        regex.compile(pattern)
    except regex.error as exc:
        return exc.pos
    raise AssertionError(f"{pattern!r} compiled")


def test_non_string_pattern_is_refused() -> None:
    with pytest.raises(OpArgumentError, match="must be a string pattern"):
        compile_user_pattern(3, op="x_op", arg="ignore_pattern")  # type: ignore[arg-type]


def test_flags_are_passed_to_regex() -> None:
    assert compile_user_pattern("a.b", op="x", arg="p", flags=DOTALL).sub("", "a\nb") == ""
    assert compile_user_pattern("a.b", op="x", arg="p").sub("", "a\nb") == "a\nb"


@pytest.mark.parametrize(
    "repl, problem",
    [("\\2", "refers to group 2"), ("\\", "bad escape"), ("\\q", "bad escape \\q"), ("\\g<nope>", "unknown group")],
)
def test_bad_replacement_is_refused_before_any_match(repl: str, problem: str) -> None:
    compiled = compile_user_pattern("(a)", op="clean_ip_mapper", arg="pattern")
    with pytest.raises(OpArgumentError) as info:
        check_replacement(compiled, repl, op="clean_ip_mapper")
    assert info.value.key == "repl"
    assert problem in str(info.value)
    assert repr(repl) in str(info.value)


@pytest.mark.parametrize("repl", ["", "x", "\\1", "<\\g<1>>", "\\n"])
def test_good_replacement_passes(repl: str) -> None:
    check_replacement(compile_user_pattern("(a)", op="x", arg="pattern"), repl, op="x")


def test_re2_replacement_only_without_backslash() -> None:
    assert re2_replacement("[EMAIL]") == "[EMAIL]"
    assert re2_replacement("\\1") is None


@pytest.mark.parametrize(
    "pattern",
    [
        "a*",  # can match empty: the engines place empty matches differently
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
        "(?m)^ab",  # MULTILINE turns ^ into a line start
        "a{e<=1}",  # regex: fuzzy match; re: literal braces
        "x{1,2",
        "[[:alpha:]]+",  # regex: POSIX class; re: a set of '[', ':', ... and a ']'
        "[a&&b]+",
        "\\p{P}",
        "\\X",
        "(?V1)[[a-z]--[aeiou]]",
    ],
)
def test_outside_the_proven_subset(pattern: str) -> None:
    assert to_re2(pattern) is None
    assert to_re2(pattern, DOTALL) is None


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
    "中文+",
    "[\u4e00-\u9fff]+",
]

ALPHABET = list("abcxy0123.-@ \n") + ["\x1c", "\u0661", "\u3000", "\x85", "中", "文", "\u0301", "🙂"]


@pytest.mark.parametrize("flags", [0, DOTALL])
@pytest.mark.parametrize("pattern", TRANSLATABLE)
def test_re2_translation_agrees_with_regex(pattern: str, flags: int) -> None:
    re2 = to_re2(pattern, flags)
    assert re2 is not None and re2_equivalent(pattern, flags)
    rng = random.Random(pattern)
    texts = ["".join(rng.choice(ALPHABET) for _ in range(rng.randint(0, 25))) for _ in range(400)]
    texts += ["a\nc", "ab\n", "中文文"]
    ours = pc.replace_substring_regex(pa.array(texts), pattern=re2, replacement="<>").to_pylist()
    rx = regex.compile(pattern, flags)
    assert ours == [rx.sub("<>", t) for t in texts]


def _random_pattern(rng: random.Random, depth: int = 0) -> str:
    atoms = ["a", "b", "中", ".", "\\d", "\\s", "\\S", "[ab]", "[^a\\s]", "[0-9.]", "\\.", "-", "\\u0661"]
    parts = []
    for _ in range(rng.randint(1, 3)):
        r = rng.random()
        if r < 0.15 and depth < 2:
            atom = "(" + _random_pattern(rng, depth + 1) + "|" + _random_pattern(rng, depth + 1) + ")"
        else:
            atom = rng.choice(atoms)
        atom += rng.choice(["", "", "+", "*", "?", "{1,2}", "+?", "{2}"])
        parts.append(atom)
    return "".join(parts)


def test_random_patterns_in_the_subset_agree_with_regex() -> None:
    """A differential check over generated patterns: wherever ``to_re2`` says yes, RE2's
    substitution equals ``regex``'s on Unicode, CJK and whitespace-heavy texts."""
    rng = random.Random(11)
    texts = ["".join(rng.choice(ALPHABET) for _ in range(rng.randint(0, 20))) for _ in range(200)]
    arr = pa.array(texts)
    checked = 0
    for _ in range(300):
        pattern = _random_pattern(rng)
        for flags in (0, DOTALL):
            re2 = to_re2(pattern, flags)
            if re2 is None:
                continue
            checked += 1
            ours = pc.replace_substring_regex(arr, pattern=re2, replacement="#").to_pylist()
            rx = regex.compile(pattern, flags)
            assert ours == [rx.sub("#", t) for t in texts], (pattern, flags)
    assert checked > 200  # the generator mostly produces translatable patterns


def test_dot_without_dotall_excludes_only_newline() -> None:
    re2 = to_re2("a.b")
    out = pc.replace_substring_regex(pa.array(["a\nb a\rb a\x85b"]), pattern=re2, replacement="_").to_pylist()
    assert out == [regex.sub("a.b", "_", "a\nb a\rb a\x85b")] == ["a\nb _ _"]


def test_unsupported_flags_refuse_re2() -> None:
    assert to_re2("ab", regex.IGNORECASE) is None
    assert to_re2("ab", regex.MULTILINE) is None
    assert to_re2("ab", regex.DOTALL) is not None
