"""No module of the package uses another module's private name (``_name``), read from the source (AST).

A name another module needs is a seam: it is public (no underscore, a docstring saying what it
promises) or it moves to where it is used.  Tests may import private names; the package may not.
Counted: ``from airflow_provider_dj.x import _name`` (relative forms and function-level imports too),
``module._name`` on an imported package module, and importing a private module.  Third-party
private names are out of scope.
"""

from __future__ import annotations

import ast
import os

import import_graph as graph

P = graph.PACKAGE

#: (importing module, "source:name") -> why it is allowed for now.  Keep it empty: a private name that
#: another module needs is made public or moved.  Files another change is editing may be listed here
#: with the reason "being edited by another change", until that change lands.
ALLOWED: dict[tuple[str, str], str] = {}


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def private_uses(module: str, source: str, modules: dict[str, str], *, is_package: bool) -> list[tuple[int, str]]:
    """(line, "source:name") for each use in ``source`` (module ``module``) of another package module's
    private name."""
    tree = ast.parse(source)
    aliases: dict[str, str] = {}  # local name -> package module it is bound to
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith(P):
                    aliases[alias.asname or alias.name] = alias.name
                    if any(_private(part) for part in alias.name.split(".")):
                        found.append((node.lineno, f"{alias.name}:"))
        elif isinstance(node, ast.ImportFrom):
            target = graph._resolve(module, is_package, node)
            if not target.startswith(P):
                continue
            if any(_private(part) for part in target.split(".")) and target != module:
                found.append((node.lineno, f"{target}:"))
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                if sub in modules:
                    aliases[alias.asname or alias.name] = sub
                if _private(alias.name) and target != module:
                    found.append((node.lineno, f"{target}:{alias.name}"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr):
            bound = aliases.get(ast.unparse(node.value))
            if bound is not None and bound != module:
                found.append((node.lineno, f"{bound}:{node.attr}"))
    return found


def test_no_module_uses_another_modules_private_name():
    modules = graph.module_files()
    bad = []
    for module, path in sorted(modules.items()):
        with open(path, encoding="utf-8") as fh:
            source = fh.read()
        for line, what in private_uses(module, source, modules, is_package=path.endswith("__init__.py")):
            if (module, what) not in ALLOWED:
                bad.append(f"{os.path.relpath(path, graph.ROOT)}:{line}: {module} uses {what}")
    assert bad == [], (
        "make each name public (no underscore, a docstring saying what it promises) or move it to where it "
        "is used:\n" + "\n".join(bad)
    )


def test_every_allowed_entry_is_still_needed():
    modules = graph.module_files()
    used = set()
    for module, path in modules.items():
        with open(path, encoding="utf-8") as fh:
            for _line, what in private_uses(module, fh.read(), modules, is_package=path.endswith("__init__.py")):
                used.add((module, what))
    assert sorted(set(ALLOWED) - used) == [], "ALLOWED lists uses that are gone: remove them"


def test_the_reader_finds_each_form_of_private_use():
    """Guard for the guard: planted uses of each form are reported, and a module's own names are not."""
    modules = {f"{P}.engine.a": "", f"{P}.engine.b": "", f"{P}.engine": ""}
    source = (
        f"from {P}.engine.b import _x, public\n"
        "from .b import _y\n"
        f"from {P}.engine import b as bee\n"
        f"import {P}.engine.b\n"
        "def f():\n"
        f"    from {P}.engine.a import _own\n"
        "    return bee._z, _own\n"
        f"{P}.engine.b._w\n"
    )
    found = {what for _line, what in private_uses(f"{P}.engine.a", source, modules, is_package=False)}
    assert found == {f"{P}.engine.b:_x", f"{P}.engine.b:_y", f"{P}.engine.b:_z", f"{P}.engine.b:_w"}
