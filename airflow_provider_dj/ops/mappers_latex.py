"""LaTeX cleaners of Data-Juicer's arXiv recipe: headers, comments, bibliography, macros.

remove_header_mapper, remove_comments_mapper, remove_bibliography_mapper and
expand_macro_mapper, with Data-Juicer 1.6.1's arguments and results (its
patterns come from RedPajama's arXiv cleaner and compile with the ``regex``
package, per row).

Three of them are whole-column RE2 kernels.  Their patterns are fixed (no
user input), and each RE2 form below is argued construct by construct in the
op's docstring and proven on real LaTeX sources by the conformance fixtures
in ``tests/conformance/mappers_latex/`` (made by Data-Juicer itself).  The
fourth, expand_macro_mapper, depends on each document's own definitions, so
it runs per row with ``regex``, but only on the rows that define a macro.
Row count and order never change; null texts stay null, as in the other
mappers.
"""

from __future__ import annotations

from typing import Any, List, Union

import pyarrow as pa
import pyarrow.compute as pc
import regex

from airflow_provider_dj.ops.base import Mapper, OpArgumentError
from airflow_provider_dj.ops.mappers_text import python_rows, with_rows
from airflow_provider_dj.ops.registry import register
from airflow_provider_dj.ops.text_kernels import replace_text, text_array

# --- remove_header_mapper ------------------------------------------------------
# Data-Juicer's header alternatives, in its order.  Its pattern wraps each in
# \b...\b; both boundaries always hold where a header matches (a backslash
# before the name, and one of "*", "[" or "{" after it), so RE2, whose \b is
# ASCII-only, needs none.
_HEADER_NAMES = ("chapter", "part", "section", "subsection", "subsubsection", "paragraph", "subparagraph")
_HEADER = r"\\(?:" + "|".join(_HEADER_NAMES) + r")\*?(?:\[.*?\])?\{.*?\}"
# DJ substitutes ^(.*?)(HEADER) by \2 under DOTALL: everything before the first
# header goes, the header and the rest stay.
_UP_TO_FIRST_HEADER = r"(?s)\A.*?(" + _HEADER + ")"


@register
class RemoveHeaderMapper(Mapper):
    """Drop everything before a LaTeX document's first sectioning command.

    The first ``\\chapter``, ``\\part``, ``\\section``, ``\\subsection``,
    ``\\subsubsection``, ``\\paragraph`` or ``\\subparagraph`` (optionally
    starred, with an optional ``[short title]``, then ``{title}``, which may
    span lines) is where the text now starts; the preamble and front matter
    before it go.  A text with no such command becomes "" when
    ``drop_no_head`` is true (the default, as in Data-Juicer) and is left
    as it is otherwise.

    Data-Juicer's pattern is ``^(.*?)(HEADER)`` under DOTALL with the header
    as group 2; because the replacement is that group and the rest of the
    text is untouched, the result is the text from the first position where
    a header matches, whatever the lazy groups inside the header pick.  RE2
    finds the same leftmost position, so this is two RE2 kernels (a match
    test for ``drop_no_head``, then the cut), no per-row Python.
    """

    name = "remove_header_mapper"

    def __init__(self, *, drop_no_head: bool = True, text_key: str = "text", **common: Any) -> None:
        super().__init__(text_key=text_key, **common)
        self.drop_no_head = drop_no_head

    def fingerprint_args(self) -> dict[str, Any]:
        return {**super().fingerprint_args(), "drop_no_head": self.drop_no_head}

    def process_table(self, table: pa.Table) -> pa.Table:
        arr = text_array(table, self.text_key)
        has_header = pc.match_substring_regex(arr, pattern="(?s)" + _HEADER)
        out = with_rows(
            arr,
            has_header,
            lambda a: pc.replace_substring_regex(a, pattern=_UP_TO_FIRST_HEADER, replacement="\\1", max_replacements=1),
        )
        if self.drop_no_head:
            # Null texts stay null: only rows known to lack a header become "".
            no_header = pc.invert(pc.fill_null(has_header, True))
            out = pc.if_else(no_header, pa.scalar("", out.type), out)
        return replace_text(table, self.text_key, out)


