"""Text mappers with Data-Juicer 1.6.1's names, arguments and results.

Each mapper rewrites the text column of a whole Arrow table with vectorized
kernels; row count and order never change, and null texts stay null (DJ
would crash on them, and inventing text for them would hide bad input).
"""

from __future__ import annotations

from typing import Any, Optional

import pyarrow as pa
import pyarrow.compute as pc

from airflow_provider_dj.ops.base import Mapper
from airflow_provider_dj.ops.kernels.patterns import (
    DOTALL,
    check_replacement,
    compile_user_pattern,
    re2_replacement,
    to_re2,
)
from airflow_provider_dj.ops.kernels.text import (
    VARIOUS_WHITESPACES,
    py_strip,
    replace_each_char,
    replace_text,
    strip_raw_prefix,
    text_array,
)
from airflow_provider_dj.ops.registry import register

DEFAULT_EMAIL_PATTERN = r"[A-Za-z0-9.\-+_]+@[a-z0-9.\-+_]+\.[a-z]+"


@register
class CleanEmailMapper(Mapper):
    """Remove (or replace with ``repl``) every e-mail address in the text.

    ``pattern`` defaults to DJ's ``[A-Za-z0-9.\\-+_]+@[a-z0-9.\\-+_]+\\.[a-z]+``;
    note that its domain part is lowercase-only, so ``Bob@Example.COM`` is left
    alone exactly as DJ leaves it.  A custom pattern may be wrapped as
    ``r'...'`` (DJ strips the wrapper) and is compiled, like DJ's, with the
    ``regex`` package and DOTALL (``ops/kernels/patterns.py``), so ``\\p{L}``,
    possessive quantifiers and ``\\X`` work as there.

    Execution: when ``patterns.to_re2`` proves the pattern's RE2 form matches
    exactly what ``regex`` matches (literals, sets, ``.``, \\d, \\s, groups,
    alternation, repeats, ``^``) and ``repl`` has no backslash, the
    substitution runs as one vectorized RE2 kernel; the default pattern always
    does.  Anything else runs row by row with ``regex`` itself.  A pattern or
    ``repl`` that does not compile is refused at validation, naming the
    position, so a recipe never fails mid-run.
    """

    name = "clean_email_mapper"

    def __init__(self, *, pattern: Optional[str] = None, repl: str = "", text_key: str = "text", **common: Any) -> None:
        super().__init__(text_key=text_key, **common)
        self.pattern = DEFAULT_EMAIL_PATTERN if pattern is None else strip_raw_prefix(pattern)
        self.repl = repl
        self._compiled = compile_user_pattern(self.pattern, op=self.name, arg="pattern", flags=DOTALL)
        self._re2 = to_re2(self.pattern, DOTALL) if re2_replacement(repl) is not None else None

    @classmethod
    def check_values(cls, args: dict[str, Any]) -> None:
        pattern = args.get("pattern")
        raw = DEFAULT_EMAIL_PATTERN if pattern is None else strip_raw_prefix(pattern)
        compiled = compile_user_pattern(raw, op=cls.name, arg="pattern", flags=DOTALL)
        check_replacement(compiled, args.get("repl", ""), op=cls.name)

    def process_table(self, table: pa.Table) -> pa.Table:
        arr = text_array(table, self.text_key)
        if self._re2 is not None:
            out = pc.replace_substring_regex(arr, pattern=self._re2, replacement=self.repl)
        else:
            sub, repl = self._compiled.sub, self.repl
            out = pa.array([None if s is None else sub(repl, s) for s in arr.to_pylist()], arr.type)
        return replace_text(table, self.text_key, out)


@register
class WhitespaceNormalizationMapper(Mapper):
    """Trim the text, then turn each of DJ's VARIOUS_WHITESPACES into ' '.

    Order matters and is DJ's: the trim is Python's ``str.strip()`` (every
    ``str.isspace()`` character, e.g. U+001C..U+001F and U+0085), and the
    replacement set is DJ's own list (tab, NBSP, U+2000..U+200D, U+3000,
    U+FFFC, ... but not "\\n", and U+0084 rather than U+0085).  Zero-width
    characters are not ``isspace()``, so a text starting with U+200B keeps a
    leading ' ' after normalization, just as in DJ.
    """

    name = "whitespace_normalization_mapper"

    def __init__(self, *, text_key: str = "text", **common: Any) -> None:
        super().__init__(text_key=text_key, **common)

    def process_table(self, table: pa.Table) -> pa.Table:
        arr = py_strip(text_array(table, self.text_key))
        out = replace_each_char(arr, VARIOUS_WHITESPACES - {" "}, " ")
        return replace_text(table, self.text_key, out)
