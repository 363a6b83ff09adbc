"""User-written regular expressions, compiled the way Data-Juicer compiles them.

Data-Juicer compiles every pattern a recipe gives it (``clean_email_mapper``'s
``pattern``, the near-dup deduplicators' ``ignore_pattern``, ...) with the
``regex`` package, not Python's ``re``: ``\\p{P}``, ``\\p{Han}``, ``\\X``,
possessive quantifiers and POSIX classes all work there, and its ``\\w``,
``\\d``, ``\\s`` and ``\\b`` follow its own Unicode tables.  To give the same
result for every pattern a user can write, ops compile user patterns here,
with ``regex`` and the flags Data-Juicer uses for that op, and run them row
by row with it.

The vectorized RE2 kernel (``pyarrow.compute``) is several times faster, but
RE2 is a different engine.  ``to_re2`` translates a pattern only when a
conservative syntactic check proves both engines match the same substrings:
literals, sets of literals and ranges, ``.``, ``\\d``/``\\s`` (expanded to
``regex``'s own code-point sets, since RE2's are ASCII-only), groups,
alternation, greedy and lazy repeats, ``^``/``\\A`` and ``\\Z``, and only
patterns that cannot match the empty string (the engines place empty matches
differently in a substitution).  Anything else -- ``\\w``, ``\\b``, ``$``,
lookarounds, backreferences, inline flags, possessive or atomic groups,
Unicode properties, anything ``re``'s parser cannot read or warns about --
takes the per-row ``regex`` path.  RE2 and a backtracking engine choose the
same (leftmost-first) match on that subset, so ``sub`` results are identical.

The check reads the pattern with Python's own ``re`` parser (a syntax tree
is what makes the proof possible); a pattern that parser reads differently
from ``regex`` is refused by the guards in ``_parse_for_re2`` (a literal
``{`` that ``regex`` may read as a fuzzy-match constraint, a possible nested
set or set operation).

``compile_user_pattern`` is the one place that turns a bad pattern into an
``OpArgumentError`` naming the op, the argument, the pattern and the position,
so ``dj-airflow validate`` reports it as ``process[i].<op>.<arg>`` before any
work starts.
"""

from __future__ import annotations

import functools
import re
import warnings
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import regex

from airflow_provider_dj.ops.base import OpArgumentError
from airflow_provider_dj.ops.kernels.text import REGEX_DIGIT, REGEX_SPACE, re2_class, strip_raw_prefix

try:  # Python >= 3.11
    import re._constants as _sre_c
    import re._parser as _sre_p
except ImportError:  # pragma: no cover - Python 3.10
    import sre_constants as _sre_c  # type: ignore[no-redef]
    import sre_parse as _sre_p  # type: ignore[no-redef]

try:  # the check regex's own sub() runs on a replacement template
    from regex._main import _compile_replacement_helper as _regex_template
except ImportError:  # pragma: no cover - a regex release that moved it
    _regex_template = None

#: Flags Data-Juicer's pattern ops pass (``regex.DOTALL`` for the cleaners).
DOTALL = regex.DOTALL

_RE2_MAX_REPEAT = 1000
# Global flags a translatable pattern may carry: UNICODE is implied for str
# patterns, DOTALL is handled by the translation of ".", VERBOSE only changes
# how the parser reads the pattern (both engines drop the same whitespace).
_OK_GLOBAL_FLAGS = re.UNICODE | re.DOTALL | re.VERBOSE


def _describe_position(pattern: str, pos: int | None) -> str:
    if pos is None:
        return ""
    return (
        f" at position {pos} (near {pattern[pos : pos + 12]!r})"
        if pos < len(pattern)
        else f" at position {pos} (end of pattern)"
    )