# --- remove_comments_mapper ----------------------------------------------------
# DJ's patterns verbatim; RE2 reads them the same way: "[^\\]" is any code
# point but a backslash, newline included (RE2's default ClassNL), "." is
# any code point but "\n", and under (?m) "^"/"$" sit after/before "\n" or
# at the text's ends.  So the inline pattern also eats the "\n" before a
# comment line ("a\n% c\nb" -> "a\nb"), and the character just before an
# inline "%" ("x % c" -> "x"), exactly as Data-Juicer does.
_INLINE_COMMENT = r"(?m)[^\\]%.+$"
_COMMENT_LINE = r"(?m)^%.*\n?"


@register
class RemoveCommentsMapper(Mapper):
    """Remove TeX ``%`` comments: inline ones and whole comment lines.

    ``inline``: from the character before an unescaped ``%`` (one that does
    not follow a backslash, so ``50\\%`` stays) to the end of its line, when
    at least one character follows the ``%``.  ``multiline``: then every line
    that starts with ``%``, with its newline.  These are Data-Juicer's rules,
    quirks included: the character before an inline ``%`` goes with it, and
    because that character may be the newline ending the previous line, a
    comment line in the middle of a text is joined to its predecessor's end
    rather than left as an empty line.

    ``doc_type`` is Data-Juicer's argument, a name or a list of names; like
    Data-Juicer 1.6.1 (whose own arXiv recipe passes ``['md', 'tex']``), this
    op removes TeX comments whatever it says.  It is checked for shape only.

    Vectorized: one RE2 substitution per enabled rule, on rows holding a
    ``%`` only (see the module docstring for why RE2 reads these patterns
    the way ``regex`` does).
    """

    name = "remove_comments_mapper"

    def __init__(
        self,
        *,
        doc_type: Union[str, List[str]] = "tex",
        inline: bool = True,
        multiline: bool = True,
        text_key: str = "text",
        **common: Any,
    ) -> None:
        super().__init__(text_key=text_key, **common)
        self.doc_type = doc_type
        self.inline = inline
        self.multiline = multiline

    @classmethod
    def check_values(cls, args: dict[str, Any]) -> None:
        doc_type = args.get("doc_type", "tex")
        types = [doc_type] if isinstance(doc_type, str) else list(doc_type)
        if not types or not all(isinstance(t, str) for t in types):
            raise OpArgumentError(
                "doc_type",
                f"remove_comments_mapper: doc_type must be a document type name or a non-empty list of "
                f"them (e.g. tex or ['md', 'tex']), got {doc_type!r}",
            )

    def fingerprint_args(self) -> dict[str, Any]:
        return {**super().fingerprint_args(), "inline": self.inline, "multiline": self.multiline}

    def process_table(self, table: pa.Table) -> pa.Table:
        arr = text_array(table, self.text_key)
        if not (self.inline or self.multiline):
            return table

        def strip_comments(sub: pa.Array) -> pa.Array:
            if self.inline:
                sub = pc.replace_substring_regex(sub, pattern=_INLINE_COMMENT, replacement="")
            if self.multiline:
                sub = pc.replace_substring_regex(sub, pattern=_COMMENT_LINE, replacement="")
            return sub

        out = with_rows(arr, pc.match_substring(arr, pattern="%"), strip_comments)
        return replace_text(table, self.text_key, out)


# --- remove_bibliography_mapper --------------------------------------------------
# DJ's alternatives followed by ".*$" under DOTALL: the greedy ".*" runs to the
# end of the text, so the match always ends there and "$" (which could also
# sit before a final "\n") never changes it.  RE2's ".*" then "\z" is the same.
_BIBLIOGRAPHY_TO_END = (
    r"(?s)(?:\\appendix|\\begin\{references\}|\\begin\{REFERENCES\}|\\begin\{thebibliography\}"
    r"|\\bibliography\{.*\}).*"
)


