"""Test-suite style rules that keep a failing test cheap.

A raw ``assert a == b`` between an export's or a file's bytes makes pytest diff megabytes character by
character when they differ (minutes; a CI run once hung on it): such comparisons go through
``tests/helpers_compare.assert_same_bytes``, which names the first differing line and each side's hash."""

from __future__ import annotations

import ast
import os

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

#: Calls whose result is a whole file's or export's bytes.
_BYTES_CALLS = {"read_bytes", "export", "_read", "_bytes"}


def _call_name(node: ast.AST) -> str | None:
    if not isinstance(node, ast.Call):
        return None
    func = node.func
    if isinstance(func, ast.Attribute):
        if func.attr == "read" and isinstance(func.value, ast.Name) and func.value.id == "fh" and not node.args:
            return "fh.read"
        return func.attr
    return func.id if isinstance(func, ast.Name) else None


def _raw_bytes_compares(tree: ast.AST) -> list[int]:
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Assert):
            continue
        for cmp in ast.walk(node.test):
            if not isinstance(cmp, ast.Compare) or not any(isinstance(op, (ast.Eq, ast.NotEq)) for op in cmp.ops):
                continue
            sides = [cmp.left, *cmp.comparators]
            if any(isinstance(s, ast.Constant) for s in sides):
                continue  # a literal on one side: small by construction
            if any(_call_name(s) in _BYTES_CALLS | {"fh.read"} for s in sides):
                found.append(cmp.lineno)
    return found


def test_no_raw_equality_asserts_on_whole_files_or_exports():
    offenders = []
    for d, _dirs, files in os.walk(TESTS):
        for name in files:
            if name.endswith(".py") and name != "helpers_compare.py":
                path = os.path.join(d, name)
                with open(path, encoding="utf-8") as fh:
                    tree = ast.parse(fh.read(), path)
                offenders += [f"{os.path.relpath(path, TESTS)}:{line}" for line in _raw_bytes_compares(tree)]
    assert offenders == [], (
        "compare whole files and exports with tests.helpers_compare.assert_same_bytes, not a raw ==: "
        + ", ".join(offenders)
    )
