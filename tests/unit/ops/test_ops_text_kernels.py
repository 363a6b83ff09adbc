"""The exact-Python text kernels (the pattern -> RE2 translator is tested in test_patterns.py)."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from airflow_provider_dj.ops.kernels import text as tk
from airflow_provider_dj.ops.kernels.patterns import to_re2


def test_regex_module_space_semantics() -> None:
    re2 = to_re2("\\s")
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


def test_the_shipped_lowercase_mismatch_class_is_what_the_installed_versions_compute():
    """``py_lower`` reads the characters Arrow lowercases unlike Python from a table keyed by the Arrow
    and Unicode versions (scanning every code point costs each process about 0.6 CPU-s).  The suite's
    pinned versions must be in the table, with exactly the class those versions compute."""
    import unicodedata

    import pyarrow as pa

    from airflow_provider_dj.ops.kernels import text

    key = (pa.__version__, unicodedata.unidata_version)
    assert key in text.KNOWN_LOWER_MISMATCH, (
        f"no lowercase mismatch class for pyarrow {key[0]} with Unicode {key[1]}: add "
        "text._computed_lower_mismatch_class() for them to KNOWN_LOWER_MISMATCH"
    )
    assert text.KNOWN_LOWER_MISMATCH[key] == text._computed_lower_mismatch_class()
    assert text._lower_mismatch_class() == text.KNOWN_LOWER_MISMATCH[key]
