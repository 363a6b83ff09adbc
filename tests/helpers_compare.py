"""Comparing large outputs (exports, checkpoints) in tests: a short answer, never a diff of megabytes.

Why: ``assert a == b`` on two byte strings makes pytest compute a character diff of them when they
differ, which for a few megabytes of long JSON lines runs for many minutes (a suite hung on it).
``assert_same_bytes`` compares without pytest's rewriting and, when they differ, names the first
differing line (the export's row), both versions of it cut short, the sizes and each side's hash.
``tests/unit/test_test_style.py`` finds raw ``==`` asserts on exports and files so it stays so."""

from __future__ import annotations

import xxhash

_SHOWN = 300  # characters of each differing line in the message


def _cut(line: bytes) -> str:
    text = line.decode("utf-8", "replace")
    return text if len(text) <= _SHOWN else text[:_SHOWN] + f"... ({len(text)} chars)"


def first_difference(actual: bytes | str, expected: bytes | str) -> str | None:
    """None when equal; else a few lines saying where and how the two differ (text is compared as UTF-8)."""
    actual = actual.encode() if isinstance(actual, str) else actual
    expected = expected.encode() if isinstance(expected, str) else expected
    if actual == expected:
        return None
    a_lines, e_lines = actual.split(b"\n"), expected.split(b"\n")
    row = next((i for i, (x, y) in enumerate(zip(a_lines, e_lines)) if x != y), min(len(a_lines), len(e_lines)))
    offset = next((i for i, (x, y) in enumerate(zip(actual, expected)) if x != y), min(len(actual), len(expected)))
    return "\n".join(
        [
            f"actual {len(actual)} bytes, {len(a_lines) - 1} lines, xxh3_128 {xxhash.xxh3_128_hexdigest(actual)}",
            f"expected {len(expected)} bytes, {len(e_lines) - 1} lines, xxh3_128 {xxhash.xxh3_128_hexdigest(expected)}",
            f"first difference at byte {offset}, line {row} (0-based)",
            f"  actual:   {_cut(a_lines[row]) if row < len(a_lines) else '(no such line)'}",
            f"  expected: {_cut(e_lines[row]) if row < len(e_lines) else '(no such line)'}",
        ]
    )


def assert_same_bytes(actual: bytes | str, expected: bytes | str, message: str = "the bytes differ") -> None:
    """Raise AssertionError with ``message`` and the first differing line unless the two are equal."""
    problem = first_difference(actual, expected)
    if problem is not None:
        raise AssertionError(f"{message}\n{problem}")