def compile_user_pattern(pattern: str, *, op: str, arg: str, flags: int = 0, engine: str = "regex") -> Any:
    """Compile ``pattern`` with ``flags``, as Data-Juicer does for ``op``.

    ``engine`` is ``"regex"`` (the package; what Data-Juicer uses for its
    cleaners and deduplicators, and what this project's own ops use) or
    ``"re"``, only for checking the arguments of adapted Data-Juicer ops that
    Data-Juicer itself compiles with Python's ``re`` (its LLM output parsers).
    Raises ``OpArgumentError(arg, ...)`` naming the op, the argument, the
    pattern and the error position, so the recipe loader can report
    ``process[i].<op>.<arg>`` before any work starts.
    """
    if not isinstance(pattern, str):
        raise OpArgumentError(arg, f"{op}: {arg} must be a string pattern, got {pattern!r} ({type(pattern).__name__})")
    if engine not in ("regex", "re"):
        raise ValueError(f"engine must be 'regex' or 're', got {engine!r}")
    try:
        return _compile(pattern, flags, engine)
    except (regex.error, re.error) as exc:
        where = _describe_position(pattern, exc.pos)
        msg = getattr(exc, "msg", str(exc))
        if engine == "regex":
            how = (
                "Patterns are compiled with the 'regex' package, as Data-Juicer compiles them (\\p{..} "
                "classes, possessive quantifiers and \\X are fine)"
            )
        else:
            how = (
                f"Data-Juicer compiles this argument of {op} with Python's 're' module, which has no \\p{{..}} classes"
            )
        raise OpArgumentError(
            arg, f"{op}: {arg} {pattern!r} does not compile{where}: {msg}. {how}; fix the pattern"
        ) from None
    except (OverflowError, RecursionError, ValueError) as exc:
        raise OpArgumentError(arg, f"{op}: {arg} {pattern!r} does not compile: {exc}; simplify the pattern") from None


@functools.lru_cache(maxsize=256)
def _compile(pattern: str, flags: int, engine: str = "regex") -> Any:
    return regex.compile(pattern, flags) if engine == "regex" else re.compile(pattern, flags)


def check_replacement(compiled: regex.Pattern, repl: str, *, op: str, arg: str = "repl") -> None:
    """Raise ``OpArgumentError`` if ``repl`` is not a valid ``sub`` template for ``compiled``.

    ``regex`` only reads a template when a match is substituted, i.e. mid-run
    on the first matching row; checking it here moves the error to validation.
    """
    if not isinstance(repl, str):
        raise OpArgumentError(arg, f"{op}: {arg} must be a string, got {repl!r} ({type(repl).__name__})")
    if "\\" not in repl:
        return
    problem = None
    try:
        items = _regex_template(compiled, repl) if _regex_template is not None else []
        bad = [g for g in items if isinstance(g, int) and g > compiled.groups]
        if bad:
            problem = f"it refers to group {bad[0]}, but the pattern has {compiled.groups} group(s)"
        if _regex_template is None:
            _sre_p.parse_template(repl, compiled)
    except (regex.error, re.error, IndexError) as exc:
        problem = str(exc)
    if problem:
        raise OpArgumentError(
            arg,
            f"{op}: {arg} {repl!r} is not a valid replacement for pattern {compiled.pattern!r} ({problem}); "
            "escape backslashes as \\\\ or refer only to groups the pattern defines",
        )


# --- the RE2 fast path ----------------------------------------------------------
class _Untranslatable(Exception):
    pass


def _name(code: Any) -> str:
    return getattr(code, "name", str(code))


def _cp(c: int) -> str:
    return chr(c) if chr(c).isascii() and chr(c).isalnum() else f"\\x{{{c:X}}}"


def _category(name: str) -> tuple[frozenset[str], bool]:
    """(set, negated) for \\d \\s \\D \\S as the ``regex`` module defines them."""
    table = {
        "CATEGORY_DIGIT": (REGEX_DIGIT, False),
        "CATEGORY_NOT_DIGIT": (REGEX_DIGIT, True),
        "CATEGORY_SPACE": (REGEX_SPACE, False),
        "CATEGORY_NOT_SPACE": (REGEX_SPACE, True),
    }
    if name not in table:  # \w, \W: the engines' word definitions differ
        raise _Untranslatable(name)
    return table[name]


def _emit_in(items: list[tuple[Any, Any]]) -> str:
    cats = [av for op, av in items if _name(op) == "CATEGORY"]
    if len(items) == 1 and cats:  # \d, \S, ... (the parser wraps them in a set)
        members, negated = _category(_name(cats[0]))
        return re2_class(members, negate=negated)
    negate = False
    chars: set[str] = set()
    for op, av in items:
        name = _name(op)
        if name == "NEGATE":
            negate = True
        elif name == "LITERAL":
            chars.add(chr(av))
        elif name == "RANGE":
            chars.update(map(chr, range(av[0], av[1] + 1)))
        elif name == "CATEGORY":
            members, negated = _category(_name(av))
            if negated:
                raise _Untranslatable("negated category inside a set")
            chars |= members
        else:
            raise _Untranslatable(name)
    if not chars:
        raise _Untranslatable("empty set")
    return re2_class(chars, negate=negate)


