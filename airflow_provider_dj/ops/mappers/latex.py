"""LaTeX cleaners of Data-Juicer's arXiv recipe: headers, comments, bibliography, macros.

remove_header_mapper, remove_comments_mapper, remove_bibliography_mapper and
expand_macro_mapper, with Data-Juicer 1.6.1's arguments and results (its
patterns come from RedPajama's arXiv cleaner and compile with the ``regex``
package, per row).

Three of them are whole-column kernels.  Their patterns are fixed (no user
input), and each is turned into what it computes: remove_header and
remove_bibliography keep a suffix or a prefix of each text, cut at the
position of a match that an RE2 *find* (a DFA scan, no capture groups)
locates exactly where ``regex`` would; remove_comments decides line by
line, with Arrow's split/join kernels, what DJ's two substitutions remove.
Each equivalence is argued construct by construct next to the code, checked
against ``regex`` with DJ's own patterns on random LaTeX-like text
(tests/unit/ops/test_mappers_latex.py), and proven on real LaTeX sources by
the conformance fixtures in ``tests/conformance/mappers_latex/`` (made by
Data-Juicer itself).  The fourth, expand_macro_mapper, depends on each
document's own definitions, so it runs per row with ``regex``, but only on
the rows that define a macro.  Row count and order never change; null texts
stay null, as in the other mappers.
"""

from __future__ import annotations

import functools
from typing import Any, List, Union

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import regex

from airflow_provider_dj.ops.base import Mapper, OpArgumentError
from airflow_provider_dj.ops.kernels.text import replace_text, text_array
from airflow_provider_dj.ops.mappers.text import python_rows
from airflow_provider_dj.ops.registry import register

# --- remove_header_mapper ------------------------------------------------------
# Data-Juicer's header alternatives, in its order.  Its pattern wraps each in
# \b...\b; both boundaries always hold where a header matches (a backslash
# before the name, and one of "*", "[" or "{" after it), so RE2, whose \b is
# ASCII-only, needs none.
_HEADER_NAMES = ("chapter", "part", "section", "subsection", "subsubsection", "paragraph", "subparagraph")
_HEADER = r"(?s)\\(?:" + "|".join(_HEADER_NAMES) + r")\*?(?:\[.*?\])?\{.*?\}"


# --- shared: cut each text at a byte position ------------------------------------
def _first_match(arr: pa.Array, pattern: str) -> np.ndarray:
    """Byte offset of each row's leftmost match of an RE2 ``pattern`` (-1: none or null)."""
    found = pc.fill_null(pc.find_substring_regex(arr, pattern=pattern), -1)
    return np.asarray(found, dtype=np.int64)


