"""Every import of the package's modules, read from their source (AST), function-level ones included.

Used by the layering test: a rule about what may import what holds only if it is checked on every
import, not only on the ones at the top of a file.
"""

from __future__ import annotations

import ast
import os
from dataclasses import dataclass

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
PACKAGE = "airflow_provider_dj"


@dataclass(frozen=True)
class Import:
    """One imported module: ``importer`` (dotted) imports ``target`` (dotted) at ``path:line``."""

    importer: str
    target: str
    path: str
    line: int
    in_function: bool


def module_files() -> dict[str, str]:
    """Dotted module name -> file path, for every module of the package."""
    out: dict[str, str] = {}
    base = os.path.join(ROOT, PACKAGE)
    for dirpath, _dirs, files in os.walk(base):
        for name in files:
            if not name.endswith(".py"):
                continue
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, ROOT)[: -len(".py")].split(os.sep)
            if rel[-1] == "__init__":
                rel = rel[:-1]
            out[".".join(rel)] = path
    return out


def _resolve(importer: str, is_package: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    parts = importer.split(".")
    base = parts if is_package else parts[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def imports_of(module: str, path: str, modules: dict[str, str]) -> list[Import]:
    """What ``module`` imports; ``from pkg import name`` counts as importing ``pkg.name`` when that is a module."""
    with open(path, encoding="utf-8") as fh:
        tree = ast.parse(fh.read(), filename=path)
    is_package = path.endswith("__init__.py")
    found: list[Import] = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            inner = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if isinstance(child, ast.Import):
                for alias in child.names:
                    found.append(Import(module, alias.name, path, child.lineno, in_function))
            elif isinstance(child, ast.ImportFrom):
                target = _resolve(module, is_package, child)
                for alias in child.names:
                    sub = f"{target}.{alias.name}"
                    found.append(Import(module, sub if sub in modules else target, path, child.lineno, in_function))
            visit(child, inner)

    visit(tree, False)
    return found


def all_imports() -> list[Import]:
    modules = module_files()
    out: list[Import] = []
    for module, path in sorted(modules.items()):
        out.extend(imports_of(module, path, modules))
    return out


def internal_graph(imports: list[Import]) -> dict[str, set[str]]:
    """Module -> the package modules it imports (the package's own ``__init__`` chains left out)."""
    modules = module_files()
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for imp in imports:
        if imp.target in modules and imp.target != imp.importer:
            graph[imp.importer].add(imp.target)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def strong(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    import sys

    old = sys.getrecursionlimit()
    sys.setrecursionlimit(max(old, 10_000))
    try:
        for v in sorted(graph):
            if v not in index:
                strong(v)
    finally:
        sys.setrecursionlimit(old)
    return out