def _emit(seq: Any, dotall: bool) -> str:
    out = []
    for op, av in seq:
        name = _name(op)
        if name == "LITERAL":
            if av in (0x7B, 0x7D):  # "{" "}": regex may read a brace as a fuzzy constraint
                raise _Untranslatable("brace literal")
            out.append(_cp(av))
        elif name == "NOT_LITERAL":
            out.append(f"[^\\x{{{av:X}}}]")
        elif name == "ANY":
            out.append("(?s:.)" if dotall else "[^\\n]")
        elif name == "IN":
            out.append(_emit_in(av))
        elif name == "CATEGORY":
            members, negated = _category(_name(av))
            out.append(re2_class(members, negate=negated))
        elif name == "BRANCH":
            out.append("(?:" + "|".join(_emit(alt, dotall) for alt in av[1]) + ")")
        elif name == "SUBPATTERN":
            _group, add_flags, del_flags, sub = av
            if add_flags or del_flags:
                raise _Untranslatable("inline flags")
            out.append("(?:" + _emit(sub, dotall) + ")")
        elif name in ("MAX_REPEAT", "MIN_REPEAT"):
            lo, hi, sub = av
            unbounded = hi == _sre_c.MAXREPEAT
            if lo > _RE2_MAX_REPEAT or (not unbounded and hi > _RE2_MAX_REPEAT):
                raise _Untranslatable("repeat count")
            quant = "{%d,%s}" % (lo, "" if unbounded else hi)
            out.append("(?:" + _emit(sub, dotall) + ")" + quant + ("?" if name == "MIN_REPEAT" else ""))
        elif name == "AT" and _name(av) in ("AT_BEGINNING", "AT_BEGINNING_STRING"):
            out.append("\\A")
        elif name == "AT" and _name(av) == "AT_END_STRING":
            out.append("\\z")
        else:  # $, \b, lookarounds, backrefs, atomic/possessive, conditionals
            raise _Untranslatable(name)
    return "".join(out)


@functools.lru_cache(maxsize=256)
def to_re2(pattern: str, flags: int = 0) -> str | None:
    """An RE2 pattern matching exactly what ``regex.compile(pattern, flags)`` matches, or None.

    None means "use the per-row ``regex`` path": the pattern (or ``flags``,
    anything but DOTALL and VERBOSE) uses a construct outside the proven subset described
    in the module docstring, or ``regex`` itself refuses it.
    """
    if flags & ~(regex.DOTALL | regex.VERBOSE):
        return None
    try:
        regex.compile(pattern, flags)
        with warnings.catch_warnings():
            # re warns where regex reads differently (possible nested set, set operations)
            warnings.simplefilter("error")
            parsed = _sre_p.parse(
                pattern, (re.DOTALL if flags & regex.DOTALL else 0) | (re.VERBOSE if flags & regex.VERBOSE else 0)
            )
        if parsed.state.flags & ~_OK_GLOBAL_FLAGS or parsed.getwidth()[0] == 0:
            return None
        out = _emit(parsed, dotall=bool(parsed.state.flags & re.DOTALL))
        pc.replace_substring_regex(pa.array([""]), pattern=out, replacement="")  # RE2 must accept it
        return out
    except (_Untranslatable, regex.error, re.error, Warning, pa.ArrowInvalid, RecursionError, OverflowError):
        return None


def re2_equivalent(pattern: str, flags: int = 0) -> bool:
    """Whether the vectorized RE2 kernel gives exactly ``regex``'s result for this pattern."""
    return to_re2(pattern, flags) is not None


def re2_replacement(repl: str) -> str | None:
    """``repl`` as an RE2 replacement with the same meaning, or None.

    Only a template without backslashes means the same literal text to both
    engines (their escape and group-reference syntaxes differ).
    """
    return repl if "\\" not in repl else None


__all__ = [
    "DOTALL",
    "check_replacement",
    "compile_user_pattern",
    "re2_equivalent",
    "re2_replacement",
    "strip_raw_prefix",
    "to_re2",
]
