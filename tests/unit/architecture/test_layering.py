"""The package's layers hold: every import of every module is read (AST, function-level ones too) and checked.

Layers, bottom up (docs/architecture.md): ``core`` (file access, errors, host seam) <- ``ops`` <- ``engine``
<- the Airflow side (operators, sensors, triggers, hooks, dag_factory, cli, monitor, control, assets, ...).
A layer imports only itself and the layers below it; ``engine``, ``ops`` and ``core`` import no Airflow;
no two modules import each other, directly or around a longer loop.
"""

from __future__ import annotations

import os

import import_graph as graph
import pytest

P = graph.PACKAGE
#: Airflow-free leaf modules outside the layers that any layer may use (they import only core/).
LEAVES = (f"{P}.sample_corpus", f"{P}.settings")
#: layer -> the package prefixes it may import (besides the standard library and third-party packages).
ALLOWED = {
    f"{P}.core": (f"{P}.core",),
    f"{P}.ops": (f"{P}.ops", f"{P}.core"),
    f"{P}.engine": (f"{P}.engine", f"{P}.ops", f"{P}.core"),
}
AIRFLOW_FREE = (f"{P}.core", f"{P}.ops", f"{P}.engine", *LEAVES)


def _under(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def _where(imp: graph.Import) -> str:
    return f"{os.path.relpath(imp.path, graph.ROOT)}:{imp.line}"


@pytest.fixture(scope="module")
def imports() -> list[graph.Import]:
    return graph.all_imports()


def test_the_import_reader_sees_function_level_imports(imports):
    """Guard for the guard: the reader must see an import inside a function body."""
    inner = [i for i in imports if i.in_function]
    assert len(inner) > 50, "the AST reader lost function-level imports"
    assert any(i.importer == f"{P}.ops.registry" and i.target == f"{P}.ops.dj_compat.adapter" for i in inner)


def test_engine_ops_and_core_import_no_airflow(imports):
    bad = [
        f"{_where(i)}: {i.importer} imports {i.target} (rule: engine/, ops/ and core/ import no Airflow; "
        f"take what Airflow provides as an argument or through core/host.py)"
        for i in imports
        if any(_under(i.importer, layer) for layer in AIRFLOW_FREE) and _under(i.target, "airflow")
    ]
    assert bad == [], "\n".join(bad)


def test_each_layer_imports_only_itself_and_the_layers_below(imports):
    bad = []
    for i in imports:
        if not _under(i.target, P) or i.target == P:
            continue
        for layer, allowed in ALLOWED.items():
            if _under(i.importer, layer):
                if not any(_under(i.target, a) for a in allowed) and i.target not in LEAVES:
                    bad.append(
                        f"{_where(i)}: {i.importer} imports {i.target} "
                        f"(rule: {layer.split('.')[-1]}/ may import only {', '.join(a.split('.')[-1] for a in allowed)})"
                    )
    assert bad == [], "\n".join(bad)


def test_leaf_modules_import_only_core(imports):
    bad = [
        f"{_where(i)}: {i.importer} imports {i.target} (rule: a leaf module imports only core/)"
        for i in imports
        if i.importer in LEAVES and _under(i.target, P) and not _under(i.target, f"{P}.core")
    ]
    assert bad == [], "\n".join(bad)


def test_no_import_cycles(imports):
    cycles = graph.cycles(graph.internal_graph(imports))
    lines = []
    for comp in cycles:
        members = set(comp)
        edges = [i for i in imports if i.importer in members and i.target in members and i.target != i.importer]
        lines.append(
            "cycle: "
            + " <-> ".join(comp)
            + "\n"
            + "\n".join(f"  {_where(e)}: {e.importer} -> {e.target}" for e in edges)
        )
    assert cycles == [], "\n".join(lines)


def test_the_cycle_finder_finds_a_planted_cycle():
    g = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert graph.cycles(g) == [["a", "b", "c"]]