def _string_buffers(arr: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(int64 offsets starting at 0, the UTF-8 bytes they index) of a string array; the bytes are not copied."""
    large = pa.types.is_large_string(arr.type)
    _, off_buf, data_buf = arr.buffers()
    offsets = np.frombuffer(off_buf, dtype=np.int64 if large else np.int32)[arr.offset : arr.offset + len(arr) + 1]
    offsets = offsets.astype(np.int64)
    base, end = int(offsets[0]), int(offsets[-1])
    data = np.frombuffer(data_buf, dtype=np.uint8)[base:end] if data_buf is not None else np.zeros(0, np.uint8)
    return offsets - base, data


def _drop_byte_ranges(
    arr: pa.Array, offsets: np.ndarray, data: np.ndarray, drop_from: np.ndarray, drop_to: np.ndarray, row: np.ndarray
) -> pa.Array:
    """``arr`` without the bytes ``[drop_from[i], drop_to[i])`` (positions in ``data``; ``row[i]`` is
    the row holding range i).  Ranges must be disjoint, in order and end on character
    boundaries; rows without one are unchanged, null rows stay null.

    Done on the Arrow buffers with numpy: the kept/dropped runs between the
    range ends become one byte mask (``np.repeat``; a cumulative sum over the
    bytes was 10x slower), then one gather.
    """
    some = drop_to > drop_from
    if not some.all():
        drop_from, drop_to, row = drop_from[some], drop_to[some], row[some]
    if not len(drop_from):
        return arr
    bounds = np.empty(2 * len(drop_from) + 2, dtype=np.int64)
    bounds[0], bounds[-1] = 0, len(data)
    bounds[1:-1:2], bounds[2:-1:2] = drop_from, drop_to
    runs = np.ones(len(bounds) - 1, dtype=bool)
    runs[1::2] = False
    kept = np.repeat(runs, np.diff(bounds))
    dropped = np.bincount(row, weights=drop_to - drop_from, minlength=len(arr)).astype(np.int64)
    new_offsets = np.zeros(len(arr) + 1, dtype=np.int64)
    np.cumsum(np.diff(offsets) - dropped, out=new_offsets[1:])
    large = pa.types.is_large_string(arr.type)
    out_type = pa.large_string() if large else pa.string()
    out = pa.Array.from_buffers(
        out_type,
        len(arr),
        [None, pa.py_buffer(new_offsets.astype(np.int64 if large else np.int32)), pa.py_buffer(data[kept])],
    )
    if arr.null_count:
        out = pc.if_else(arr.is_valid(), out, pa.scalar(None, out_type))
    return out


def _cut(arr: pa.Array, at: np.ndarray, keep_suffix: bool) -> pa.Array:
    """Each row with ``at >= 0`` replaced by its bytes from ``at`` on (``keep_suffix``) or
    before ``at``; other rows unchanged.  ``at`` is a byte offset on a character
    boundary (an RE2 find's result), so the result stays valid UTF-8."""
    rows = np.flatnonzero(at >= 0)
    if not len(rows):
        return arr
    offsets, data = _string_buffers(arr)
    starts = offsets[rows]
    if keep_suffix:
        drop_from, drop_to = starts, starts + at[rows]
    else:
        drop_from, drop_to = starts + at[rows], offsets[rows + 1]
    return _drop_byte_ranges(arr, offsets, data, drop_from, drop_to, rows)


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

    Data-Juicer substitutes ``^(.*?)(HEADER)`` (DOTALL) by group 2, the
    header: because the rest of the text is untouched, the result is the
    text from the leftmost position where a header matches, whatever the
    lazy groups inside the header pick.  That position is what an RE2 find
    of HEADER returns (a DFA scan; no capture groups, which made RE2's
    substitution slower than ``regex``), and the cut is a byte slice.
    """

    name = "remove_header_mapper"

    def __init__(self, *, drop_no_head: bool = True, text_key: str = "text", **common: Any) -> None:
        super().__init__(text_key=text_key, **common)
        self.drop_no_head = drop_no_head

    def process_table(self, table: pa.Table) -> pa.Table:
        arr = text_array(table, self.text_key)
        at = _first_match(arr, _HEADER)
        out = _cut(arr, np.where(at > 0, at, -1), keep_suffix=True)
        if self.drop_no_head:
            no_header = (at < 0) & np.asarray(arr.is_valid())  # null texts stay null
            if no_header.any():
                out = pc.if_else(pa.array(no_header), pa.scalar("", out.type), out)
        return replace_text(table, self.text_key, out)


# --- remove_comments_mapper ----------------------------------------------------
# DJ runs re.sub(r"[^\\]%.+$", "", text, flags=MULTILINE), then
# re.sub(r"(?m)^%.*\n?", "", ...).  Read line by line ("." never crosses "\n";
# "$" sits before a "\n" or at the end), they say:
#
# inline: a match starts at the character before a "%" that is not a
#   backslash and has at least one character after it on its line, and runs
#   to the end of that line.  That character may be the "\n" ending the
#   previous line, so a line (not the first) that starts with "%" and has
#   another character is removed together with the newline before it: the
#   line disappears from the list of lines.  In any other line the leftmost
#   such "%" and the character before it go, to the line's end.  (Only the
#   leftmost counts: the match runs to the end of the line, and the
#   character before a line's first "%" is never part of an earlier match,
#   which ends before the previous line's "\n".)
# multiline: then every line starting with "%" goes with the newline after
#   it; the text's last line has none, so it becomes "" (its newline before
#   stays).
# No RE2 is needed: "%", "\\" and "\n" are single bytes that never occur
# inside a UTF-8 sequence, so every test above is a byte comparison.
_NL, _PCT, _BACKSLASH = 10, 37, 92  # "\n", "%", "\\": ASCII, so never inside a UTF-8 sequence


def _lines(offsets: np.ndarray, data: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(start, end, row) of every line of every row, as byte positions in ``data``
    (``str.split("\\n")``'s lines: a row has one more line than it has newlines)."""
    n = len(offsets) - 1
    nl = np.flatnonzero(data == _NL)
    per_row = np.bincount(np.searchsorted(offsets[1:], nl, side="right"), minlength=n) + 1
    first = np.zeros(n, dtype=np.int64)
    np.cumsum(per_row[:-1], out=first[1:])
    last = first + per_row - 1
    starts = np.empty(int(per_row.sum()), dtype=np.int64)
    ends = np.empty_like(starts)
    not_first = np.ones(len(starts), dtype=bool)
    not_first[first] = False
    not_last = np.ones(len(starts), dtype=bool)
    not_last[last] = False
    starts[first], starts[not_first] = offsets[:-1], nl + 1
    ends[last], ends[not_last] = offsets[1:], nl
    return starts, ends, np.repeat(np.arange(n), per_row)


def _last_per_row(keep: np.ndarray, row: np.ndarray) -> np.ndarray:
    """True on each row's last line among those ``keep`` marks."""
    kept = np.flatnonzero(keep)
    last = np.zeros(len(keep), dtype=bool)
    if len(kept):
        last[kept[np.r_[row[kept][1:] != row[kept][:-1], True]]] = True
    return last


def _remove_comments(arr: pa.Array, inline: bool, multiline: bool) -> pa.Array:
    """DJ's two substitutions, as per-line decisions on the bytes (see the comment above).

    Every "%" is located once (numpy over the UTF-8 buffer); for each line the
    leftmost qualifying one decides what goes, the multiline rule then looks
    at what is left, and all removals are applied as byte ranges in one pass.
    """
    offsets, data = _string_buffers(arr)
    start, end, row = _lines(offsets, data)
    length = end - start  # each line's bytes that stay
    keep = np.ones(len(start), dtype=bool)
    if inline:
        pct = np.flatnonzero(data == _PCT)
        line = np.searchsorted(start, pct, side="right") - 1  # empty lines hold no "%"
        ok = (pct > offsets[row[line]]) & (data[np.maximum(pct - 1, 0)] != _BACKSLASH) & (pct + 1 < end[line])
        lines_hit, first = np.unique(line[ok], return_index=True)  # "%"s are in order: first per line
        at = pct[ok][first]
        whole = at == start[lines_hit]  # the character before is the previous line's "\n"
        keep[lines_hit[whole]] = False
        cut_lines, cut = lines_hit[~whole], at[~whole] - 1
        for _ in range(3):  # back to the start of that character: at most 3 continuation bytes
            cut[(data[cut] & 0xC0) == 0x80] -= 1
        length[cut_lines] = cut - start[cut_lines]
    if multiline and len(data):
        starts_pct = keep & (length > 0) & (data[np.minimum(start, len(data) - 1)] == _PCT)
        if starts_pct.any():
            last = _last_per_row(keep, row)
            length[starts_pct & last] = 0  # the text's last line has no newline to take with it
            keep &= ~(starts_pct & ~last)
    # Kept lines lose their tail; dropped lines go with the newline after them, and each
    # row's last kept line also loses the newline after it (there is one only when lines
    # after it were dropped).
    last = _last_per_row(keep, row)
    row_end = offsets[1:][row]
    drop_from = np.where(keep, start + length, start)
    drop_to = np.where(keep & ~last, end, np.minimum(end + 1, row_end))
    return _drop_byte_ranges(arr, offsets, data, drop_from, drop_to, row)


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

    Vectorized over the whole column's UTF-8 bytes with numpy: each rule
    becomes a per-line decision on byte positions (see ``_remove_comments``),
    applied as byte ranges in one pass; no regex and no Python per row.
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

    def process_table(self, table: pa.Table) -> pa.Table:
        if not (self.inline or self.multiline):
            return table
        arr = text_array(table, self.text_key)
        return replace_text(table, self.text_key, _remove_comments(arr, self.inline, self.multiline))


# --- remove_bibliography_mapper --------------------------------------------------
# DJ substitutes (ALTERNATIVES).*$ under DOTALL by "": the greedy ".*" runs to
# the end of the text, so everything from the leftmost position where an
# alternative matches goes.  Only that position matters, and "\{.*\}" (some
# "}" anywhere later) matches exactly where "\{[^}]*\}" (the first "}" later)
# does, which keeps the RE2 find a plain DFA scan.
_BIBLIOGRAPHY = r"\\(?:appendix|begin\{references\}|begin\{REFERENCES\}|begin\{thebibliography\}|bibliography\{[^}]*\})"


@register
class RemoveBibliographyMapper(Mapper):
    """Cut a LaTeX document at its appendix or bibliography, to the end of the text.

    The text is cut at the first ``\\appendix``, ``\\begin{references}``,
    ``\\begin{REFERENCES}``, ``\\begin{thebibliography}`` or
    ``\\bibliography{`` (the last only when a ``}`` follows somewhere after
    it), and everything from there on goes, trailing newline included:
    Data-Juicer's rule.  ``\\bibliographystyle{...}`` is not a cut point,
    but being usually just before ``\\bibliography{...}`` it goes with it.

    One RE2 find locates the cut (see the pattern's comment for why it is
    where ``regex`` cuts), then a byte slice keeps what comes before it.
    """

    name = "remove_bibliography_mapper"

    def __init__(self, *, text_key: str = "text", **common: Any) -> None:
        super().__init__(text_key=text_key, **common)

    def process_table(self, table: pa.Table) -> pa.Table:
        arr = text_array(table, self.text_key)
        out = _cut(arr, _first_match(arr, _BIBLIOGRAPHY), keep_suffix=False)
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
    for pattern, literal in ((_NEWCOMMAND, "\\newcommand"), (_DEF, "\\def")):
        if literal not in text:  # the scan is the costly part; most texts use one form or none
            continue
        for m in pattern.finditer(text):
            macros[m.group(1)] = m.group(2)
    return macros


@functools.lru_cache(maxsize=4096)
def _macro_use(name: str) -> Any:
    """``\\name`` followed by a character other than an ASCII letter or digit (DJ's pattern).

    Names repeat across documents (``\\R``, ``\\eps``), so compiled patterns are kept."""
    return regex.compile("(" + regex.escape(name) + ")([^a-zA-Z0-9])")


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
        text = _macro_use(name).sub(lambda m, v=value: v + m.group(2), text)
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
