"""bench/ is one package: every module imports as ``bench.*``, and ``python -m bench`` knows every benchmark.

A benchmark that is not in ``bench.SECTIONS`` cannot be run by the one entry
point, and one that edits ``sys.path`` imports something other than what its
caller imported; both fail here.  Nothing is measured.
"""

from __future__ import annotations

import importlib
import os
import pkgutil
import re
import subprocess
import sys

import pytest

import bench

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODULES = sorted(m.name for m in pkgutil.walk_packages(bench.__path__, "bench."))


def _source(module: str) -> str:
    rel = module.replace(".", os.sep)
    path = os.path.join(ROOT, rel, "__init__.py") if os.path.isdir(os.path.join(ROOT, rel)) else f"{rel}.py"
    with open(os.path.join(ROOT, path), encoding="utf-8") as fh:
        return fh.read()


def test_the_package_holds_the_benchmarks():
    assert {"bench.run_bench", "bench.run_all", "bench.ops.run_ops_bench", "bench.report.svg"} <= set(MODULES)


@pytest.mark.parametrize("module", MODULES)
def test_every_module_imports_as_part_of_the_package(module):
    importlib.import_module(module)


@pytest.mark.parametrize("module", MODULES)
def test_no_module_edits_sys_path(module):
    assert not re.search(r"sys\.path\.(insert|append|extend|remove)\(|sys\.path\s*=", _source(module)), module


def test_every_runnable_module_is_a_registered_section_or_a_child_entry_point():
    runnable = {m for m in MODULES if 'if __name__ == "__main__":' in _source(m)} - {"bench.__main__"}
    sections = {module for module, _summary in bench.SECTIONS.values()}
    assert runnable - sections - set(bench.CHILD_ENTRY_POINTS) == set(), "register it in bench.SECTIONS"
    assert set(bench.CHILD_ENTRY_POINTS) <= runnable


@pytest.mark.parametrize("name", sorted(bench.SECTIONS))
def test_every_section_has_a_main_taking_argv(name):
    module = importlib.import_module(bench.SECTIONS[name][0])
    assert callable(module.main)
    assert "argv" in module.main.__code__.co_varnames[: module.main.__code__.co_argcount], name


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bench", *args], cwd=ROOT, capture_output=True, text=True, timeout=120)


def test_help_lists_every_section_with_its_summary():
    out = _run("--help")
    assert out.returncode == 0, out.stderr
    listed = dict(re.findall(r"^  (\S+)\s+(.+)$", out.stdout, re.M))
    assert listed == {name: summary for name, (_module, summary) in bench.SECTIONS.items()}


def test_an_unknown_section_is_refused_with_the_list():
    out = _run("no-such-section")
    assert out.returncode == 2
    assert "unknown section 'no-such-section'" in out.stderr and "e2e" in out.stderr


def test_a_section_gets_its_own_arguments():
    out = _run("plot", "--help")
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("usage: python -m bench plot") and "--json" in out.stdout