@register
class RemoveBibliographyMapper(Mapper):
    """Cut a LaTeX document at its appendix or bibliography, to the end of the text.

    The text is cut at the first ``\\appendix``, ``\\begin{references}``,
    ``\\begin{REFERENCES}``, ``\\begin{thebibliography}`` or
    ``\\bibliography{`` (the last only when a ``}`` follows somewhere after
    it), and everything from there on goes, trailing newline included:
    Data-Juicer's rule.  ``\\bibliographystyle{...}`` is not a cut point,
    but being usually just before ``\\bibliography{...}`` it goes with it.

    One RE2 substitution over the column (see the pattern's comment for why
    RE2 and ``regex`` agree).
    """

    name = "remove_bibliography_mapper"

    def __init__(self, *, text_key: str = "text", **common: Any) -> None:
        super().__init__(text_key=text_key, **common)

    def process_table(self, table: pa.Table) -> pa.Table:
        arr = text_array(table, self.text_key)
        out = with_rows(
            arr,
            pc.match_substring(arr, pattern="\\"),
            lambda a: pc.replace_substring_regex(a, pattern=_BIBLIOGRAPHY_TO_END, replacement="", max_replacements=1),
        )
        return replace_text(table, self.text_key, out)


# --- expand_macro_mapper -----------------------------------------------------------
# Definitions without arguments, as Data-Juicer reads them (MULTILINE, so the
# closing brace must end its line; the value is the shortest such run).
_NEWCOMMAND = regex.compile(r"\\\bnewcommand\b\*?\{(\\[a-zA-Z0-9]+?)\}\{(.*?)\}$", flags=regex.MULTILINE)
_DEF = regex.compile(r"\\def\s*(\\[a-zA-Z0-9]+?)\s*\{(.*?)\}$", flags=regex.MULTILINE)
# A row can define a macro only if it holds one of these (the \b before
# "newcommand" always holds after a backslash).
_DEFINES_MACRO = r"\\newcommand|\\def"


def macro_definitions(text: str) -> dict[str, str]:
    """``{"\\name": value}`` of a text's argument-free ``\\newcommand``/``\\def`` macros.

    In Data-Juicer's order: all ``\\newcommand`` definitions, then all
    ``\\def`` ones; a name defined twice keeps its first place in that order
    and its last value.
    """
    macros: dict[str, str] = {}
    for pattern in (_NEWCOMMAND, _DEF):
        for m in pattern.finditer(text):
            macros[m.group(1)] = m.group(2)
    return macros


def expand_macros(text: str) -> str:
    """Inline-expand a text's argument-free macros, one macro after another.

    Each macro in turn replaces every ``\\name`` followed by a character
    other than an ASCII letter or digit (the character stays; a ``\\name``
    at the very end of the text is not expanded), throughout the text,
    definitions included.  Expansion is sequential, so a value inserted by
    one macro is expanded by the macros after it, not by those before.

    Data-Juicer passes the value, ``unicode-escape``-encoded, as a ``regex``
    replacement template; that template decodes back to the value itself
    for every character (the conformance generator checks this over all of
    Unicode), so the value is inserted literally here, with no template
    parsing.
    """
    for name, value in macro_definitions(text).items():
        if name not in text:
            continue
        pattern = regex.compile("(" + regex.escape(name) + ")([^a-zA-Z0-9])")
        text = pattern.sub(lambda m, v=value: v + m.group(2), text)
    return text


@register
class ExpandMacroMapper(Mapper):
    """Expand a LaTeX document's own argument-free macros in place.

    Macros defined in the document as ``\\newcommand{\\name}{value}`` (or
    ``\\newcommand*``) or ``\\def\\name{value}``, with the closing brace at
    the end of its line, are substituted wherever ``\\name`` occurs not
    followed by a letter or digit.  Macros that take arguments
    (``\\newcommand{\\f}[1]{...}``) are left alone, as are
    ``\\renewcommand`` definitions: Data-Juicer's rules, which
    ``expand_macros`` spells out.

    Definitions differ per document, so this runs per row with ``regex``
    (Data-Juicer's engine); rows without ``\\newcommand`` or ``\\def``
    cannot define a macro and are skipped by a vectorized test.
    """

    name = "expand_macro_mapper"

    def __init__(self, *, text_key: str = "text", **common: Any) -> None:
        super().__init__(text_key=text_key, **common)

    def process_table(self, table: pa.Table) -> pa.Table:
        arr = text_array(table, self.text_key)
        out = python_rows(arr, pc.match_substring_regex(arr, pattern=_DEFINES_MACRO), expand_macros)
        return replace_text(table, self.text_key, out)
