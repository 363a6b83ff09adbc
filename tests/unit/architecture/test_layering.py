"""The package's layers hold: every import of every module is read (AST, function-level ones too) and checked.

Layers, bottom up (docs/architecture.md): ``core`` (file access, errors, host seam) <- ``ops`` <- ``engine``
<- the Airflow side (operators, sensors, triggers, hooks, dag_builder, cli, client, plugins, ...).
A layer imports only itself and the layers below it; ``engine``, ``ops`` and ``core`` import no Airflow;
no two modules import each other, directly or around a longer loop.

Inside ``engine`` the sub-packages are layers too, in the order of ``ENGINE_ORDER`` (bottom first): a
sub-package imports only itself and the sub-packages before it, so no two of them form a cycle.
"""

from __future__ import annotations

import os

import import_graph as graph
import pytest

P = graph.PACKAGE
#: Airflow-free leaf modules outside the layers that any layer may use (they import only core/).
LEAVES = (f"{P}.testing", f"{P}.testing.sample_corpus", f"{P}.settings")
#: layer -> the package prefixes it may import (besides the standard library and third-party packages).
ALLOWED = {
    f"{P}.core": (f"{P}.core",),
    f"{P}.ops": (f"{P}.ops", f"{P}.core"),
    f"{P}.engine": (f"{P}.engine", f"{P}.ops", f"{P}.core"),
}
AIRFLOW_FREE = (f"{P}.core", f"{P}.ops", f"{P}.engine", *LEAVES)
#: The engine's sub-packages, bottom first (docs/architecture.md, "The engine's own layers").  Each may
#: import only itself and the ones before it.  A new sub-package must be placed here.
ENGINE_ORDER = (
    "config",  # the recipe model: YAML in, a frozen validated recipe out
    "jobdir",  # the job directory's primitives: layout, identity, lock, integrity, events, faults
    "input",  # input files, row ranges, exact partitions and their content hashes
    "gpu",  # the GPU model planning reads: the probe report, stage profiles, the actor planner
    "planning",  # recipe -> plan: segments, execution groups, concurrency
    "storage",  # checkpoints, global ops' keys and masks, resume points, a job's state read back
    "history",  # deduplication against earlier exports
    "observe",  # per-row lineage, its queries and reuse, the tracer
    "execution",  # segments on partitions, ops on tables, global ops, Ray dispatch
    "output",  # the export's fields, row accounting, parallel parts, checking a written file
    "preflight",  # GPU preflight: probing CUDA ops on a sample through the op runner
    "job",  # a job's lifecycle: setup, resume proof, export, summary, status, waiting, retention
    "runner",  # the job's steps and a local executor
)
ENGINE = f"{P}.engine"


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


def _engine_sub(module: str) -> str | None:
    """The engine sub-package ``module`` belongs to (None outside the engine or for ``engine`` itself)."""
    if not module.startswith(ENGINE + "."):
        return None
    return module[len(ENGINE) + 1 :].split(".")[0]


def test_the_engine_order_names_every_sub_package():
    """A new engine sub-package must be placed in ENGINE_ORDER, and every name there must exist; no
    engine module sits outside a sub-package (``engine/__init__.py``, the lazy entry point, aside)."""
    existing: set[str] = set()
    loose = []
    for module, path in graph.module_files().items():
        if not module.startswith(ENGINE + "."):
            continue
        rel = module[len(ENGINE) + 1 :]
        if "." in rel or path.endswith("__init__.py"):
            existing.add(rel.split(".")[0])
        else:
            loose.append(module)
    unplaced = sorted(existing - set(ENGINE_ORDER))
    assert unplaced == [], f"place these engine sub-packages in ENGINE_ORDER (test_layering.py): {unplaced}"
    assert len(set(ENGINE_ORDER)) == len(ENGINE_ORDER), "ENGINE_ORDER names a sub-package twice"
    stale = sorted(set(ENGINE_ORDER) - existing)
    assert stale == [], f"ENGINE_ORDER names sub-packages that do not exist: {stale}"
    assert sorted(loose) == [], f"engine modules outside any sub-package (put each in one): {sorted(loose)}"


def test_engine_sub_packages_import_only_lower_ones(imports):
    rank = {name: i for i, name in enumerate(ENGINE_ORDER)}
    bad = []
    for i in imports:
        src, dst = _engine_sub(i.importer), _engine_sub(i.target)
        if src is None or dst is None or src == dst or src not in rank or dst not in rank:
            continue
        if rank[dst] > rank[src]:
            bad.append(
                f"{_where(i)}: {i.importer} imports {i.target} "
                f"(rule: engine/{src}/ may import only engine sub-packages below it: "
                f"{', '.join(ENGINE_ORDER[: rank[src]]) or 'none'}; move the name it needs down)"
            )
    assert bad == [], "\n".join(bad)


def test_no_cycle_between_engine_sub_packages(imports):
    """Independent of ENGINE_ORDER: the sub-package graph itself has no loop, counting function-level imports."""
    subs: dict[str, set[str]] = {}
    where: dict[tuple[str, str], graph.Import] = {}
    for i in imports:
        src, dst = _engine_sub(i.importer), _engine_sub(i.target)
        if src is None or dst is None:
            continue
        subs.setdefault(src, set())
        subs.setdefault(dst, set())
        if src != dst:
            subs[src].add(dst)
            where.setdefault((src, dst), i)
    cycles = graph.cycles(subs)
    lines = []
    for comp in cycles:
        members = set(comp)
        edges = [(a, b) for (a, b) in sorted(where) if a in members and b in members]
        lines.append(
            "cycle: "
            + " <-> ".join(comp)
            + " (rule: no cycle between engine sub-packages)\n"
            + "\n".join(f"  {_where(where[e])}: {where[e].importer} -> {where[e].target}" for e in edges)
        )
    assert cycles == [], "\n".join(lines)


def test_the_engine_order_check_catches_an_upward_import():
    """Guard for the guard: a planted import from a lower sub-package to a higher one is reported."""
    planted = graph.Import(f"{ENGINE}.config.recipe", f"{ENGINE}.job.setup", os.path.join(graph.ROOT, "x.py"), 1, True)
    with pytest.raises(AssertionError, match=r"x.py:1: .*engine/config/ may import only"):
        test_engine_sub_packages_import_only_lower_ones([planted])
